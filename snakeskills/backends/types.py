"""The interface every backend speaks: sampling parameters, a request (one prompt with its own seed), a result,
and the helpers backends share (stop strings, a prompt too long for the model's context)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class SamplingParams:
    temperature: float
    top_p: float
    top_k: int
    max_new_tokens: int
    stop: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class GenerationRequest:
    """One prompt, in the form its backend takes: token ids (hf, vllm), messages (chat APIs, the model
    server) or text (a completions API); see ``build_request``."""

    seed: int
    prompt_token_ids: tuple[int, ...] | None = None  # what the model continues (prompts.model_input_ids)
    messages: tuple[dict, ...] | None = None  # the conversation, for chat APIs that apply their own template
    prompt: str | None = None  # the rendered text, for completions APIs that tokenize it themselves
    # a turn after a tool call (snakeskills.tools.loop): the model's own text so far, which a messages backend
    # continues as the assistant's unfinished reply (token-id and text requests hold it in their prompt), and the
    # tokens this row may still generate (None: the sampling's max_new_tokens)
    assistant_prefix: str | None = None
    # the same as token ids, where the loop keeps them (the shared model server continues from them exactly)
    assistant_prefix_token_ids: tuple[int, ...] | None = None
    max_new_tokens: int | None = None
    # the call the tool loop makes before the model's first turn (tools.first_call, the always-ask baseline): the
    # row's problem; backends never read it
    forced_call: str | None = None
    # tools.format chat_template on a chat API: the functions offered (their JSON schemas), sent as the request's
    # ``tools``; the server's tool parser reads the calls (``GenerationResult.tool_calls``)
    functions: tuple[dict, ...] | None = None

    def budget(self, sampling: SamplingParams) -> int:
        """The tokens this request may generate."""
        return sampling.max_new_tokens if self.max_new_tokens is None else self.max_new_tokens


@dataclass(frozen=True)
class GenerationResult:
    generation: str
    num_generated_tokens: int
    finish_reason: str  # "stop" (EOS or a stop string), "length", or "error" (a soft failure)
    error: str | None = None  # why a soft failure produced no generation (e.g. the prompt is too long)
    # the reasoning an OpenAI-compatible server split off the text (a reasoning parser: message.reasoning_content)
    reasoning_content: str | None = None
    # the generated token ids (up to and including the EOS or the token that completed a stop string) and each one's
    # log-probability under the sampling temperature: only from a backend asked for them (hf's ``keep_tokens``)
    token_ids: tuple[int, ...] | None = None
    logprobs: tuple[float, ...] | None = None
    # what the tool loop adds (snakeskills.tools.loop.ToolStats as a dict: calls, timeouts, tool time, the spans
    # of the tool outputs in the text): None where no tool was on
    tools: dict | None = None
    # per token of ``token_ids``: 1 where the model drew it, 0 where a tool's output was appended (tool loop)
    model_token_mask: tuple[int, ...] | None = None
    # the calls a chat API's tool parser read from the turn (a request with ``functions``): each ``{"name": ...,
    # "arguments": <JSON text>}`` as the server sent it; ``generation`` is then the turn's content without them
    tool_calls: tuple[dict, ...] | None = None
    # the tokens of the prompt the model read, where the backend counts them for the caller (the model server, which
    # tokenizes the messages itself; an OpenAI server's usage): a priced model's input tokens (tools.models). A count
    # about the request, not part of what was generated: results compare equal without it
    num_prompt_tokens: int | None = field(default=None, compare=False)


def truncate_at_stop(text: str, stop: tuple[str, ...]) -> tuple[str, bool]:
    """Cut ``text`` at the earliest stop string; returns the text and whether a stop string was hit."""
    cut = min((index for index in (text.find(marker) for marker in stop) if index >= 0), default=-1)
    if cut < 0:
        return text, False
    return text[:cut], True


def context_overflow(
    num_prompt_tokens: int, max_new_tokens: int, context_length: int | None
) -> GenerationResult | None:
    """The soft failure of a prompt that leaves no room for ``max_new_tokens`` in the model's context, or None.

    Such a row gets an empty ``generation`` with ``finish_reason: error`` (as the openai backend reports a
    server's context-length refusal) instead of failing the whole job or being silently cut.
    """
    if context_length is None or num_prompt_tokens + max_new_tokens <= context_length:
        return None
    return GenerationResult(
        generation="",
        num_generated_tokens=0,
        finish_reason="error",
        error=(
            f"prompt of {num_prompt_tokens} tokens + max_new_tokens {max_new_tokens} exceeds the model's context "
            f"of {context_length} tokens"
        ),
    )
