"""The package's rooms, read from its source: every import between its modules (at the top or inside a function)
forms no circle, no stage imports the planner above it, stage folders import each other only downward in
``LAYERS``, the top of the package keeps a dozen modules at most, and a module over 500 lines says why."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "snakeskills"

# the stage folders from the bottom up: a folder may import from folders below it, never from one above it (the
# top-level helpers, errors, io, job, ..., sit under all of them; plan/ is the planner above every stage)
LAYERS = (
    "settings",
    "models",
    "sandbox",
    "backends",
    "generation",
    "judging",
    "tools",
    "data",
    "training",
    "synthesis",
    "results",
    "plan",
)
# top-level modules that are entry points over the stages (they may import any stage; no stage imports them)
ENTRY_POINTS = {"cli"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name: str) -> set[str]:
    """The package's modules that ``name`` imports anywhere in its source (a package import counts as its
    ``__init__``; ``from package import module`` as that module)."""
    path = MODULES[name]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            targets = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        found.update(target for target in targets if target in MODULES and target != name)
    return found


GRAPH = {name: imports_of(name) for name in MODULES}


def room(name: str) -> str:
    """A module's stage folder, or "top" for the package's own modules."""
    parts = name.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and MODULES[name].name == "__init__.py") else "top"


def find_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (its modules in order, the first one again at the end), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(name: str) -> list[str] | None:
        state[name] = 1
        stack.append(name)
        for target in sorted(graph[name]):
            if state.get(target) == 1:
                return stack[stack.index(target) :] + [target]
            if target not in state and (circle := visit(target)):
                return circle
        stack.pop()
        state[name] = 2
        return None

    for name in sorted(graph):
        if name not in state and (circle := visit(name)):
            return circle
    return None


def test_the_checker_finds_a_circle():
    assert find_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_circle({"a": {"b"}, "b": set()}) is None


def test_no_import_circle():
    """Type-only imports count too: a circle of them is still two modules that cannot be read apart."""
    assert find_circle(GRAPH) is None


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_run_down_the_stages(name):
    here = room(name)
    for target in sorted(GRAPH[name]):
        there = room(target)
        if there == "top":
            short = target.split(".")[-1]
            assert short not in ENTRY_POINTS or here == "top", f"{name} imports the entry point {target}"
            continue
        if here == "top":
            assert name.split(".")[-1] in ENTRY_POINTS, f"{name}, a helper at the top, imports the stage {target}"
            continue
        if here == there:
            continue
        assert LAYERS.index(there) < LAYERS.index(here), (
            f"{name} ({here}/) imports {target} ({there}/), a room above it in LAYERS"
        )


def test_every_folder_is_a_known_room():
    folders = {path.parent.name for path in PACKAGE.glob("*/__init__.py")}
    assert folders == set(LAYERS)


def test_a_dozen_modules_at_the_top_at_most():
    top = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(top) <= 12, top


@pytest.mark.parametrize("name", sorted(MODULES))
def test_a_long_module_says_why(name):
    text = MODULES[name].read_text(encoding="utf-8")
    if text.count("\n") <= 500:
        return
    docstring = ast.get_docstring(ast.parse(text)) or ""
    assert "lines" in docstring, f"{name} has over 500 lines and its docstring does not say why"
