"""The docs' config keys exist: every dotted key the README and docs/ name in backticks (`sft.training.batch_size`)
and every key of their YAML config blocks resolve in config/schema.yaml, the configuration reference is what the
schema says, every link between the pages leads to a file and heading that exist, and the README's commands for
SLURM, the rule graph and a rerun are the ones tests run, so the docs cannot drift."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from conftest import REPO

from snakeskills.plan.reference import resolve_node

SCHEMA = yaml.safe_load((REPO / "config" / "schema.yaml").read_text())
PAGES = {
    path.relative_to(REPO): path.read_text() for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
}
README = "\n".join(PAGES.values())


def key_exists(path: list[str]) -> bool:
    nodes = [SCHEMA]
    for name in path:
        children = []
        for node in nodes:
            for resolved in resolve_node(SCHEMA, node):
                properties = resolved.get("properties", {})
                if name in properties:
                    children.append(properties[name])
                elif isinstance(resolved.get("additionalProperties"), dict):  # benchmarks: {name: spec}
                    children.append(resolved["additionalProperties"])
                elif resolved.get("additionalProperties") is True:  # a metric's options: any key
                    return True
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
    text = "see `training.processes` and `generation.vllm.tensor_parallel_size: 2`, not `bench/sft.py`"
    assert dotted_keys(text) == {
        "training.processes",
        "generation.vllm.tensor_parallel_size",
    }


def test_every_config_key_the_docs_name_is_in_the_schema():
    keys = dotted_keys(README)
    assert len(keys) > 30, sorted(keys)
    unknown = sorted(key for key in keys if not key_exists(key.split(".")))
    assert not unknown, f"the docs name config keys the schema lacks: {unknown}"


def test_every_config_block_of_the_docs_is_in_the_schema():
    blocks = config_blocks(README)
    assert blocks
    unknown = sorted(".".join(path) for block in blocks for path in yaml_key_paths(block) if not key_exists(list(path)))
    assert not unknown, f"the docs' config blocks use keys the schema lacks: {unknown}"


def test_the_readme_config_block_is_a_valid_config():
    from snakeskills.plan.checks import check_config
    from snakeskills.plan.config import prepare_config

    (config,) = config_blocks(PAGES[Path("README.md")])
    prepare_config(config)
    check_config(config, gpus_available=False)


def test_the_configuration_reference_is_written_from_the_schema():
    from snakeskills.plan.reference import config_reference

    assert PAGES[Path("docs/configuration.md")] == config_reference(), (
        "docs/configuration.md is out of date: python3 -m snakeskills.plan.reference > docs/configuration.md"
    )
    rows = [line for line in PAGES[Path("docs/configuration.md")].splitlines() if line.startswith("| `")]
    assert len(rows) > 150 and not [row for row in rows if row.endswith("|  |")], "every key has a meaning"


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_links_between_pages_lead_to_files_and_headings_that_exist():
    broken = []
    for page, text in PAGES.items():
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if target.startswith(("http://", "https://")):
                continue
            file, _, fragment = target.partition("#")
            path = (REPO / page).parent / file if file else REPO / page
            if not path.exists():
                broken.append(f"{page}: {target} (no such file)")
            elif fragment and path.suffix == ".md":
                headings = re.findall(r"^#+ (.+)$", path.read_text(), flags=re.MULTILINE)
                if fragment not in {anchor(heading) for heading in headings}:
                    broken.append(f"{page}: {target} (no such heading)")
    assert not broken, broken


# README commands and the test file that runs each as written, at a fresh clone's root (a rerun as its dry run)
TESTED_COMMANDS = {
    "python3 -m snakemake -n": "tests/workflow/test_workflow_dag.py",
    "python3 -m snakemake --profile slurm -n": "tests/external/test_slurm.py",
    "python3 -m snakemake --rulegraph | dot -Tsvg > dag.svg": "tests/workflow/test_workflow_dag.py",
    "python3 -m snakemake -c all -R judge": "tests/workflow/test_workflow_dag.py",
}


def test_the_readmes_commands_are_the_ones_tests_run():
    blocks = re.findall(r"```bash\n(.*?)```", PAGES[Path("README.md")], flags=re.DOTALL)
    commands = {line.split("  #")[0].strip() for block in blocks for line in block.splitlines()}
    for command, test_file in TESTED_COMMANDS.items():
        assert command in commands, f"the README no longer shows {command!r}"
        assert f'"{command}"' in (REPO / test_file).read_text(), f"{test_file} no longer runs {command!r}"
