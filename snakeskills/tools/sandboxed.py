"""The tools whose calls run as programs in the code judge's sandbox (``sandbox.program_runner.run_once``):
Python, and a user's ``module:function``. Each call is one fresh run under ``tools.timeout_seconds`` (wall clock)
and ``tools.memory_limit_mb``; nothing lives on between calls, so samples never see each other.

The Python tool keeps a sample's state as a NeMo-Skills session does: each run replays the session's earlier
successful calls (output discarded), then the new one, whose standard output alone is shown. A last bare expression
that printed nothing shows its ``repr``; an exception shows its type and message, never a traceback. ``random`` is
seeded alike in every run (``RANDOM_SEED``) so a replay draws the same; a replayed call that fails (other chance,
the clock) is passed over. Replays count against the time limit.

A user's tool takes the call's text (str) and returns a str (or what ``str()`` makes one), shown after anything it
printed. Its argument is the model's, so it runs in the sandbox: its module's file (or top-level package folder) is
copied into the run's folder, or imported in place from the interpreter's site-packages, and gets the text on
standard input; nothing else of the user's is in reach. The plan imports it there once (``probe_user_tool``)."""

from __future__ import annotations

import base64
import functools
import importlib.util
import json
import os
import signal
import site
import sysconfig

from snakeskills.errors import SnakeskillsError
from snakeskills.sandbox.program_runner import run_once
from snakeskills.settings.tools import Tools
from snakeskills.tools.session import Ran, ToolSession, timed_out

REPORTED = 3  # a harness's exit status when it showed the call's exception itself
STDERR_LINES = 3  # lines of the standard error shown when a run ends otherwise
MAX_MODULE_BYTES = 8 * 1024 * 1024  # the most of a user tool's source copied into each run
MODULES_FOLDER = "tool-modules"  # in the run's folder, where a user tool's source is copied
RANDOM_SEED = 0

# Shared by both harnesses: standard input holds the request (JSON); the call itself gets an empty one.
_COMMON = """\
import io, json, os, sys, traceback


def _flush():
    for stream in (sys.stdout, sys.__stdout__):
        try:
            stream.flush()
        except Exception:
            pass


def _write(text):
    _flush()
    data = text.encode("utf-8", "replace")
    while data:
        data = data[os.write(1, data):]


def _report(error):
    _write("".join(traceback.format_exception_only(type(error), error)))


def _request():
    request = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    sys.stdin = io.StringIO()
    return request
"""

PYTHON_HARNESS = (
    _COMMON
    + f"""
import ast, random


def _replay(calls, namespace):
    _flush()
    saved, null = os.dup(1), os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)
    try:
        for call in calls:
            try:
                exec(compile(call, "<call>", "exec"), namespace)
            except BaseException:
                pass
    finally:
        _flush()
        os.dup2(saved, 1)
        os.close(saved)
        sys.stdout = sys.__stdout__


def _written():
    _flush()
    try:
        return os.lseek(1, 0, os.SEEK_CUR)
    except OSError:
        return None


def _call(source, namespace):
    before = _written()
    try:
        tree = ast.parse(source, "<call>")
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        exec(compile(tree, "<call>", "exec"), namespace)
        if last is not None:
            value = eval(compile(ast.Expression(last.value), "<call>", "eval"), namespace)
            if value is not None and _written() == before:
                _write(repr(value) + "\\n")
    except SystemExit as error:
        if error.code not in (None, 0):
            _report(error)
            return False
    except BaseException as error:
        _report(error)
        return False
    return True


def _main():
    request = _request()
    random.seed(request["seed"])
    namespace = {{"__name__": "__main__", "__builtins__": __builtins__}}
    _replay(request["replay"], namespace)
    succeeded = _call(request["call"], namespace)
    _flush()
    os._exit(0 if succeeded else {REPORTED})


_main()
"""
)

