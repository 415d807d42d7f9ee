"""The per-stage conda envs in envs/, checked without conda: parse, pins, pyproject ranges, rule coverage."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
import tomllib
import yaml
from conftest import DEFAULT_CONFIG, REPO
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

ENVS = sorted((REPO / "envs").glob("*.yaml"))
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
# the stages the README names; each has its env file
STAGE_ENVS = {"data", "generate-hf", "generate-vllm", "generate-openai", "judge", "training"}
CONDA_PIN = re.compile(r"^([A-Za-z0-9_.-]+)==?(\d[\w.]*)$")


def env_pins(path: Path) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """(conda pins {name: version}, pip pins {canonical name: version}, other pip lines) of an env file."""
    env = yaml.safe_load(path.read_text())
    assert set(env) <= {"name", "channels", "dependencies"}, f"{path.name}: unexpected keys {set(env)}"
    assert env["channels"] and "defaults" not in env["channels"], f"{path.name}: name channels explicitly"
    conda, pip, other = {}, {}, []
    for dependency in env["dependencies"]:
        if isinstance(dependency, dict):
            assert set(dependency) == {"pip"}, f"{path.name}: {dependency}"
            for line in dependency["pip"]:
                if line.startswith("-"):
                    other.append(line)
                    continue
                requirement = Requirement(line)
                specifiers = list(requirement.specifier)
                assert len(specifiers) == 1 and specifiers[0].operator == "==", f"{path.name}: {line!r} is not pinned"
                assert "*" not in specifiers[0].version, f"{path.name}: {line!r} is a wildcard, not a pin"
                pip[canonicalize_name(requirement.name)] = specifiers[0].version
        else:
            match = CONDA_PIN.match(dependency)
            assert match, f"{path.name}: conda package {dependency!r} is not pinned (name=version)"
            conda[match.group(1)] = match.group(2)
    return conda, pip, other


def pyproject_ranges() -> dict[str, list[SpecifierSet]]:
    """{canonical name: its specifiers} over the dependencies and every extra of pyproject.toml."""
    ranges = defaultdict(list)
    project = PYPROJECT["project"]
    lines = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        lines.extend(extra)
    for line in lines:
        requirement = Requirement(line)
        if requirement.name != project["name"]:
            ranges[canonicalize_name(requirement.name)].append(requirement.specifier)
    return ranges


def test_one_env_per_stage():
    assert {path.stem for path in ENVS} >= STAGE_ENVS


@pytest.mark.parametrize("path", ENVS, ids=[path.name for path in ENVS])
def test_env_pins_every_package_within_pyproject_ranges(path):
    conda, pip, other = env_pins(path)
    assert "python" in conda, f"{path.name}: pin python"
    assert SpecifierSet(PYPROJECT["project"]["requires-python"]).contains(conda["python"])
    assert other == ["-e ../"], f"{path.name}: only the project itself may be unpinned (-e ../)"
    assert (path.parent / "..").resolve() == REPO
    assert pip, f"{path.name}: pin the stage's packages"
    ranges = pyproject_ranges()
    for name, version in pip.items():
        assert name in ranges, f"{path.name}: {name} is not a dependency (or extra) in pyproject.toml"
        for specifier in ranges[name]:
            assert specifier.contains(Version(version), prereleases=True), (
                f"{path.name}: {name}=={version} is outside pyproject.toml's {name}{specifier}"
            )


def test_shared_pins_agree_across_envs():
    """A package pinned in several envs has one version, except where vllm dictates its own."""
    versions = defaultdict(dict)
    for path in ENVS:
        if path.stem == "generate-vllm":
            continue
        for name, version in env_pins(path)[1].items():
            versions[name][path.name] = version
    for name, by_env in versions.items():
        assert len(set(by_env.values())) == 1, f"{name} is pinned differently: {by_env}"


RULE_ENVS = """
import json, sys
from pathlib import Path
from types import SimpleNamespace
from snakemake.api import SnakemakeApi
from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings, StorageSettings


def env_of(rule, model):
    # a conda env given as a function of the wildcards (generate: the backend of the model on a split), for `model`
    return rule.conda_env(SimpleNamespace(model=model, split="train")) if callable(rule.conda_env) else rule.conda_env


def param_type(value) -> str:
    # a param's type name; a params function counts as the type it returns (its return annotation)
    if not callable(value):
        return type(value).__name__
    returned = value.__annotations__.get("return")
    return getattr(returned, "__name__", str(returned))


snakefile, configfile, workdir = map(Path, sys.argv[1:4])
with SnakemakeApi(OutputSettings()) as api:
    workflow = api.workflow(
        resource_settings=ResourceSettings(cores=1),
        config_settings=ConfigSettings(configfiles=[configfile]),
        storage_settings=StorageSettings(),
        snakefile=snakefile,
        workdir=workdir,
    )._workflow
    rules = {
        rule.name: {
            "conda": env_of(rule, "base"),
            "teacher_conda": env_of(rule, "teacher"),
            "snakefile": str(rule.snakefile),
            "runs": bool(rule.script or rule.shellcmd),
            "shellcmd": rule.shellcmd,
            "param_types": {name: param_type(value) for name, value in rule.params.items()},
        }
        for rule in workflow.rules
    }
