"""Functions chosen by name from a table of built-in ones, or a user's own given as ``module:function`` (the anchor
is NeMo-Skills' ``module::Class`` hook). A user's function is imported when the plan is made, so a name that does
not import stops the plan naming the config key, and it is imported again in each job that calls it: its module
must be importable where jobs run (installed, or on ``PYTHONPATH``; ``python -m snakemake`` puts the working
directory on the path)."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable

from snakeskills.errors import SnakeskillsError

USER_FUNCTION = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def is_user_function(name: str) -> bool:
    """Whether ``name`` names a user's function (``package.module:function``) rather than a built-in."""
    return bool(USER_FUNCTION.match(name))


def load_user_function(name: str, key: str) -> Callable:
    """The function ``module:function`` names; a name that does not import or is not callable stops, naming the
    config ``key``."""
    module_name, _, function_name = name.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise SnakeskillsError(
            f"config key {key}: {name!r}: module {module_name!r} does not import ({error}); install it or put its "
            "folder on PYTHONPATH"
        ) from None
    function = getattr(module, function_name, None)
    if not callable(function):
        raise SnakeskillsError(f"config key {key}: {name!r}: module {module_name!r} has no function {function_name!r}")
    return function


def choose(table: dict[str, Callable], name: str, key: str) -> Callable:
    """The built-in function ``name`` of ``table``, or a user's ``module:function``."""
    if name in table:
        return table[name]
    if is_user_function(name):
        return load_user_function(name, key)
    raise SnakeskillsError(
        f"config key {key}: unknown {name!r}; known: {', '.join(table)}, or your own as module:function"
    )
