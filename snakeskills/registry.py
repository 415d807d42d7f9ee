"""Functions chosen by name from a table of built-in ones, or a user's own given as ``module:function`` (the anchor
is NeMo-Skills' ``module::Class`` hook). A user's function is imported when the plan is made (a name that does not
import stops the plan, naming the config key) and again in each job that calls it, so its module must be importable
where jobs run (installed, or on ``PYTHONPATH``).

Every hook (``judge.extraction``, ``judge.equivalence``, ``metrics``) is called through ``Chosen.call`` (one row) or
``Chosen.call_on_rows`` (many): what a user's function raises becomes a ``UserFunctionError`` naming the config key,
the function, the row, the exception's type and last line and where in the user's file it was raised; its
``details`` (the user's traceback) go to the job's log, and the job exits non-zero before writing its outputs."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import re
import reprlib
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from snakeskills.errors import SnakeskillsError

USER_FUNCTION = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")

# how a row is named in an error: its name, a function that gives it (called only on an error), or None (unknown:
# the error shows the arguments instead)
Row = str | Callable[[], str | None] | None


def is_user_function(name: str) -> bool:
    """Whether ``name`` names a user's function (``package.module:function``) rather than a built-in."""
    return bool(USER_FUNCTION.match(name))


def load_user_function(name: str, key: str) -> Callable:
    """The function ``module:function`` names; a module that is not found, or fails while it is imported (a syntax
    error, a missing dependency, an exception at its top level), or a name that is not callable stops, naming the
    config ``key`` and the module's error with its file and line."""
    module_name, _, function_name = name.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name is not None and (module_name == error.name or module_name.startswith(f"{error.name}.")):
            raise SnakeskillsError(
                f"config key {key}: {name!r}: module {module_name!r} does not import ({error}); install it or put "
                "its folder on PYTHONPATH"
            ) from None
        raise _import_error(name, key, module_name, error) from error
    except Exception as error:  # the module was found and failed: SyntaxError, ImportError, its own exception
        raise _import_error(name, key, module_name, error) from error
    function = getattr(module, function_name, None)
    if not callable(function):
        raise SnakeskillsError(f"config key {key}: {name!r}: module {module_name!r} has no function {function_name!r}")
    return function


def _import_error(name: str, key: str, module_name: str, error: BaseException) -> UserFunctionError:
    frames = [frame for frame in traceback.extract_tb(error.__traceback__) if not _importing(frame.filename)]
    try:  # the module's file, where its error is placed; a dotted name imports its package again, which may fail
        origin = importlib.util.find_spec(module_name).origin
    except Exception:
        origin = None
    return UserFunctionError(
        f"config key {key}: {name!r}: module {module_name!r} fails while it is imported: {last_line(error)}"
        f"{_place(frames, error, origin)}",
        details=_user_traceback(error, ours=_importing),
    )


def _importing(filename: str) -> bool:
    """Whether a frame's file is ours or Python's import machinery (not the user's module)."""
    return filename in (__file__, importlib.__file__) or filename.startswith("<frozen importlib")


def choose(table: dict[str, Callable], name: str, key: str) -> Chosen:
    """The built-in function ``name`` of ``table``, or a user's ``module:function``."""
    if name in table:
        return Chosen(table[name], name, key, own=False)
    if is_user_function(name):
        return Chosen(load_user_function(name, key), name, key, own=True)
    raise SnakeskillsError(
        f"config key {key}: unknown {name!r}; known: {', '.join(table)}, or your own as module:function"
    )


class UserFunctionError(SnakeskillsError):
    """A user's ``module:function`` failed: the message names the config key, the function, the row and the error;
    ``details`` is the user's part of the traceback, for the job's log."""

    def __init__(self, message: str, *, details: str = "") -> None:
        super().__init__(message)
        self.details = details


