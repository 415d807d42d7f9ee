"""Tool-integrated generation on any backend: a model writes a call between the tags, the call runs, its output is
appended in the output tags, and the model continues (NeMo-Skills' ``CodeExecutionWrapper``, batched).

``ToolLoop`` wraps a backend and answers ``generate`` as one. A turn generates until ``code_end`` (added to the stop
strings), EOS or the row's remaining budget; a turn ending inside a call hands it to the tool workers and the row
leaves the batch while ready rows keep generating. A row ends at a turn without a call, when its ``max_new_tokens``
model tokens are spent (tool outputs do not count), or at a call beyond ``max_calls`` (not run).

Each turn is sampled with ``turn_seed`` (row seed, turn number) and a tool's output depends only on the row's calls,
so a transcript does not depend on its batch-mates and a resumed job equals an uninterrupted one (timeouts aside).

A later turn's input is the first one's plus the transcript: exact token ids where the backend returns them (hf's
``keep_tokens``: what GRPO trains on), else the transcript's text encoded (token-id backends) or appended (text
backends), or the assistant's unfinished reply (messages backends, ``GenerationRequest.assistant_prefix``).

With ``tools.format: chat_template`` the same scheduler runs the model's own tool-calling format instead
(``chat_turns``): a turn ends at EOS, its JSON calls run in order, and the template's tool messages follow the
model's tokens. On a chat API (the openai backend) the server renders the template and its tool parser reads the
calls: each turn sends the conversation so far as messages with the functions as ``tools``, and the transcript
writes the turn's calls as the template does. The module is over 500 lines because both ways share one scheduler
and one row state (ids, text, spans, statistics, costs), which splitting would duplicate."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from snakeskills.backends.types import GenerationRequest, GenerationResult, SamplingParams, truncate_at_stop
from snakeskills.errors import SnakeskillsError
from snakeskills.settings.tools import FREE, Price, Tags, Tools
from snakeskills.tools.protocol import ToolCall, output_parts, turn_call
from snakeskills.tools.session import ToolResult

logger = logging.getLogger(__name__)


# what a sample's record gains from the loop (NeMo-Skills' names where it has them: calls, timeouts, tool time), then
# each call in order (``tool_call_log``: tool, cost, tokens, seconds, failed, timed out) and, where a tool has a
# price, the sample's cost (``cost``: the sum of its calls')
RECORD_FIELDS = (
    "code_rounds_executed",
    "num_code_timeouts",
    "code_execution_time",
    "tool_errors",
    "tool_call_over_limit",
    "tool_output_spans",
    "tool_call_log",
)
COST_FIELD = "cost"
# with tools.format chat_template: the messages after the prompt (assistant turns with their tool_calls, the tool
# messages, the last assistant turn), beside the rendered transcript in ``generation``
CONVERSATION_FIELD = "conversation"


@dataclass(frozen=True)
class LoopTool:
    """One tool as the loop calls it: its name (the record's and the rewards'), its tags, its price, and how a
    sample's session of it starts (given the sample's seed)."""

    name: str
    tags: Tags
    price: Price
    start: Callable[[int], object]


@dataclass(frozen=True)
class ToolUse:
    """How a model uses its tools: the program tool's settings (the ``tools`` section; its ``tool`` None where
    only models are tools) and tags, the models as tools (``models``: (``model_tool.ModelToolSettings``, tags,
    price) each), the calls a sample may make (all tools together), the calls that run at once, the program tool's
    price, and ``first_call``: a tool every sample calls first, with its problem as the call (the always-ask
    baseline: ``GenerationRequest.forced_call`` holds the problem)."""

    settings: Tools
    tags: Tags | None
    max_calls: int
    workers: int
    price: Price = FREE
    models: tuple = ()
    first_call: str | None = None
    # tools.format chat_template: the tools as functions (``functions.ToolFunction`` each), the template that
    # replaces the model's (None: its own) and the prompt's chat_template_kwargs
    functions: tuple = ()
    chat_template: str | None = None
    chat_template_kwargs: dict = field(default_factory=dict)

    @property
    def chat(self) -> bool:
        """Whether calls go through the model's chat template (JSON function calls, tool messages)."""
        return bool(self.functions)

    def tools(self) -> dict[str, LoopTool]:
        """Every tool by name: the program tool first, then the models."""
        from snakeskills.tools.model_tool import ModelToolSession
        from snakeskills.tools.registry import new_session

        settings = self.settings
        tools = {}
        if settings.tool is not None:
            tools[settings.tool] = LoopTool(settings.tool, self.tags, self.price, lambda seed: new_session(settings))
        for model, tags, price in self.models:
            limits = settings.replace(tool=model.name)
            tools[model.name] = LoopTool(model.name, tags, price, functools.partial(ModelToolSession, limits, model))
        return tools

    @property
    def priced(self) -> bool:
        """Whether a call costs anything: a tool with a price, or a model as a tool."""
        return bool(self.models) or not self.price.free


