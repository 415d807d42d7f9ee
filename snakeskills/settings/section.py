"""The base of every typed config section: a frozen dataclass read once from the schema-filled config
(``Section.from_dict``) and written back to the very dict it was read from (``to_dict``, key order included: a rule's
params are compared by their ``repr`` and a reordered value would rerun finished jobs). A job's settings file is a
``to_dict`` written as JSON, read back by the job with ``from_json``.

A field has no default: the schema is the one source of defaults (``filled`` fills a partial section from it).
An ``optional`` field may be absent (a key whose schema default the filling does not reach, behind a ``$ref``, or
one the plan sets with ``replace``): it reads None, and ``to_dict`` leaves it out while it is absent and None."""

from __future__ import annotations

import dataclasses
import json
import os
import types
import typing
from collections.abc import Mapping
from typing import Any, ClassVar, Self

from snakeskills.errors import SnakeskillsError


def optional() -> Any:
    """A key that may be absent: None then."""
    return dataclasses.field(default=None, metadata={"optional": True})


@dataclasses.dataclass(frozen=True)
class Section:
    # where the section's schema is, as a JSON pointer into config/schema.yaml (``filled``)
    SCHEMA: ClassVar[str] = ""

    @classmethod
    def from_dict(cls, data: Mapping, key: str) -> Self:
        """The section ``data`` found at config ``key`` (schema defaults filled); a key it lacks or does not know
        names its config key. A section already read is taken as it is."""
        if isinstance(data, cls):
            return data
        if not isinstance(data, Mapping):
            raise SnakeskillsError(f"config key {key}: expected a mapping, got {data!r}")
        hints = _hints(cls)
        fields = dataclasses.fields(cls)
        known = {field.name for field in fields}
        unknown = [name for name in data if name not in known]
        if unknown:
            raise SnakeskillsError(f"config key {key}.{unknown[0]}: not a key of {key}")
        missing = [field.name for field in fields if field.name not in data and not field.metadata.get("optional")]
        if missing:
            raise SnakeskillsError(f"config key {key} lacks {', '.join(missing)} (fill the schema's defaults first)")
        values = {name: _convert(hints[name], value, f"{key}.{name}") for name, value in data.items()}
        section = cls(**values)
        object.__setattr__(section, "_order", tuple(data))
        object.__setattr__(section, "_key", key)
        return section

    @classmethod
    def filled(cls, partial: Mapping | None = None, key: str | None = None) -> Self:
        """A section from the keys given, the schema's defaults filling the rest (tests, benchmarks, a job that
        reads a section of its own)."""
        from snakeskills.settings.schema import fill_defaults

        key = key or cls.default_key()
        return cls.from_dict(fill_defaults(dict(partial or {}), cls.SCHEMA, key), key)

    @classmethod
    def default_key(cls) -> str:
        """The config key of the section's schema (``tools.models.<name>`` for a model tool's)."""
        skipped = ("#", "definitions", "properties", "then")
        parts = [part for part in cls.SCHEMA.split("/") if part not in skipped]
        return ".".join("<name>" if part == "additionalProperties" else part for part in parts)

    @property
    def key(self) -> str:
        """The config key the section was read at."""
        return getattr(self, "_key", type(self).__name__)

    def to_dict(self) -> dict:
        """The dict the section was read from, in its key order (optional fields set since at the end)."""
        order = getattr(self, "_order", ())
        names = [*order]
        for field in dataclasses.fields(self):
            unset = field.metadata.get("optional") and getattr(self, field.name) is None
            if field.name not in order and not unset:
                names.append(field.name)
        result = {}
        for name in names:
            result[name] = _plain(getattr(self, name))
        return result

    def replace(self, **changes) -> Self:
        """A copy with ``changes`` (its key and key order kept)."""
        copy = dataclasses.replace(self, **changes)
        for attribute in ("_order", "_key", "_preset"):
            if hasattr(self, attribute):
                object.__setattr__(copy, attribute, getattr(self, attribute))
        return copy

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, path: str | os.PathLike) -> Self:
        """A settings file written from a ``to_dict`` (a job's): a key it lacks names the file."""
        from snakeskills.io import read_json

        settings = read_json(path)
        fields = dataclasses.fields(cls)
        missing = [f.name for f in fields if f.name not in settings and not f.metadata.get("optional")]
        if missing:
            raise SnakeskillsError(f"{path}: settings file lacks {', '.join(missing)}; rerun its settings rule")
        return cls.from_dict(settings, f"(settings file {path})")


def _hints(cls) -> dict:
    hints = getattr(cls, "_type_hints", None)
    if hints is None or hints[0] is not cls:
        hints = (cls, typing.get_type_hints(cls))
        cls._type_hints = hints
    return hints[1]


def _convert(hint, value, key: str):
    """``value`` as ``hint`` says: a Section from its dict, a dict of Sections, the rest as it is."""
    if value is None or isinstance(value, Section):
        return value
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [option for option in typing.get_args(hint) if option is not type(None)]
        sections = [option for option in options if _is_section(option)]
        if sections and (isinstance(value, Mapping) or len(options) == 1):
            return _convert(sections[0], value, key)
        return value
    if _is_section(hint):
        reader = getattr(hint, "from_config", None)
        return reader(value, key) if reader is not None else hint.from_dict(value, key)
    if origin is dict:
        _, item = typing.get_args(hint)
        if _is_section(item) or typing.get_origin(item) in (typing.Union, types.UnionType):
            return {name: _convert(item, each, f"{key}.{name}") for name, each in value.items()}
    return value


def _is_section(hint) -> bool:
    return isinstance(hint, type) and issubclass(hint, Section)


def _plain(value):
    if isinstance(value, Section):
        return value.to_config() if hasattr(value, "to_config") else value.to_dict()
    if isinstance(value, dict):
        return {name: _plain(each) for name, each in value.items()}
    return value
