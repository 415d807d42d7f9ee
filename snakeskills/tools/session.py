"""What every tool shares: the result of one call, and the session a sample's calls go through, which times each
call and cuts its output to ``max_output_characters`` (its settings: ``settings.tools.Tools``)."""

from __future__ import annotations

import abc
import time
from dataclasses import dataclass

from snakeskills.settings.tools import Tools


@dataclass(frozen=True)
class ToolResult:
    """One call of a tool: the text that goes into the output block (never None; cut to ``max_output_characters``
    with a note saying how much was left out), whether the call failed (an exception, a non-zero exit, an
    expression the calculator cannot read), whether it was killed at its time limit instead (the output then says
    so; ``error`` is then False: the two never hold at once), and its wall time in seconds."""

    output: str
    error: bool
    timeout: bool
    seconds: float
    # a model tool's tokens: of the prompt it read (None where its backend does not say) and of its answer
    input_tokens: int | None = 0
    output_tokens: int = 0
    # a model tool's call that its backend refused before any work (a prompt too long for the model's context):
    # ``error`` holds too, the output says why, and no token was read or written
    refused: bool = False


@dataclass(frozen=True)
class Ran:
    """What a tool's run of one call gave, before the session cuts and times it."""

    output: str
    error: bool = False
    timeout: bool = False
    input_tokens: int | None = 0
    output_tokens: int = 0
    refused: bool = False  # see ``ToolResult.refused``


def cut_output(output: str, max_characters: int) -> str:
    """``output`` cut to its first ``max_characters`` characters, NeMo-Skills' way (the start is kept), with a note
    on a line of its own saying how many characters were left out."""
    if len(output) <= max_characters:
        return output
    kept = output[:max_characters]
    newline = "" if kept.endswith("\n") else "\n"
    return f"{kept}{newline}<output cut: {len(output) - max_characters} characters left out>\n"


def timed_out(seconds: float) -> str:
    """The output of a call killed at its time limit."""
    return f"Timed out after {seconds:g} s"


class ToolSession(abc.ABC):
    """The calls of one sample (one row's transcript) to one tool, in order: a tool may keep state from one call to
    the next within a session (the Python tool's variables), never across sessions. ``call`` is used from one
    thread at a time; different sessions run calls at once from different threads."""

    def __init__(self, settings: Tools) -> None:
        self.settings = settings
        self.closed = False

    def call(self, text: str) -> ToolResult:
        """Run one call (``text``: what the model wrote between ``code_begin`` and ``code_end``)."""
        if self.closed:
            raise RuntimeError(f"a {self.settings.tool!r} tool session was called after it was closed")
        started = time.monotonic()
        ran = self.run(text)
        output = cut_output(ran.output, self.settings.max_output_characters)
        seconds = time.monotonic() - started
        return ToolResult(output, ran.error, ran.timeout, seconds, ran.input_tokens, ran.output_tokens, ran.refused)

    @abc.abstractmethod
    def run(self, text: str) -> Ran:
        """The tool's own run of one call, its output not yet cut."""

    def close(self) -> None:
        """End the session: what it kept (the Python tool's earlier calls) is dropped; it takes no more calls."""
        self.closed = True

    def __enter__(self) -> ToolSession:
        return self

    def __exit__(self, *_) -> None:
        self.close()