def tool_use(tools: Tools, chat_template_kwargs: dict | None = None) -> ToolUse:
    """The tools section a job reads (each model tool's ``model_path`` and resolved prompt set by the plan, and with
    ``format: chat_template`` the functions and template) as the loop uses it; ``chat_template_kwargs``: the
    prompt's, which the template's turns after a call are rendered with too."""
    from snakeskills.tools.functions import ToolFunction
    from snakeskills.tools.model_tool import ModelToolSettings

    models = tuple(
        (ModelToolSettings(name, model), model.tags, model.price or FREE) for name, model in tools.models.items()
    )
    return ToolUse(
        settings=tools,
        tags=tools.tags if tools.tool is not None else None,
        max_calls=tools.max_calls,
        workers=tools.workers,
        price=tools.program_price,
        models=models,
        first_call=tools.first_call,
        functions=tuple(ToolFunction(**function) for function in tools.functions or ()),
        chat_template=tools.template_text,
        chat_template_kwargs=dict(chat_template_kwargs or {}),
    )


def ids_match_text(tokenizer, result: GenerationResult, stop: tuple[str, ...], eos_token_ids=()) -> bool:
    """Whether a result's token ids decode to its text and what ended it: nothing (its budget), its EOS (the
    tokenizer's or one of ``eos_token_ids``), or one of the stop strings ``stop`` (the token that wrote its end may run
    past it)."""

    def decode(ids):
        return tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    ids = list(result.token_ids)
    decoded = decode(ids)
    if not decoded.startswith(result.generation):
        return False
    ending, last = decoded[len(result.generation) :], decode(ids[-1:])
    if not ending or (ids[-1] in {tokenizer.eos_token_id, *eos_token_ids} and ending == last):
        return True
    return any(ending.startswith(end) and len(ending) < len(end) + len(last) for end in stop)


