"""Each key is read in one place: a job reads its settings through the typed sections (``snakeskills.settings``),
never by indexing a settings dict, and no module outside ``snakeskills/settings/`` indexes the keys only the tools
section or a sampling section has."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "snakeskills"
# the job entry points: every script: file and the shell jobs' CLI
ENTRY_POINTS = sorted((ROOT / "scripts").glob("*.py")) + [PACKAGE / "cli.py"]
# keys that only the tools section (with its tags and prices) and a sampling section have
TYPED_KEYS = {
    "tools",
    "max_calls",
    "max_output_characters",
    "first_call",
    "baselines",
    "always_call",
    "without_tools",
    "code_begin",
    "code_end",
    "code_output_begin",
    "code_output_end",
    "per_call",
    "per_input_token",
    "per_output_token",
    "max_new_tokens",
}
# a module that reads such a key from something other than a config section
NOT_CONFIG = {"backends/model_server.py": {"max_new_tokens"}}  # a generation request sent to the shared server


def indexed_keys(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, key) of each ``x["key"]`` and ``x.get("key")``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and isinstance(node.slice, ast.Constant):
            found.append((node.lineno, node.slice.value))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            found.append((node.lineno, node.args[0].value))
    return found


def settings_reads(tree: ast.AST) -> list[int]:
    """Lines that index a job's settings: ``snakemake.params.<name>[...]`` or ``settings[...]``."""
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Subscript):
            continue
        value = node.value
        if (
            isinstance(value, ast.Name)
            and value.id in ("settings", "job")
            or (
                isinstance(value, ast.Attribute)
                and isinstance(value.value, ast.Attribute)
                and value.value.attr == "params"
                and isinstance(value.value.value, ast.Name)
                and value.value.value.id == "snakemake"
            )
        ):
            lines.append(node.lineno)
    return lines


@pytest.mark.parametrize("path", ENTRY_POINTS, ids=lambda path: path.name)
def test_a_job_reads_its_settings_through_the_typed_loader(path: Path):
    lines = settings_reads(ast.parse(path.read_text(encoding="utf-8")))
    assert not lines, f"{path.relative_to(ROOT)} indexes its settings at line(s) {lines}"


def test_the_checker_finds_a_settings_read():
    assert settings_reads(ast.parse('x = snakemake.params.model["dtype"]\ny = settings["tools"]')) == [1, 2]


@pytest.mark.parametrize(
    "path",
    [path for path in sorted(PACKAGE.rglob("*.py")) if "settings" not in path.relative_to(PACKAGE).parts[:1]]
    + sorted((ROOT / "scripts").glob("*.py")),
    ids=lambda path: str(path.relative_to(ROOT)),
)
def test_typed_keys_are_read_in_their_section_only(path: Path):
    allowed = NOT_CONFIG.get(path.relative_to(PACKAGE).as_posix() if path.is_relative_to(PACKAGE) else "", set())
    tree = ast.parse(path.read_text(encoding="utf-8"))
    keys = [(line, key) for line, key in indexed_keys(tree) if key in TYPED_KEYS - allowed]
    assert not keys, f"{path.relative_to(ROOT)} indexes {keys}: read it from its typed section (snakeskills.settings)"
