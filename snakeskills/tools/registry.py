"""The tools by name: one table of the built-in ones (``TOOLS``), or a user's own ``module:function``; a new session
per sample (``new_session``); and the plan's check that the chosen tool can run on this node (``check_tool``).

The built-ins: ``python`` (the call is Python, run in the code judge's sandbox, a sample's calls sharing their
variables; ``sandboxed.py``) and ``calculator`` (the call is one arithmetic expression, evaluated exactly without
running any code; ``calculator.py``). A user's ``module:function`` takes the call's text and returns the output's
text; it runs in the sandbox, from a copy of its module's file or package folder (``sandboxed.py`` says what it can
then reach).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from snakeskills.errors import SnakeskillsError
from snakeskills.registry import is_user_function, load_user_function
from snakeskills.sandbox.containment import check_sandbox
from snakeskills.settings.tools import Tools
from snakeskills.tools.calculator import CalculatorSession
from snakeskills.tools.sandboxed import PythonSession, UserToolSession, probe_user_tool
from snakeskills.tools.session import ToolResult, ToolSession

__all__ = [
    "TOOLS",
    "TOOL_DESCRIPTIONS",
    "Tool",
    "ToolResult",
    "ToolSession",
    "check_tool",
    "new_session",
]


@dataclass(frozen=True)
class Tool:
    """A built-in tool: what it does (one line, for the docs), how a session of it starts, and whether its calls
    run in the sandbox (``tools.sandbox``)."""

    description: str
    session: Callable[[Tools], ToolSession]
    sandboxed: bool


TOOLS = {
    "python": Tool(
        "Python code run in the sandbox; a sample's calls share their variables, and a last bare expression shows "
        "its value",
        PythonSession,
        sandboxed=True,
    ),
    "calculator": Tool(
        "one arithmetic expression (integers, decimals, + - * / // % **, parentheses), evaluated exactly without "
        "running code",
        CalculatorSession,
        sandboxed=False,
    ),
}
TOOL_DESCRIPTIONS = {name: tool.description for name, tool in TOOLS.items()}


def new_session(settings: Tools, key: str = "tools.tool") -> ToolSession:
    """A new session of the chosen tool, for one sample; safe to call from several threads at once."""
    if settings.tool in TOOLS:
        return TOOLS[settings.tool].session(settings)
    if is_user_function(settings.tool):
        return UserToolSession(settings, key)
    raise _unknown(settings.tool, key)


def check_tool(settings: Tools, key: str = "tools.tool") -> None:
    """Stop the plan unless the chosen tool (config ``key``) can run here: a known built-in, or a user's
    ``module:function`` that imports and is callable, in the job's process and in the sandbox; for a tool that runs
    in the sandbox, a sandbox that starts (its key, ``sandbox``, beside ``key``)."""
    section = key.rpartition(".")[0]
    sandbox_key = f"{section}.sandbox" if section else "sandbox"
    if settings.tool in TOOLS:
        if TOOLS[settings.tool].sandboxed:
            check_sandbox(settings.sandbox, key=sandbox_key)
        return
    if not is_user_function(settings.tool):
        raise _unknown(settings.tool, key)
    load_user_function(settings.tool, key)
    check_sandbox(settings.sandbox, key=sandbox_key)
    probe_user_tool(settings, key)


def _unknown(name: str, key: str) -> SnakeskillsError:
    return SnakeskillsError(
        f"config key {key}: unknown tool {name!r}; known: {', '.join(TOOLS)}, or your own as module:function"
    )
