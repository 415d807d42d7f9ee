"""The configuration reference (docs/configuration.md), written from config/schema.yaml: every key with its type,
default and meaning, one section per top-level key, so the reference cannot drift from what the workflow checks.

    python3 -m snakeskills.plan.reference > docs/configuration.md
"""

from __future__ import annotations

import json
import sys

import yaml

from snakeskills.plan.config import SCHEMA

INTRO = """# Configuration reference

Written from `config/schema.yaml` by `python3 -m snakeskills.plan.reference > docs/configuration.md` (a test checks
that this page matches the schema). A config file given with `--configfile` is the whole config: what it leaves
out takes the default below, and the embedded default (`config/config.yaml`) is not loaded. A mistake stops the
plan in a few lines naming the key (`unknown config key sft.lr: did you mean ...`), before any job runs.
`config/examples/` has a config for each kind of run; [the guides](../README.md#where-to-read-next) explain the
sections at work.

Keys are dotted paths; `benchmarks.<name>` stands for any benchmark's name. A section whose value may be `null`
(teacher, synthesis, judge.llm) is off when null, and its keys apply once it is set. **Required** marks a key a
config must give (a key of a section, once the section is given).
"""


def resolve_node(schema: dict, node: dict) -> list[dict]:
    """The object schemas ``node`` stands for: itself, its $ref, the branches of if/then/else, oneOf and anyOf."""
    if "$ref" in node:
        target = schema
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        return resolve_node(schema, target)
    nodes = [node]
    for key in ("then", "else"):
        if key in node:
            nodes += resolve_node(schema, node[key])
    for branch in node.get("oneOf", []) + node.get("anyOf", []):
        nodes += resolve_node(schema, branch)
    return nodes


def _describe(schema: dict, node: dict) -> tuple[str, str, str]:
    """(type, default, meaning) of one key."""
    nodes = resolve_node(schema, node)
    types: list[str] = []
    meaning = " ".join(str(node.get("description", "")).split())
    default = ""
    for each in nodes:
        kind = each.get("type")
        for name in kind if isinstance(kind, list) else [kind] if kind else []:
            if name not in types:
                types.append(name)
        if "enum" in each:
            types = [" \\| ".join(json.dumps(value) for value in each["enum"])]
        meaning = meaning or " ".join(str(each.get("description", "")).split())
        if "default" in each and not default:
            default = json.dumps(each["default"])
    if "default" in node:
        default = json.dumps(node["default"])
    return " or ".join(types), default, meaning.replace("|", "\\|")


def _reference(node: dict) -> str | None:
    """The shared section a key stands for: its ``$ref``, or that of its ``then`` (a section that may be null)."""
    return node.get("$ref") or node.get("then", {}).get("$ref")


def _keys(schema: dict, node: dict, prefix: str, shown: dict[str, str]) -> list[tuple[str, dict, bool]]:
    """Every key under ``node``, depth first, as (dotted path, its schema node, whether its section requires it). A
    shared section (a ``$ref``, such as every model's ``generation``) is listed key by key where it first appears
    (``shown``: its path there), and elsewhere as one row pointing there."""
    rows = []
    reference = _reference(node)
    if reference in shown and shown[reference] != prefix:
        return rows
    if reference is not None:
        shown[reference] = prefix
    for resolved in resolve_node(schema, node):
        for name, child in resolved.get("properties", {}).items():
            path = f"{prefix}.{name}"
            if any(row[0] == path for row in rows):
                continue
            if _reference(child) in shown:
                same = f"the keys of `{shown[_reference(child)]}`, with the same meanings"
                child = {**child, "description": f"{child.get('description', '')} ({same})".lstrip()}
            rows.append((path, child, name in resolved.get("required", [])))
            rows += _keys(schema, child, path, shown)
        extra = resolved.get("additionalProperties")
        if isinstance(extra, dict):
            rows += _keys(schema, extra, f"{prefix}.<name>", shown)
    return rows


def config_reference(schema: dict | None = None) -> str:
    """The reference page's text."""
    schema = schema or yaml.safe_load(SCHEMA.read_text(encoding="utf-8"))
    parts = [INTRO]
    # a top-level section that is a shared one (prompt, generation, metrics) is listed key by key there
    shown = {_reference(node): name for name, node in schema["properties"].items() if _reference(node)}
    required = set(schema.get("required", []))
    for name, node in schema["properties"].items():
        kind, default, meaning = _describe(schema, node)
        parts.append(f"## `{name}`\n")
        given = " **Required.**" if name in required else f" Default: `{default}`." if default else ""
        parts.append(f"{meaning or '(no description)'}{given}\n")
        rows = _keys(schema, node, name, shown)
        if rows:
            parts.append("| key | type | default | meaning |\n| --- | --- | --- | --- |")
            for path, child, needed in rows:
                kind, default, meaning = _describe(schema, child)
                given = f"`{default}`" if default else "**required**" if needed else ""
                parts.append(f"| `{path}` | {kind} | {given} | {meaning} |")
            parts.append("")
    return "\n".join(parts).rstrip() + "\n"


if __name__ == "__main__":
    sys.stdout.write(config_reference())