@dataclass(frozen=True)
class Chosen:
    """A function chosen by config ``key`` (``choose``): a built-in, or a user's own (``own``), whose exceptions
    ``call`` and ``call_on_rows`` turn into a ``UserFunctionError``. Calling it directly calls the function."""

    function: Callable
    name: str
    key: str
    own: bool

    def __call__(self, *args, **kwargs):
        return self.function(*args, **kwargs)

    def call(self, row: Row, /, *args, **kwargs):
        """The function on one row: ``row`` names it in an error (``RowsOf.at``); None shows the arguments."""
        if not self.own:
            return self.function(*args, **kwargs)
        try:
            return self.function(*args, **kwargs)
        except Exception as error:
            named = row() if callable(row) else row
            if row is None:
                named = f"the arguments {_arguments(args, kwargs)}"
            raise self.error(error, named) from error

    def call_on_rows(self, row_of: Callable[[object], str | None], /, *args, **kwargs):
        """The function on many rows at once (a metric on every judged row): in an error, the row is the one the
        function held when it raised: the innermost value of its frames' variables that ``row_of`` names."""
        if not self.own:
            return self.function(*args, **kwargs)
        try:
            return self.function(*args, **kwargs)
        except Exception as error:
            raise self.error(error, row_in_hand(error, row_of)) from error

    def error(self, error: BaseException, row: str | None) -> UserFunctionError:
        """``error``, raised by the function on ``row`` (None: no one row), as the project's error."""
        frames = traceback.extract_tb(error.__traceback__)[1:]  # the first is our call
        on = f" on {row}" if row else ""
        place = _place(frames, error, getattr(getattr(self.function, "__code__", None), "co_filename", None))
        return UserFunctionError(
            f"config key {self.key}: {self.name!r} raised{on}: {last_line(error)}{place}",
            details=_user_traceback(error, ours=lambda filename: filename == __file__),
        )


def last_line(error: BaseException) -> str:
    """What a traceback's last line says: the exception's type, then the last line of its message."""
    kind = type(error).__qualname__
    if type(error).__module__ not in ("builtins", "__main__"):
        kind = f"{type(error).__module__}.{kind}"
    message = error.msg if isinstance(error, SyntaxError) and error.msg else str(error)  # its place comes apart
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    return f"{kind}: {lines[-1]}" if lines else kind


def _place(frames: Sequence[traceback.FrameSummary], error: BaseException, own_file: str | None) -> str:
    """Where the user's code raised: a syntax error's own file and line, else the innermost frame in the user's
    file ``own_file`` (the function's, the module's: where it called the library that raised), else the innermost
    frame."""
    if isinstance(error, SyntaxError) and error.filename:
        return f" ({_short(error.filename)}, line {error.lineno})"
    if not frames:
        return ""
    own = [frame for frame in frames if own_file is not None and frame.filename == own_file]
    frame = (own or frames)[-1]
    return f" ({_short(frame.filename)}, line {frame.lineno}, in {frame.name})"


def _short(path: str) -> str:
    """A path under the working directory relative to it (jobs run in the workflow's folder), others as they are."""
    relative = os.path.relpath(path) if os.path.isabs(path) else path
    return path if relative.startswith("..") else relative


def _user_traceback(error: BaseException, *, ours: Callable[[str], bool]) -> str:
    """The traceback of ``error`` from its first frame that is not ``ours`` (a file name test) on."""
    tb = error.__traceback__
    while tb is not None and ours(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(error), error, tb, chain=False)).rstrip()


def _arguments(args: tuple, kwargs: dict) -> str:
    short = reprlib.Repr()
    short.maxstring, short.maxother, short.maxlist, short.maxdict = 60, 60, 4, 4
    return "(" + ", ".join([*map(short.repr, args), *(f"{k}={short.repr(v)}" for k, v in kwargs.items())]) + ")"


def row_in_hand(error: BaseException, row_of: Callable[[object], str | None]) -> str | None:
    """The row a function held when it raised ``error``: walking its traceback's frames from the innermost out, the
    first variable ``row_of`` names (``row_of`` sees each variable's value; it names rows it knows by identity), the
    variables of a frame from its last one back (an inner loop's row before the outer loop's problem)."""
    frames = []
    tb = error.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for frame in reversed(frames[1:]):  # the first is our call
        for value in reversed(list(frame.f_locals.values())):
            named = row_of(value)
            if named is not None:
                return named
    return None


class RowsOf:
    """Names the rows of ``records`` in errors: ``row 3 of chunk.jsonl (id 'b')`` (row numbers from 1, the
    records' order in their file ``source``, when known)."""

    def __init__(self, records: Sequence[dict], source: str | os.PathLike | None = None) -> None:
        self.records, self.source = records, source

    def name(self, index: int) -> str:
        where = f" of {os.fspath(self.source)}" if self.source is not None else ""
        record = self.records[index]
        identity = f" (id {record['id']!r})" if isinstance(record, dict) and "id" in record else ""
        return f"row {index + 1}{where}{identity}"

    def at(self, index: int) -> Callable[[], str]:
        """Row ``index``'s name, made only when an error needs it."""
        return functools.partial(self.name, index)


def row_at(rows: RowsOf | None, index: int) -> Row:
    """Row ``index`` of ``rows`` for ``Chosen.call``; None where the caller does not know its rows."""
    return None if rows is None else rows.at(index)
