"""The README's config keys exist: every dotted key it names in backticks (`sft.training.batch_size`) and every
key of its YAML config blocks resolve in config/schema.yaml, so the docs cannot drift from the schema."""

from __future__ import annotations

import re

import yaml
from conftest import REPO

SCHEMA = yaml.safe_load((REPO / "config" / "schema.yaml").read_text())
README = (REPO / "README.md").read_text()


def _resolve(node: dict) -> list[dict]:
    """The object schemas ``node`` may stand for: itself, its $ref, the branches of if/then/else and oneOf."""
    if "$ref" in node:
        name = node["$ref"].removeprefix("#/definitions/")
        return _resolve(SCHEMA["definitions"][name])
    nodes = [node]
    for key in ("then", "else"):
        if key in node:
            nodes += _resolve(node[key])
    for branch in node.get("oneOf", []) + node.get("anyOf", []):
        nodes += _resolve(branch)
    return nodes


def key_exists(path: list[str]) -> bool:
    nodes = [SCHEMA]
    for name in path:
        children = []
        for node in nodes:
            for resolved in _resolve(node):
                properties = resolved.get("properties", {})
                if name in properties:
                    children.append(properties[name])
                elif isinstance(resolved.get("additionalProperties"), dict):  # benchmarks: {name: spec}
                    children.append(resolved["additionalProperties"])
        if not children:
            return False
        nodes = children
    return True


def dotted_keys(text: str) -> set[str]:
    """`a.b.c` in backticks whose first part is a top-level config key (file names and modules are not)."""
    top = set(SCHEMA["properties"])
    keys = set()
    for match in re.finditer(r"`([a-z_0-9]+(?:\.[a-z_0-9]+)+)(?::[^`]*)?`", text):
        key = match.group(1)
        if key.split(".")[0] in top and not key.endswith((".yaml", ".json", ".jsonl", ".py")):
            keys.add(key)
    return keys


def yaml_key_paths(value, prefix=()) -> set[tuple[str, ...]]:
    paths = set()
    if isinstance(value, dict):
        for key, child in value.items():
            paths.add((*prefix, str(key)))
            paths |= yaml_key_paths(child, (*prefix, str(key)))
    return paths


def config_blocks(text: str) -> list[dict]:
    """The README's YAML blocks that are configs (their top keys are config keys; prompt files are not)."""
    blocks = []
    for block in re.findall(r"```yaml\n(.*?)```", text, flags=re.DOTALL):
        parsed = yaml.safe_load(block)
        if isinstance(parsed, dict) and set(parsed) <= set(SCHEMA["properties"]):
            blocks.append(parsed)
    return blocks


def test_the_checker_finds_real_and_unknown_keys():
    assert key_exists(["sft", "training", "gradient_accumulation_steps"])
    assert key_exists(["teacher", "generation", "openai", "api_key_env"])
    assert key_exists(["benchmarks", "gsm8k", "field_map"])
    assert not key_exists(["sft", "training", "grad_accum"])
    assert not key_exists(["generation", "temperature"])
    assert dotted_keys("see `sft.processes` and `generation.vllm.tensor_parallel_size: 2`, not `bench/sft.py`") == {
        "sft.processes",
        "generation.vllm.tensor_parallel_size",
    }


def test_every_config_key_the_readme_names_is_in_the_schema():
    keys = dotted_keys(README)
    assert len(keys) > 30, sorted(keys)
    unknown = sorted(key for key in keys if not key_exists(key.split(".")))
    assert not unknown, f"README names config keys the schema lacks: {unknown}"


def test_every_readme_config_block_is_in_the_schema():
    blocks = config_blocks(README)
    assert blocks
    unknown = sorted(".".join(path) for block in blocks for path in yaml_key_paths(block) if not key_exists(list(path)))
    assert not unknown, f"README config blocks use keys the schema lacks: {unknown}"
