"""How a tool call and its output sit in a model's text: the tags (``Tags``, NeMo-Skills' code tags), the call a
turn ends with (``turn_call``), the output block the loop appends, and where the tool outputs of a finished
transcript lie (what the trainers mask out of the loss and what the judge skips).

A transcript reads ``...{code_begin}CALL{code_end}{code_output_begin}OUTPUT{code_output_end}...``: the model writes
everything but the output blocks, which the loop appends (``output_parts``), so the model never learns to predict
them (``output_spans``) and the judge reads the answer after the last one (``final_text``).
"""

from __future__ import annotations

from dataclasses import dataclass

from snakeskills.settings.tools import Tags


@dataclass(frozen=True)
class ToolCall:
    """A call a turn of the model made: the tool, the text that runs, and how many characters of the tool's
    ``code_end`` the model wrote itself (all of it where it wrote the stop string, the tag without its last newline
    before EOS, none where the backend cut the stop string or the model ended inside the call); the loop writes the
    rest of the tag."""

    tool: str
    text: str
    end_written: int = 0


def turn_call(text: str, tags_by_tool: dict[str, Tags], *, past_end: bool = False) -> ToolCall | None:
    """The call the text after a transcript's last tool output ends with, among tools each with its own tags (the one
    opened last), or None. The call is open (the backend cut the stop string ``code_end``, or the model ended inside
    the block), closed by ``code_end`` the model wrote (a text that keeps its stop string; token ids, whose last token
    may run past it: what follows the tag stays the model's), or closed by the tag without its last newline before
    EOS (a fence that is not code). ``past_end``: text may follow a ``code_end`` the model wrote (decoded token ids:
    the token that completed the stop string ran past it); else a closed call ends the text."""
    found = None
    for name, tags in tags_by_tool.items():
        start = text.rfind(tags.code_begin)
        if start < 0 or text.rfind(tags.code_output_begin) > start:
            continue
        body = text[start + len(tags.code_begin) :]
        end = body.find(tags.code_end)
        if end >= 0:
            if not past_end and end + len(tags.code_end) < len(body):
                continue
            call = ToolCall(name, body[:end], len(tags.code_end))
        else:
            partial = tags.code_end.rstrip()
            written = len(partial) if partial and partial != tags.code_end and body.endswith(partial) else 0
            call = ToolCall(name, body[: len(body) - written], written)
        if found is None or start > found[0]:
            found = (start, call)
    return None if found is None else found[1]


def output_parts(output: str, tags: Tags, end_written: int = 0) -> tuple[str, str, str]:
    """What the loop appends after a call, in three parts: the rest of ``code_end`` the model did not write and the
    output's opening tag, the output, its closing tag. In tags that open a block of lines (``code_output_begin`` ends
    with a newline: ```output) the output sits on lines of its own. The tags are the protocol's (a tag may be a
    special token); the output is the tool's text, never a control token."""
    if tags.code_output_begin.endswith("\n") and output and not output.endswith("\n"):
        output += "\n"
    return tags.code_end[end_written:] + tags.code_output_begin, output, tags.code_output_end


def output_spans(text: str, tags: Tags) -> list[tuple[int, int]]:
    """The character spans ``[start, end)`` of each tool output block in a transcript, found by the tags
    (``code_output_begin`` up to and including its ``code_output_end``). The loop records the exact spans it
    appended (the record's ``tool_output_spans``, what trainers mask and the judge skips); this reading is for a
    transcript from elsewhere (a NeMo-Skills file, a bootstrap template)."""
    spans = []
    position = 0
    while True:
        start = text.find(tags.code_output_begin, position)
        if start < 0:
            return spans
        end = text.find(tags.code_output_end, start + len(tags.code_output_begin))
        end = len(text) if end < 0 else end + len(tags.code_output_end)
        spans.append((start, end))
        position = end


def tools_output_spans(text: str, tags: list[Tags]) -> list[tuple[int, int]]:
    """``output_spans`` of a transcript whose tools have tags of their own (several tools): every tool's output
    blocks, in order of position."""
    spans = {span for each in dict.fromkeys(tags) for span in output_spans(text, each)}
    return sorted(spans)


def answer_text(generation: str, spans) -> str:
    """The part of a transcript the judge reads: what the model wrote after its last tool output (``spans``: the
    record's ``tool_output_spans``; the whole text where it called no tool). ``judging.judge.judged_text`` reads a
    record so (the judge sits below the tools)."""
    from snakeskills.judging.judge import judged_text

    return judged_text({"generation": generation, "tool_output_spans": spans})


def final_text(text: str, tags: Tags) -> str:
    """The part of a transcript the judge reads: what the model wrote after its last tool output (the whole text
    where it called no tool)."""
    spans = output_spans(text, tags)
    return text[spans[-1][1] :] if spans else text
