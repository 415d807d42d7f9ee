"""The private names of TRL's trainers that the project overrides or reads, checked against the installed TRL when a
trainer class is built. A TRL that renamed or dropped one would otherwise go on without the project's code: an
override never called, an attribute or a key never read, and the training silently other than documented."""

from __future__ import annotations

import inspect

from snakeskills.errors import SnakeskillsError


def installed() -> str:
    """The installed TRL and transformers, as an error names them."""
    import transformers
    import trl

    return f"TRL {trl.__version__} (transformers {transformers.__version__})"


def _missing(what: str, why: str) -> SnakeskillsError:
    return SnakeskillsError(
        f"{installed()} has no {what}, which snakeskills {why}; install the TRL that pyproject.toml pins "
        "(python3 -m pip install -e .)"
    )


def _takes(function, parameters: tuple[str, ...]) -> bool:
    """Whether ``function``'s parameters after the first (``self``) begin with ``parameters``, in order; a ``*args``
    takes the rest (a wrapper passing its arguments on)."""
    found = list(inspect.signature(function).parameters.values())
    if found and found[0].kind is not inspect.Parameter.VAR_POSITIONAL:
        found = found[1:]
    for index, expected in enumerate(parameters):
        if index >= len(found):
            return False
        if found[index].kind is inspect.Parameter.VAR_POSITIONAL:
            return True
        if found[index].name != expected:
            return False
    return True


def require_methods(trainer_class, methods: dict[str, tuple[tuple[str, ...], str]]) -> None:
    """Each of ``methods`` (name: the parameters the project passes it, in order and after ``self``, and why the
    project needs it) is a function of ``trainer_class`` whose parameters begin so."""
    for name, (parameters, why) in methods.items():
        function = getattr(trainer_class, name, None)
        if not callable(function):
            raise _missing(f"{trainer_class.__name__}.{name}", why)
        if not _takes(function, parameters):
            found = tuple(inspect.signature(function).parameters)[1:]
            raise SnakeskillsError(
                f"{installed()}: {trainer_class.__name__}.{name} takes ({', '.join(found)}) where snakeskills "
                f"passes ({', '.join(parameters)}): it {why}; install the TRL that pyproject.toml pins "
                "(python3 -m pip install -e .)"
            )


def require_attributes(instance, names: tuple[str, ...], why: str) -> None:
    """Each of ``names`` is an attribute of ``instance`` (an object TRL built), which the project ``why``."""
    for name in names:
        if not hasattr(instance, name):
            raise _missing(f"{type(instance).__name__}.{name}", why)


def require_key(owner, key: str, why: str) -> None:
    """The source of ``owner`` (a TRL class) reads the dict key ``key`` (quoted in its module's code)."""
    module = inspect.getmodule(owner)
    try:
        source = inspect.getsource(module)
    except (OSError, TypeError) as error:
        raise SnakeskillsError(
            f"{installed()}: cannot read the source of {module.__name__} to check that it reads {key!r}, which "
            f"snakeskills {why} ({error})"
        ) from None
    if f'"{key}"' not in source and f"'{key}'" not in source:
        raise SnakeskillsError(
            f"{installed()}: {owner.__name__} reads no key {key!r}, which snakeskills {why}; install the TRL that "
            "pyproject.toml pins (python3 -m pip install -e .)"
        )