def turn_seed(seed: int, turn: int) -> int:
    """The seed of a row's turn: the row's own for the first turn (a row that calls no tool is sampled as without
    tools), one made from it and the turn's number after."""
    if turn == 0:
        return seed
    digest = hashlib.sha256(f"{seed}\x00turn\x00{turn}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


@dataclass
class _Row:
    request: GenerationRequest
    text: str = ""
    token_ids: list[int] | None = None  # the completion's exact ids (a backend that keeps them: ``ToolLoop.ids``)
    logprobs: list[float] = field(default_factory=list)
    model_token: list[int] = field(default_factory=list)  # per completion id: 1 the model's, 0 the loop's
    segments: list[tuple[str, bool]] = field(default_factory=list)  # text mode: (text, a tool's output) in order
    spans: list[list[int]] = field(default_factory=list)
    turn_start: int = 0  # where the last turn's text starts
    eos_left_out: bool = False  # ids mode: the last id is an EOS the text leaves out
    reasoning: list[str] = field(default_factory=list)  # what a server split off each turn (reasoning_content)
    turns: int = 0
    tokens: int = 0
    calls: int = 0
    timeouts: int = 0
    errors: int = 0
    seconds: float = 0.0
    over_limit: bool = False
    sessions: dict = field(default_factory=dict)  # tool name: this sample's session of it
    log: list[dict] = field(default_factory=list)  # each call: tool, cost, tokens, seconds, failed, timed out
    cost: float = 0.0
    conversation: list[dict] = field(default_factory=list)  # chat template: the messages after the prompt
    turn_content: str = ""  # chat template: the last turn's text without its calls
    server_calls: list = field(default_factory=list)  # chat API: the last turn's calls, as its server read them
    server_raw: list = field(default_factory=list)  # chat API: the same as the server sent them (arguments as text)
    api_messages: list = field(default_factory=list)  # chat API: the messages after the prompt, as sent back to it


def _after_outputs(row: _Row) -> int:
    """Where the row's text after its last tool output starts (an output may hold a tool's tags)."""
    return row.spans[-1][1] if row.spans else 0


class ToolLoop:
    """A backend (``backend``) whose rows call a tool while they generate (``use``). ``generate`` returns the
    backend's results with the whole transcript as ``generation`` and the tool statistics in ``tools``.

    Ids mode (hf, the shared model server): a row's completion is its token ids and its text their decoding with special
    tokens, so the ids GRPO trains on decode to the text the judge reads; later turns continue from the ids. The model's
    tokens of a call's close stay; appended tags are the protocol's tokens and tool output plain text (never a control
    token). A finished row's ids end with its EOS or stop string's tokens (which its text leaves out), as TRL trains on
    them. Text mode (OpenAI-compatible, vLLM): the backend's text with the stop string cut; a later turn's ids are the
    transcript encoded piece by piece."""

    def __init__(self, backend, use: ToolUse):
        self.backend, self.use = backend, use
        self.tools = use.tools()
        self.tags = {name: tool.tags for name, tool in self.tools.items()}
        self.reports_steps = getattr(backend, "reports_steps", False)
        if hasattr(backend, "keep_tokens"):  # every turn's exact ids (their log-probabilities come with them)
            backend.keep_tokens = True
        self.ids = bool(getattr(backend, "keep_tokens", False))
        self.chat = None
        # a chat API's server renders the template and reads the calls (its tool parser); the loop sends the messages
        # with the functions (``GenerationRequest.functions``)
        self.server_parses_calls = use.chat and getattr(backend, "reads_tool_calls", False)
        if use.chat:
            from snakeskills.tools.chat_turns import ChatTurns

            if getattr(backend, "tokenizer", None) is None:
                raise SnakeskillsError(
                    "tools.format chat_template: the transcript is rendered with the model's chat template, and the "
                    f"{getattr(backend, 'name', type(backend).__name__)} backend has no tokenizer; set "
                    "generation.openai.tokenizer_path to a folder with the served model's tokenizer"
                )
            self.tags = {}
            self.functions = {function.name: function for function in use.functions}
            schemas = [function.schema for function in use.functions]
            where = "tools.format chat_template" + (" (tools.chat_template)" if use.chat_template else "")
            self.chat = ChatTurns(backend.tokenizer, use.chat_template, schemas, use.chat_template_kwargs, where)

    @property
    def forces_first_call(self) -> bool:
        """Whether each request must carry its problem as ``forced_call`` (``ToolUse.first_call``)."""
        return self.use.first_call is not None

    def __getattr__(self, name):  # takes, tokenizer, weights, model_path, ...: the backend's own
        return getattr(self.backend, name)

    def generate(
        self, requests: list[GenerationRequest], sampling: SamplingParams, on_results=None, on_step=None
    ) -> list[GenerationResult]:
        ends = [tags.code_end for tags in self.tags.values()]  # none with the chat template: a turn ends at EOS
        sampling = dataclasses.replace(sampling, stop=tuple(dict.fromkeys([*sampling.stop, *ends])))
        rows = [_Row(request) for request in requests]
        results: list[GenerationResult | None] = [None] * len(rows)
        ready = deque(range(len(rows)))
        calls: dict = {}
        per_call = getattr(self.backend, "batch_size", None) or max(len(rows), 1)
        steps = {"on_step": on_step} if on_step is not None and self.reports_steps else {}
        engine = self._turn_engine(sampling, steps.get("on_step"))

        def finish(index: int, finish_reason: str, error: str | None = None) -> None:
            row = rows[index]
            for session in row.sessions.values():
                session.close()
            if engine is not None:
                engine.release(index)
            results[index] = self._result(row, finish_reason, error, sampling)
            if on_results is not None:
                on_results([results[index]])

        def submit(index: int, call) -> None:
            row = rows[index]
            if self.chat is not None:  # a turn's function calls, run in order
                called = [function.message() for function in call if function.problem is None]
                row.conversation.append({"role": "assistant", "content": row.turn_content, "tool_calls": called})
                if self.server_parses_calls:
                    self._api_turn(row, call)
                for function in call:
                    tool = self._function_tool(function)
                    if tool is not None and tool not in row.sessions:
                        row.sessions[tool] = self.tools[tool].start(row.request.seed)
                calls[pool.submit(self._run_functions, row, call)] = (index, call)
                return
            if call.tool not in row.sessions:
                row.sessions[call.tool] = self.tools[call.tool].start(row.request.seed)
            calls[pool.submit(row.sessions[call.tool].call, call.text)] = (index, call)

        def take_turn(index: int, turn: GenerationResult) -> None:
            """A turn's end: the row's answer, its call (to a tool worker), or a call past ``max_calls``."""
            row = rows[index]
            self._absorb(row, turn)
            pending = self._pending(row) if turn.finish_reason == "stop" else None
            if turn.finish_reason == "error":
                finish(index, "error", turn.error)
            elif pending is None:
                finish(index, turn.finish_reason)
            elif row.calls + (len(pending) if self.chat is not None else 1) > self.use.max_calls:
                row.over_limit = True
                finish(index, "stop")
            else:
                submit(index, pending)

        def next_turn(index: int) -> GenerationRequest | None:
            """The row's next turn, or None where a tool's output filled the model's context (the row ends)."""
            turn_request = self._turn_request(rows[index], sampling)
            if turn_request.budget(sampling) <= 0:
                finish(index, "length")
                return None
            return turn_request

        try:
            with ThreadPoolExecutor(max_workers=self.use.workers, thread_name_prefix="tool") as pool:
                if self.use.first_call is not None:  # the always-ask baseline: each sample's first turn is a call
                    ready.clear()
                    for index, row in enumerate(rows):
                        call = self._force_call(row, self.use.first_call)
                        if call is None:  # max_calls 0: no call may run
                            row.over_limit = True
                            finish(index, "stop")
                        else:
                            submit(index, call)
                while ready or calls or (engine is not None and engine.busy):
                    if engine is not None:  # one decoding step; rows join and leave the running batch between steps
                        while ready and engine.room() > 0:
                            index = ready.popleft()
                            turn_request = next_turn(index)
                            if turn_request is not None:
                                engine.start(index, turn_request)
                        for index, turn in engine.step():
                            take_turn(index, turn)
                    elif ready:  # a batch of turns through the backend's generate
                        batch, turn_requests = [], []
                        while ready and len(batch) < per_call:
                            index = ready.popleft()
                            turn_request = next_turn(index)
                            if turn_request is not None:
                                batch.append(index)
                                turn_requests.append(turn_request)
                        if not batch:
                            continue
                        turns = self.backend.generate(turn_requests, sampling, **steps)
                        for index, turn in zip(batch, turns, strict=True):
                            take_turn(index, turn)
                    decoding = engine is not None and engine.busy
                    done = [future for future in calls if future.done()]
                    if not ready and not done and calls and not decoding:
                        done = list(wait(calls, return_when=FIRST_COMPLETED).done)
                    for future in done:
                        index, call = calls.pop(future)
                        row = rows[index]
                        if self.chat is not None:
                            self._append_tool_messages(row, call, future.result())
                        else:
                            self._append_output(row, call, future.result())
                        if row.tokens >= sampling.max_new_tokens:
                            finish(index, "length")
                        elif engine is not None:  # before new rows: its kept cache is waiting
                            ready.appendleft(index)
                        else:
                            ready.append(index)
        finally:  # the engine's caches go, and a stream stopped early leaves nothing running
            if engine is not None:
                engine.close()
        return results

    def _turn_engine(self, sampling: SamplingParams, on_step):
        """Where the backend decodes in this process, the turns as a stream: each started when its row is ready and
        returned when it ends, so that a row joins the running batch when its tool returns. hf (where the loop keeps
        exact ids): ``hf_turns.TurnEngine``, in which a row also keeps its KV cache across a call; vLLM:
        ``VLLMTurns``, whose prefix caching reuses the context. None: turns batched through the backend's
        ``generate``, each later one with its whole context (a server, the shared model server, a compiled hf)."""
        if self.server_parses_calls:
            return None
        if self.ids and getattr(self.backend, "keeps_turn_caches", False):
            from snakeskills.backends.hf_turns import TurnEngine

            return TurnEngine(self.backend, sampling, on_step)
        if getattr(self.backend, "streams_turns", False):
            return self.backend.turn_stream(sampling)
        return None

    # ids and text

    def _decode(self, ids) -> str:
        """Token ids as the transcript's text: special tokens written out (a tag may be one)."""
        return self.backend.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def _encode(self, text: str, *, plain: bool) -> list[int]:
        """Text the loop writes as token ids: a tool's output ``plain`` (text that reads as a special token stays
        text), the tags as the protocol's tokens."""
        if not text:
            return []
        return self.backend.tokenizer.encode(text, add_special_tokens=False, split_special_tokens=plain)

    def _pending(self, row: _Row):
        """The call the row's transcript ends with, read after its last tool output (an output may hold another
        tool's tags); with the chat template, the function calls of a turn that ended with its end-of-turn token
        (None: no call, the sample's answer)."""
        if self.chat is not None:
            if self.server_parses_calls:
                return row.server_calls or None
            if self.ids and not row.eos_left_out:  # a stop string ended the turn: the sample ends
                return None
            content, functions = self.chat.parse(row.text[row.turn_start :])
            row.turn_content = content
            return functions or None
        return turn_call(row.text[_after_outputs(row) :], self.tags, past_end=row.token_ids is not None)

    def _force_call(self, row: _Row, tool: str) -> ToolCall | None:
        """Open the call ``tool`` of the row's problem (``forced_call``) as if the model had written it: the loop's
        text, not the model's (its ids, where kept, are the loop's: masked out of any loss). None where ``max_calls``
        is 0: the call is beyond the limit."""
        if row.request.forced_call is None:
            raise SnakeskillsError(f"tools.first_call {tool!r}: a request has no problem to call the tool with")
        row.turns = 1
        if self.use.max_calls <= 0:
            return None
        if self.chat is not None:
            return self._force_function_call(row, tool)
        begin, call = self.tags[tool].code_begin, row.request.forced_call
        if self.ids:
            ids = self._encode(begin, plain=False) + self._encode(call, plain=True)
            row.token_ids, row.logprobs, row.model_token = ids, [0.0] * len(ids), [0] * len(ids)
            row.text = self._decode(ids)
        else:
            row.text = begin + call
            row.segments = [(begin, False), (call, True)]
        return ToolCall(tool, call)

    def _force_function_call(self, row: _Row, tool: str) -> list:
        """The always-ask baseline's first turn through the chat template: an assistant turn calling ``tool``'s
        function with the problem, written as the template writes it, ended by the model's end-of-turn token (the
        loop's text; its ids, where kept, masked out of any loss)."""
        from snakeskills.tools.function_calls import FunctionCall

        function = next(function for function in self.functions.values() if function.tool == tool)
        call = FunctionCall(function.name, {function.argument: row.request.forced_call})
        turn = self.chat.call_turn(call)
        if self.ids:
            ids = self._encode(turn, plain=False)
            end_ids = self._encode(self.chat.end_text, plain=False)
            row.token_ids = ids + end_ids
            row.logprobs, row.model_token = [0.0] * len(row.token_ids), [0] * len(row.token_ids)
            row.text, row.eos_left_out = self._decode(ids), True
        else:
            row.text = turn
            row.segments = [(turn, False)]
        row.turn_content = ""
        return [call]

    def _turn_request(self, row: _Row, sampling: SamplingParams) -> GenerationRequest:
        request = row.request
        if self.server_parses_calls:  # the functions offered, and after a call the conversation so far
            request = dataclasses.replace(request, functions=tuple(self.chat.functions))
        if row.turns == 0:
            return request
        seed, budget = turn_seed(request.seed, row.turns), sampling.max_new_tokens - row.tokens
        if self.server_parses_calls:
            messages = (*request.messages, *row.api_messages)
            return dataclasses.replace(request, seed=seed, messages=messages, max_new_tokens=budget)
        if request.prompt_token_ids is not None:
            if row.token_ids is not None:
                completion = row.token_ids
            else:
                completion = [id_ for text, plain in row.segments for id_ in self._encode(text, plain=plain)]
            ids = (*request.prompt_token_ids, *completion)
            context = getattr(self.backend, "context_length", None)
            if context is not None:  # the tool outputs took room of the context: the turn gets what is left
                budget = min(budget, context - len(ids))
            return dataclasses.replace(request, seed=seed, prompt_token_ids=ids, max_new_tokens=budget)
        if request.messages is not None:
            prefix_ids = tuple(row.token_ids) if row.token_ids is not None else None
            return dataclasses.replace(
                request,
                seed=seed,
                assistant_prefix=row.text,
                assistant_prefix_token_ids=prefix_ids,
                max_new_tokens=budget,
            )
        return dataclasses.replace(request, seed=seed, prompt=request.prompt + row.text, max_new_tokens=budget)

    def _absorb(self, row: _Row, turn: GenerationResult) -> None:
        row.turns += 1
        row.tokens += turn.num_generated_tokens
        row.turn_start = len(row.text)
        if turn.reasoning_content:
            if turn_call(turn.reasoning_content, self.tags, past_end=True) is not None:
                raise SnakeskillsError(
                    "tools: the server split the model's reasoning off its answer (a reasoning parser) and the model "
                    "called a tool while reasoning, which the loop cannot continue; serve the model without a "
                    "reasoning parser (generation.parse_reasoning: true reads its reasoning in the client)"
                )
            row.reasoning.append(turn.reasoning_content)
        if turn.finish_reason == "error":  # a soft failure: the row ends with what it has
            return
        if self.server_parses_calls:
            self._absorb_server_turn(row, turn)
            return
        if turn.token_ids is not None and (row.token_ids is not None or row.turns == 1):
            self._absorb_ids(row, turn)
            return
        if row.token_ids is not None:
            name = getattr(self.backend, "name", type(self.backend).__name__)
            raise SnakeskillsError(f"tool loop: the {name} backend returned a turn without its token ids")
        row.text += turn.generation
        row.segments.append((turn.generation, False))

    def _absorb_server_turn(self, row: _Row, turn: GenerationResult) -> None:
        """A chat API's turn: its content and the calls its server's tool parser read, written to the transcript as
        the template writes them (the server returned the messages, not the model's text)."""
        from snakeskills.tools.function_calls import server_call

        row.turn_content = turn.generation
        row.server_raw = list(turn.tool_calls or ())
        row.server_calls = [server_call(call) for call in row.server_raw]
        text = self.chat.assistant_turn(turn.generation, row.server_calls) if row.server_calls else turn.generation
        row.text += text
        row.segments.append((text, False))

    def _api_turn(self, row: _Row, functions: list) -> None:
        """The assistant message a chat API gets back for a turn with calls: every call as its server sent it (the
        always-ask baseline's as the loop wrote it), each with an id its tool message will carry
        (``call_1``, ``call_2``, ... in the conversation's order)."""
        import json

        raw = row.server_raw or [{"name": f.name, "arguments": json.dumps(f.arguments)} for f in functions]
        first = sum(len(message.get("tool_calls", ())) for message in row.api_messages) + 1
        calls = [
            {"id": f"call_{first + index}", "type": "function", "function": dict(call)}
            for index, call in enumerate(raw)
        ]
        row.api_messages.append({"role": "assistant", "content": row.turn_content, "tool_calls": calls})
        row.server_raw = []

    def _absorb_ids(self, row: _Row, turn: GenerationResult) -> None:
        """A turn's ids joined to the row's: its text is the decoding of all of them, less an EOS that is not a tag
        (a row that then calls a tool drops it: the call's close is the loop's)."""
        ids = list(turn.token_ids)
        before = row.token_ids or []
        row.token_ids = [*before, *ids]
        row.logprobs += list(turn.logprobs or [0.0] * len(ids))
        row.model_token += [1] * len(ids)
        row.eos_left_out = False
        if turn.finish_reason == "stop" and ids and ids[-1] in self.backend.eos_token_ids:
            eos_text = self._decode(ids[-1:])
            with_eos = self._decode(row.token_ids)
            call = turn_call(with_eos[_after_outputs(row) :], self.tags, past_end=True)
            written = self.tags[call.tool].code_end[: call.end_written] if call is not None else ""
            if not (eos_text and written.endswith(eos_text) and with_eos.endswith(eos_text)):  # an EOS, not a tag
                row.eos_left_out = True
                row.text = self._decode(row.token_ids[:-1])
                return
            row.text = with_eos
            return
        row.text = self._decode(row.token_ids)

    def _append_output(self, row: _Row, call: ToolCall, outcome) -> None:
        name = call.tool
        tool = self.tools[name]
        opening, output, closing = output_parts(outcome.output, tool.tags, call.end_written)
        if row.token_ids is not None:
            if row.eos_left_out:  # the model ended inside its call: the call's close is the loop's
                del row.token_ids[-1], row.logprobs[-1], row.model_token[-1]
                row.eos_left_out = False
            end_ids = self._encode(tool.tags.code_end[call.end_written :], plain=False)
            block_ids = self._encode(tool.tags.code_output_begin, plain=False)
            block_ids += self._encode(output, plain=True) + self._encode(closing, plain=False)
            row.token_ids += end_ids
            start = len(self._decode(row.token_ids))
            row.token_ids += block_ids
            appended = len(end_ids) + len(block_ids)
            row.logprobs += [0.0] * appended
            row.model_token += [0] * appended
            row.text = self._decode(row.token_ids)
        else:
            start = len(row.text) + len(opening) - len(tool.tags.code_output_begin)
            row.text += opening + output + closing
            row.segments += [(opening, False), (output, True), (closing, False)]
        row.spans.append([start, len(row.text)])
        self._count(row, name, outcome)

    def _count(self, row: _Row, name: str, outcome) -> None:
        """One call's share of the row's statistics, its cost and its entry in the call log (``name``: the tool's;
        a function call no tool could take logs the function's name it gave)."""
        tool = self.tools.get(name)
        price = tool.price if tool is not None else FREE
        row.calls += 1
        row.timeouts += outcome.timeout
        row.errors += outcome.error
        row.seconds += outcome.seconds
        if outcome.input_tokens is None and price.per_input_token and not outcome.refused:
            raise SnakeskillsError(
                f"tools.models.{name}.price.per_input_token: the tool's backend gave no count of the tokens its prompt "
                "had, so the price of its calls cannot be counted"
            )
        # a call its model refused (a prompt too long) ran nothing and costs nothing
        cost = 0.0 if outcome.refused else price.cost(outcome.input_tokens or 0, outcome.output_tokens)
        row.cost += cost
        row.log.append(
            {
                "tool": name,
                "cost": cost,
                "input_tokens": outcome.input_tokens,
                "output_tokens": outcome.output_tokens,
                "seconds": round(outcome.seconds, 4),
                "error": outcome.error,
                "timeout": outcome.timeout,
            }
        )

    # function calls through the chat template

    def _function_tool(self, function) -> str | None:
        """The tool a function call runs, or None where it names no function of the run or cannot be read."""
        known = self.functions.get(function.name) if function.problem is None else None
        return None if known is None else known.tool

    def _run_functions(self, row: _Row, functions: list) -> list:
        """Run a turn's function calls in order (in a tool worker); a call that cannot run (unreadable, an unknown
        function, wrong arguments) gets an error the model reads, as a failed call."""
        outcomes = []
        for function in functions:
            problem = function.problem
            known = self.functions.get(function.name) if problem is None else None
            if problem is None and known is None:
                problem = f"unknown function {function.name!r}; the functions are: {', '.join(self.functions)}"
            text = None
            if problem is None:
                text, problem = known.call_text(function.arguments)
            if problem is not None:
                outcomes.append(ToolResult(f"Error: {problem}", error=True, timeout=False, seconds=0.0))
            else:
                outcomes.append(row.sessions[known.tool].call(text))
        return outcomes

    def _append_tool_messages(self, row: _Row, functions: list, outcomes: list) -> None:
        """The tool messages answering a turn's calls, in order, as the chat template renders them after the
        model's end-of-turn token (which stays the model's): appended to the ids (mask 0) or the text."""
        messages = [
            {"role": "tool", "name": function.name or "invalid", "content": outcome.output}
            for function, outcome in zip(functions, outcomes, strict=True)
        ]
        row.conversation += messages
        if self.server_parses_calls:  # each answers the call of its place, by the id the assistant message gave it
            calls = row.api_messages[-1]["tool_calls"]
            for message, sent in zip(messages, calls, strict=True):
                row.api_messages.append({**message, "tool_call_id": sent["id"]})
        if row.token_ids is not None:
            end_text = self._decode(row.token_ids[-1:])  # the end-of-turn token that ended a turn with calls
            row.eos_left_out = False
            start = len(self._decode(row.token_ids))
            pieces = self.chat.suffix(messages, end_text)
            appended = [id_ for text, plain in pieces for id_ in self._encode(text, plain=plain)]
            row.token_ids += appended
            row.logprobs += [0.0] * len(appended)
            row.model_token += [0] * len(appended)
            row.text = self._decode(row.token_ids)
        else:  # the backend's text leaves the end-of-turn token out: the model wrote it
            row.text += self.chat.end_text
            row.segments.append((self.chat.end_text, False))
            start = len(row.text)
            for text, plain in self.chat.suffix(messages):
                row.text += text
                row.segments.append((text, plain))
        row.spans.append([start, len(row.text)])
        for function, outcome in zip(functions, outcomes, strict=True):
            self._count(row, self._function_tool(function) or function.name or "invalid", outcome)

    def _result(self, row: _Row, finish_reason: str, error: str | None, sampling: SamplingParams) -> GenerationResult:
        text = row.text
        if finish_reason == "stop" and not row.eos_left_out:
            # ended by a stop string (no call, or one past max_calls): the text leaves it out, the ids keep the
            # tokens that wrote it
            last, _ = truncate_at_stop(text[row.turn_start :], sampling.stop)
            text = text[: row.turn_start] + last
        values = (row.calls, row.timeouts, round(row.seconds, 4), row.errors, row.over_limit, row.spans, row.log)
        stats = dict(zip(RECORD_FIELDS, values, strict=True))
        if self.use.priced:
            stats[COST_FIELD] = round(row.cost, 10)
        if self.chat is not None:
            final = text[_after_outputs(row) :]
            if row.conversation or final:
                stats[CONVERSATION_FIELD] = [*row.conversation, {"role": "assistant", "content": final}]
        details = {}
        if row.token_ids is not None:
            details = {
                "token_ids": tuple(row.token_ids),
                "logprobs": tuple(row.logprobs),
                "model_token_mask": tuple(row.model_token),
            }
        return GenerationResult(
            generation=text,
            num_generated_tokens=row.tokens,
            finish_reason=finish_reason,
            error=error,
            reasoning_content="".join(row.reasoning) if row.reasoning else None,
            tools=stats,
            **details,
        )
