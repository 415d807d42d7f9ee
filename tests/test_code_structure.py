"""The package's shape: no import circle between its modules (type-only imports aside), and no module over 500 lines
unless its docstring says why it is one module."""

from __future__ import annotations

import ast

from conftest import REPO

PACKAGE = REPO / "snakeskills"


def module_name(path) -> str:
    name = ".".join(path.relative_to(REPO).with_suffix("").parts)
    return name.removesuffix(".__init__")


def import_graph() -> dict[str, set[str]]:
    """Each module's imports of other package modules, at the top or inside functions, but not under
    ``if TYPE_CHECKING:``."""
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        type_only = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING"
            for inner in ast.walk(node)
        }
        for node in ast.walk(tree):
            if id(node) in type_only or not isinstance(node, ast.ImportFrom) or node.module is None:
                continue
            targets = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
            graph[name] |= {target for target in targets if target in modules and target != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    found = []

    def walk(start: str, node: str, path: list[str]) -> None:
        for target in sorted(graph[node]):
            if target == start:
                found.append(path)
            elif target > start and target not in path:
                walk(start, target, [*path, target])

    for name in sorted(graph):
        walk(name, name, [name])
    return found


def test_the_checker_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_itself_through_others():
    assert circles(import_graph()) == []


def test_long_modules_say_why_they_are_one():
    for path in sorted(PACKAGE.rglob("*.py")):
        lines = path.read_text(encoding="utf-8").count("\n")
        docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        assert lines <= 500 or "lines" in docstring, f"{path.relative_to(REPO)}: {lines} lines, and no reason given"