print("RULES " + json.dumps(rules))
"""


def rule_envs(tmp_path: Path, mutate) -> dict[str, dict]:
    """{rule: {conda, teacher_conda, snakefile, runs, shellcmd, param_types}} of the workflow loaded (not run) on the
    default config after ``mutate``."""
    config = yaml.safe_load(DEFAULT_CONFIG.read_text())
    mutate(config)
    configfile = tmp_path / "config.yaml"
    configfile.write_text(yaml.safe_dump(config))
    process = subprocess.run(
        [sys.executable, "-c", RULE_ENVS, str(REPO / "Snakefile"), str(configfile), str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    lines = [line for line in process.stdout.splitlines() if line.startswith("RULES ")]
    assert process.returncode == 0 and lines, process.stdout[-3000:] + process.stderr[-3000:]
    return json.loads(lines[-1].removeprefix("RULES "))


def llm_judge_on(backend):
    def mutate(config):
        generation = {"backend": backend, "sampling": {"max_new_tokens": 8}}
        if backend == "openai":
            generation["openai"] = {"base_url": "http://localhost:8000/v1", "model": "judge"}
        config["judge"]["llm"] = {
            "model": {"path": "."},
            "prompt": {"template": "judge-math", "chat_template": True},
            "generation": generation,
        }

    return mutate


VARIANTS = {
    "default": (lambda config: None, {"generate": "generate-hf", "llm_judge": "generate-hf"}),
    "vllm": (
        lambda config: config["generation"].update(backend="vllm"),
        {"generate": "generate-vllm", "llm_judge": "generate-vllm"},
    ),
    "openai-judge": (llm_judge_on("openai"), {"generate": "generate-hf", "llm_judge": "generate-openai"}),
}


def llm_contamination_check_on(config):
    """An openai LLM judge that also checks synthesized problems for contamination."""
    llm_judge_on("openai")(config)
    config["synthesis"] = {
        "writer": "student",
        "label": {"solver": "student"},
        "decontamination": {"llm_check": "judge"},
    }


VARIANTS["llm-contamination-check"] = (
    llm_contamination_check_on,
    {"synthesis_llm_check": "generate-openai", "contamination_check_settings": "data", "synthesis_problems": "judge"},
)


def test_a_teachers_generate_jobs_use_its_backends_env(tmp_path):
    def mutate(config):
        config["teacher"] = {
            "generation": {
                "backend": "openai",
                "openai": {"base_url": "http://localhost:8000/v1", "model": "teacher"},
                "sampling": {"max_new_tokens": 8},
            },
            "prompt": {"user": "{problem}="},
        }

    generate = rule_envs(tmp_path, mutate)["generate"]
    assert (Path(generate["conda"]).stem, Path(generate["teacher_conda"]).stem) == ("generate-hf", "generate-openai")


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_rule_names_an_existing_env(tmp_path, variant):
    mutate, expected = VARIANTS[variant]
    rules = rule_envs(tmp_path, mutate)
    assert "generate" in rules and "sft" in rules
    for name, rule in rules.items():
        if not rule["runs"]:
            continue  # `all` only gathers targets
        assert rule["conda"], f"rule {name} has no conda: directive"
        env = (Path(rule["snakefile"]).parent / rule["conda"]).resolve()
        assert env.is_file(), f"rule {name}: conda env {rule['conda']} does not exist ({env})"
        assert env.parent == REPO / "envs"
    for name, stem in expected.items():
        assert Path(rules[name]["conda"]).stem == stem, (name, rules[name]["conda"])


# what a shell: command may contain: threads, the gpu count, the job's wildcards and files, and JobSettings params
# (one JSON argument), every value shell-quoted; the job's Python comes from the environment (common.smk job_python)
SAFE_SHELL_FIELD = re.compile(
    r"threads|resources\.gpu|(?:wildcards|input|output|log)(?:\.\w+)?:q|params\.(?P<param>\w+):q"
)
JOB_PYTHON_COMMAND = '"$SNAKESKILLS_JOB_PYTHON" -m snakeskills.cli '


@pytest.mark.parametrize("variant", ["default", "openai-judge", "llm-contamination-check"])
def test_shell_commands_take_no_config_text(tmp_path, variant):
    """Config values (model names, paths, prompts) never reach a shell as text to be parsed.

    The per-chunk rules are shell: rules; their commands may only hold quoted paths, wildcards,
    threads, and settings as one quoted JSON argument (JobSettings). Everything else runs as
    script: rules, and no rule has run: code.
    """
    rules = rule_envs(tmp_path, VARIANTS[variant][0])
    shell_rules = {name: rule for name, rule in rules.items() if rule["shellcmd"]}
    assert {"generate", "judge"} <= shell_rules.keys()
    for name, rule in shell_rules.items():
        assert rule["shellcmd"].startswith(JOB_PYTHON_COMMAND), (name, rule["shellcmd"])
        fields = re.findall(r"{([^{}]*)}", rule["shellcmd"])
        assert fields, name
        for field in fields:
            match = SAFE_SHELL_FIELD.fullmatch(field)
            assert match, f"rule {name}: shell field {{{field}}} is not a quoted path, wildcard or settings"
            if match["param"]:
                assert rule["param_types"][match["param"]] == "JobSettings", (name, field)
    for rules_file in [REPO / "Snakefile", *(REPO / "rules").glob("*.smk")]:
        assert "run:" not in rules_file.read_text(), rules_file