USER_HARNESS = (
    _COMMON
    + f"""
import base64, importlib


def _main():
    request = _request()
    folder = os.path.join(os.getcwd(), {MODULES_FOLDER!r})
    for name, data in request["files"].items():
        path = os.path.join(folder, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as file:
            file.write(base64.b64decode(data))
    sys.path.insert(0, folder)
    try:
        function = getattr(importlib.import_module(request["module"]), request["function"])
        if not callable(function):
            raise TypeError(f"{{request['module']}}.{{request['function']}} is not callable")
        if request.get("arguments") is not None:  # a function of several parameters: the call's keywords
            _write(str(function(**request["arguments"])))
        elif request["text"] is not None:
            _write(str(function(request["text"])))
    except BaseException as error:
        _report(error)
        _flush()
        os._exit({REPORTED})
    _flush()
    os._exit(0)


_main()
"""
)


def run_program(program: str, request: dict, settings: Tools) -> Ran:
    """One sandboxed run of a harness with its request on standard input, read as a call's result: its standard
    output; on a failure also the exception it showed, or the last lines of its standard error and how it ended."""
    outcome = run_once(
        program,
        stdin=json.dumps(request),
        timeout_seconds=settings.timeout_seconds,
        memory_limit_mb=settings.memory_limit_mb,
        sandbox=settings.sandbox,
    )
    if outcome.returncode is None:
        return Ran(timed_out(settings.timeout_seconds), timeout=True)
    output = outcome.stdout or ""
    if outcome.returncode == 0:
        return Ran(output)
    if outcome.returncode == REPORTED:
        return Ran(output, error=True)
    if outcome.returncode in (-signal.SIGXCPU, 128 + signal.SIGXCPU):  # its CPU time ran past the limit
        return Ran(timed_out(settings.timeout_seconds), timeout=True)
    lines = [line for line in outcome.stderr.splitlines() if line.strip()][-STDERR_LINES:]
    if output and not output.endswith("\n"):
        output += "\n"
    return Ran(output + "".join(f"{line}\n" for line in lines) + ended(outcome.returncode), error=True)


def ended(returncode: int) -> str:
    """How a run that neither finished nor showed an exception ended."""
    number = -returncode if returncode < 0 else returncode - 128
    if returncode < 0 or 0 < number < signal.NSIG:
        try:
            return f"Error: the call was killed by {signal.Signals(number).name}"
        except ValueError:
            pass
    return f"Error: the call ended with exit status {returncode}"


class PythonSession(ToolSession):
    """A sample's Python session: the calls that succeeded so far, replayed before each new one."""

    def __init__(self, settings: Tools) -> None:
        super().__init__(settings)
        self.succeeded: list[str] = []

    def run(self, text: str) -> Ran:
        request = {"seed": RANDOM_SEED, "replay": self.succeeded, "call": text}
        ran = run_program(PYTHON_HARNESS, request, self.settings)
        if not ran.error and not ran.timeout:
            self.succeeded.append(text)
        return ran

    def close(self) -> None:
        self.succeeded = []
        super().close()


class UserToolSession(ToolSession):
    """A sample's session with a user's ``module:function``: each call one sandboxed run; it keeps nothing. A
    function of several parameters (``parameter_names``) takes them as keywords, from the call's text read as a JSON
    object (what a chat template's call passes); any other (one parameter, ``*args``) takes the call's text."""

    def __init__(self, settings: Tools, key: str = "tools.tool") -> None:
        from snakeskills.registry import load_user_function

        super().__init__(settings)
        self.module, _, self.function = settings.tool.partition(":")
        self.files = module_files(self.module, key)
        self.keywords = len(parameter_names(load_user_function(settings.tool, key))) > 1

    def run(self, text: str) -> Ran:
        request = {"files": self.files, "module": self.module, "function": self.function, "text": text}
        if self.keywords:
            arguments, problem = keyword_arguments(text, self.function)
            if problem is not None:
                return Ran(f"Error: {problem}", error=True)
            request.update(text=None, arguments=arguments)
        return run_program(USER_HARNESS, request, self.settings)


def parameter_names(function) -> list[str]:
    """The named parameters of ``function`` (not ``*args`` or ``**kwargs``)."""
    import inspect

    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [name for name, p in inspect.signature(function).parameters.items() if p.kind in kinds]


