"""Loading the config: benchmark presets, the JSON schema (config/schema.yaml) with its defaults, and a schema
violation told in one or two lines naming the key."""

from __future__ import annotations

from snakeskills.data.specs import apply_presets, check_benchmark_specs
from snakeskills.errors import SnakeskillsError
from snakeskills.registry import USER_FUNCTION
from snakeskills.settings.schema import DEFAULT_CONFIG, SCHEMA

# keys that moved, refused with their new place (how every method's rounds run is the training section)
MOVED_KEYS = {f"sft.{name}": f"training.{name}" for name in ("gpus", "processes", "distributed")}


def prepare_config(config: dict, *, verbose: bool = False) -> None:
    """Apply benchmark presets, validate ``config`` against the schema and fill its defaults, in place.

    A schema violation raises a ``SnakeskillsError`` of one or two lines (``schema_error``); Snakemake's own
    message, with the schema and the config, follows it only with ``verbose``."""
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    moved = [f"{old} -> {new}" for old, new in MOVED_KEYS.items() if old.split(".")[1] in (config.get("sft") or {})]
    if moved:
        raise SnakeskillsError(
            f"config keys moved: {', '.join(moved)} (how every method's rounds run, their GPUs and processes, is the "
            "training section); move them there"
        )
    if "benchmarks" in config:
        config["benchmarks"] = apply_presets(config["benchmarks"])
    try:
        validate(config, schema=str(SCHEMA))
    except WorkflowError as error:  # the defaults filled before the failure add no violation of their own
        message = schema_error(config) or str(error)
        if verbose:
            raise SnakeskillsError(f"{message}\n\n{error}") from None
        raise SnakeskillsError(message) from None
    check_benchmark_specs(config["benchmarks"])


def schema_error(config: dict, *, limit: int = 3) -> str | None:
    """The config's schema violations, one line each (at most ``limit``): the key's path, the bad value, and for
    an unknown key the closest known one. ``None`` when the config is valid."""
    import jsonschema
    import yaml

    schema = yaml.safe_load(SCHEMA.read_text(encoding="utf-8"))
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(config), key=jsonschema.exceptions.relevance)
    errors = [jsonschema.exceptions.best_match([error]) for error in errors]
    missing: dict[str, list[str]] = {}  # one line per object that lacks required keys
    for error in errors:
        if error.validator == "required" and isinstance(error.instance, dict):
            path = ".".join(str(part) for part in error.absolute_path)
            missing.setdefault(path, []).extend(key for key in error.validator_value if key not in error.instance)
    lines = [line for error in errors if error.validator != "required" for line in _error_lines(error)]
    for path, keys in missing.items():
        where = f"config key {path}" if path else "the config"
        lines.append(f"{where} lacks required key(s): {', '.join(dict.fromkeys(keys))}")
    lines = list(dict.fromkeys(lines))
    if not lines:
        return None
    more = f"\n(and {len(lines) - limit} more)" if len(lines) > limit else ""
    return "\n".join(lines[:limit]) + more + _SCHEMA_HINT


def _error_lines(error) -> list[str]:
    import difflib

    path = ".".join(str(part) for part in error.absolute_path)
    where = f"config key {path}" if path else "the config"
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = sorted(error.schema.get("properties", {}))
        lines = []
        for key in (key for key in error.instance if key not in known):
            full_key = f"{path}.{key}" if path else str(key)
            close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(known)}"
            lines.append(f"unknown config key {full_key}: {hint}")
        if lines:
            return lines
    value = _short(error.instance)
    if error.validator == "type":
        expected = error.validator_value
        expected = " or ".join(expected) if isinstance(expected, list) else expected
        return [f"{where}: expected {expected}, got {value}"]
    if error.validator == "pattern" and error.validator_value.endswith(_USER_FUNCTION_CHOICE):
        names = error.validator_value.removeprefix("^(").removesuffix(_USER_FUNCTION_CHOICE).split("|")
        return [f"{where}: {value} is not one of {', '.join(names)}, or your own function as module:function"]
    if error.validator == "enum":
        return [f"{where}: {value} is not one of {', '.join(_short(choice) for choice in error.validator_value)}"]
    return [f"{where}: {value}: {error.message.replace(repr(error.instance), '').strip()}"]


# the end of a schema pattern that admits built-in names or a user's function (snakeskills.registry)
_USER_FUNCTION_CHOICE = f"|{USER_FUNCTION.pattern.strip('^$')})$"
_SCHEMA_HINT = "\n(config/schema.yaml describes every key; run snakemake with --verbose for the full check)"


def _short(value, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def default_config() -> dict:
    """The embedded default (config/config.yaml), validated: the schema's defaults filled. For benchmarks and
    tests that call package functions directly and need a whole section (``sft.training``, ``generation``)."""
    import yaml

    config = yaml.safe_load(DEFAULT_CONFIG.read_text(encoding="utf-8"))
    prepare_config(config)
    return config