def keyword_arguments(text: str, function: str) -> tuple[dict | None, str | None]:
    """A call's text as the keyword arguments of a function of several parameters (a JSON object), or what is
    wrong with it (shown to the model as the call's error)."""
    try:
        arguments = json.loads(text)
    except json.JSONDecodeError as error:
        return None, f"{function} takes its arguments as a JSON object ({error})"
    if not isinstance(arguments, dict):
        return None, f"{function} takes its arguments as a JSON object, not {type(arguments).__name__}"
    return arguments, None


def probe_user_tool(settings: Tools, key: str) -> None:
    """Stop unless the user's tool imports in the sandbox as its calls will import it (its function found there);
    the module imported in the job's own process already (``registry.check_tool``)."""
    module, _, function = settings.tool.partition(":")
    request = {"files": module_files(module, key), "module": module, "function": function, "text": None}
    ran = run_program(USER_HARNESS, request, settings)
    if ran.error or ran.timeout:
        said = " | ".join(line for line in ran.output.strip().splitlines()[-3:] if line.strip())
        raise SnakeskillsError(
            f"config key {key}: {settings.tool!r} imports here but not in the tool's sandbox ({said}): it must run "
            "from its own file or package folder with the interpreter's installed packages (see "
            "snakeskills/tools/sandboxed.py)"
        )


@functools.cache
def module_files(module: str, key: str) -> dict[str, str]:
    """The source a user's tool needs in the sandbox, by path under ``MODULES_FOLDER`` (base64): the file of its
    top-level module, or every file of its top-level package's folder (``__pycache__`` and hidden ones left out);
    none for a module installed in the interpreter's environment, which the sandbox shows where it lies."""
    top = module.split(".")[0]
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError) as error:
        raise SnakeskillsError(f"config key {key}: module {top!r} is not found ({error})") from error
    if spec is None:
        raise SnakeskillsError(f"config key {key}: module {top!r} is not found; install it or put it on PYTHONPATH")
    if spec.submodule_search_locations:
        sources = [(folder, top) for folder in spec.submodule_search_locations]
    elif spec.origin and os.path.isfile(spec.origin):
        sources = [(spec.origin, os.path.basename(spec.origin))]
    else:
        raise SnakeskillsError(
            f"config key {key}: module {top!r} has no file or folder to copy into the tool's sandbox ({spec.origin})"
        )
    if all(_installed(path) for path, _ in sources):
        return {}
    files: dict[str, str] = {}
    size = 0
    for path, name in sources:
        for source, target in _files_under(path, name):
            with open(source, "rb") as file:
                data = file.read(MAX_MODULE_BYTES + 1 - size)
            size += len(data)
            if size > MAX_MODULE_BYTES:
                raise SnakeskillsError(
                    f"config key {key}: module {top!r} ({path}) holds more than {MAX_MODULE_BYTES // 2**20} MB, "
                    "all copied into the tool's sandbox on each call; give the tool a module of its own"
                )
            files[target] = base64.b64encode(data).decode("ascii")
    return files


def _files_under(path: str, name: str) -> list[tuple[str, str]]:
    """(file, its path in the copy) for a module's file, or for each file in a package's folder."""
    if os.path.isfile(path):
        return [(path, name)]
    found = []
    for folder, folders, files in os.walk(path):
        folders[:] = sorted(entry for entry in folders if entry != "__pycache__" and not entry.startswith("."))
        for entry in sorted(files):
            if not entry.startswith("."):
                source = os.path.join(folder, entry)
                found.append((source, os.path.join(name, os.path.relpath(source, path))))
    return found


def _installed(path: str) -> bool:
    """Whether the module or package at ``path`` lies in a folder of the interpreter's own path (its standard
    library or site-packages), where the sandboxed interpreter finds it too (the sandbox shows them read-only)."""
    return os.path.realpath(os.path.dirname(path)) in _interpreter_folders()


@functools.cache
def _interpreter_folders() -> frozenset[str]:
    """The interpreter's standard library and site-packages folders, links resolved."""
    paths = sysconfig.get_paths()
    folders = {paths[name] for name in ("stdlib", "platstdlib", "purelib", "platlib")} | set(site.getsitepackages())
    return frozenset(os.path.realpath(folder) for folder in folders)
