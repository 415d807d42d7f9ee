"""A model tool's limits (``snakeskills.tools.model_tool``): a call its server refuses is a failed call shown to the
model, not charged for tokens; a call not answered within ``tools.timeout_seconds`` times out and the job goes on;
a batch whose backend fails in any way (an error, a short result list) is an error every caller of it sees, and
the calls after it are sent.

Every wait here is bounded: a call that might hang runs in a thread joined with a generous bound (``BOUND``), so a
regression fails the test instead of hanging it; the hung expert blocks on an event, never on a clock."""

from __future__ import annotations

import http.server
import threading
import time

import pytest
from conftest import generation_section, model_tool_settings, resolved_prompt
from servers import JsonHandler

from snakeskills.backends.types import (
    GenerationRequest,
    GenerationResult,
    SamplingParams,
    context_overflow,
    truncate_at_stop,
)
from snakeskills.errors import SnakeskillsError
from snakeskills.settings.tools import Price, Tags, Tools
from snakeskills.tools import model_tool
from snakeskills.tools.loop import ToolLoop, ToolUse
from snakeskills.tools.model_tool import ModelToolSession, ModelToolSettings, asked_model, call_seed
from snakeskills.tools.session import timed_out

ASK = Tags("<ask>", "</ask>", "<ans>", "</ans>")
SAMPLING = SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=100)
PROMPT = resolved_prompt(user="{problem}=", chat_template=False)
BOUND = 30  # seconds: far above any wait here, which are 0.5 s timeouts and answers that come at once


def expert_settings(generation: dict | None = None) -> ModelToolSettings:
    generation = generation or {"backend": "openai", "sampling": {"max_new_tokens": 100}, "share_model": {"threads": 1}}
    return model_tool_settings("expert", PROMPT, generation, tags=ASK)


def limits(tool: str | None, **settings) -> Tools:
    """The ``tools`` section's limits for ``tool`` (the schema's defaults filling the rest)."""
    return Tools.filled({"tool": tool, **settings}, "tools")


class Expert:
    """Answers ``#<seed>`` to each call, once ``release`` is set (set from the start unless ``hung``); with ``short``
    it gives one result fewer than it was asked for. It records the size of each batch."""

    takes = "text"
    tokenizer = None

    def __init__(self, *, hung: bool = False, short: bool = False):
        self.release = threading.Event()
        if not hung:
            self.release.set()
        self.short = short
        self.batches: list[int] = []

    def generate(self, requests, sampling, on_results=None):
        self.batches.append(len(requests))
        assert self.release.wait(BOUND), "the test never released the expert"
        results = [GenerationResult(f"#{r.seed}", 2, "stop", num_prompt_tokens=len(r.prompt)) for r in requests]
        return results[:-1] if self.short else results


@pytest.fixture()
def behind():
    """Puts an ``Expert`` behind the tool's process-wide ``AskedModel``; the tool is forgotten after the test and a
    hung expert released."""
    experts = []

    def put(expert: Expert) -> Expert:
        asked = asked_model(expert_settings())
        asked.backend, asked.sampling = expert, SAMPLING
        experts.append(expert)
        return expert

    yield put
    for expert in experts:
        expert.release.set()
    model_tool._ASKED.clear()


def in_thread(function, *arguments):
    """Run ``function`` in a daemon thread; returns the thread and a dict that gets its ``result`` or ``error``."""
    outcome = {}

    def run():
        try:
            outcome["result"] = function(*arguments)
        except BaseException as error:  # noqa: BLE001 - handed to the test
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def joined(thread: threading.Thread) -> bool:
    thread.join(BOUND)
    return not thread.is_alive()


def wait_until(condition) -> None:
    deadline = time.monotonic() + BOUND
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.01)


def session(seed: int = 0, timeout: float = 60.0) -> ModelToolSession:
    return ModelToolSession(limits("expert", timeout_seconds=timeout), expert_settings(), seed)


# ------------------------------------------------------------------------------------------------ timeouts


def test_a_hung_expert_times_its_calls_out_and_answers_again_once_it_is_back(behind):
    expert = behind(Expert(hung=True))
    first, first_outcome = in_thread(session(seed=1, timeout=0.5).call, "1+1")
    wait_until(lambda: expert.batches == [1])  # its batch is out, and hangs
    queued, queued_outcome = in_thread(session(seed=2, timeout=0.5).call, "2+2")  # waits behind it
    assert joined(first) and joined(queued), "a call of a hung expert did not return"
    for outcome in (first_outcome, queued_outcome):
        result = outcome["result"]
        assert (result.output, result.timeout, result.error) == (timed_out(0.5), True, False)
        assert (result.input_tokens, result.output_tokens, result.refused) == (0, 0, False)
    expert.release.set()  # the hung batch comes back: its answer is dropped, and the next call is sent
    answered = session(seed=3).call("3+3")
    assert answered.output == f"#{call_seed(3, 'expert', 0)}" and not answered.timeout
    assert expert.batches == [1, 1]  # the call that gave up before it was sent never was


def test_a_timed_out_call_is_counted_and_the_sample_goes_on(behind):
    expert = behind(Expert(hung=True))

    class Student:
        """Asks the expert in its first turn and answers 5 in its second."""

        takes = "text"

        def generate(self, requests, sampling, on_results=None):
            results = []
            for request in requests:
                turn = ["<ask>2+3</ask>", "\\boxed{5}"][request.prompt.count(ASK.code_output_end)]
                text, _ = truncate_at_stop(turn, sampling.stop)
                results.append(GenerationResult(text, len(text), "stop"))
            return results

    use = ToolUse(
        settings=limits(None, timeout_seconds=0.5),
        tags=None,
        max_calls=2,
        workers=2,
        models=((expert_settings(), ASK, Price.filled({"per_call": 1.0})),),
    )
    thread, outcome = in_thread(ToolLoop(Student(), use).generate, [GenerationRequest(seed=0, prompt="q=")], SAMPLING)
    assert joined(thread), "the tool loop hung on a hung expert"
    [result] = outcome["result"]
    assert result.generation == f"<ask>2+3</ask><ans>{timed_out(0.5)}</ans>\\boxed{{5}}"
    assert result.tools["num_code_timeouts"] == 1 and result.tools["tool_errors"] == 0
    assert result.tools["tool_call_log"][0]["timeout"] is True
    expert.release.set()


# ------------------------------------------------------------------------------------------------ failed batches


def test_a_short_result_list_is_an_error_every_caller_of_its_batch_sees_and_the_next_calls_are_sent(behind):
    expert = behind(Expert(hung=True, short=True))
    first, first_outcome = in_thread(session(seed=1).call, "1+1")
    wait_until(lambda: expert.batches == [1])
    asked = asked_model(expert_settings())
    others = [in_thread(session(seed=seed).call, "2+2") for seed in (2, 3)]
    wait_until(lambda: len(asked._queue) == 2)  # the next batch: both of them
    expert.release.set()
    assert joined(first) and all(joined(thread) for thread, _ in others), "a caller of a failed batch hung"
    assert expert.batches == [1, 2]
    for outcome in [first_outcome, *(outcome for _, outcome in others)]:
        error = outcome["error"]
        assert isinstance(error, SnakeskillsError), error
        assert "tools.models.expert: the model's backend answered a batch of" in str(error)
    assert "batch of 2 calls with 1 results" in str(others[0][1]["error"])
    expert.short = False  # the tool is not left busy: a later call is sent and answered
    assert session(seed=4).call("4+4").output == f"#{call_seed(4, 'expert', 0)}"


def test_a_backends_own_error_reaches_every_caller_of_its_batch_and_the_tool_goes_on(behind):
    expert = behind(Expert())
    answers = iter([RuntimeError("the expert's server went away")])

    def failing_once(requests, sampling, on_results=None):
        failure = next(answers, None)
        if failure is not None:
            raise failure
        return Expert.generate(expert, requests, sampling)

    expert.generate = failing_once
    thread, outcome = in_thread(session(seed=1).call, "1+1")
    assert joined(thread)
    assert "went away" in str(outcome["error"])
    assert session(seed=2).call("2+2").output == f"#{call_seed(2, 'expert', 0)}"


# ------------------------------------------------------------------------------------------------ refused calls


class ContextTooShort(JsonHandler):
    """Answers /v1/completions as a vLLM server whose context the prompt does not fit (HTTP 400). It stands in for
    such a server, which cannot run on a CPU-only machine."""

    def do_POST(self):  # noqa: N802 - http.server's naming
        self.rfile.read(int(self.headers["Content-Length"]))
        message = "This model's maximum context length is 32 tokens. However, you requested 900 tokens."
        self.send_json(400, {"object": "error", "message": message, "type": "BadRequestError", "code": 400})


@pytest.fixture()
def refusing_expert():
    """A model tool behind a server that refuses every prompt as too long."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), ContextTooShort)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    openai = {"base_url": f"http://127.0.0.1:{server.server_address[1]}/v1", "model": "stub", "api": "completions"}
    yield expert_settings(generation_section(backend="openai", openai=openai, sampling={"max_new_tokens": 30}))
    server.shutdown()
    server.server_close()
    model_tool._ASKED.clear()


def test_a_refused_call_is_a_failed_call_that_says_why_and_read_no_tokens(refusing_expert):
    result = ModelToolSession(limits("expert"), refusing_expert, seed=0).call("1+1")
    assert (result.error, result.timeout, result.refused) == (True, False, True)
    assert (result.input_tokens, result.output_tokens) == (0, 0)
    assert result.output == (
        "The model refused the call: This model's maximum context length is 32 tokens. However, you requested 900 "
        "tokens."
    )


def test_a_refused_call_of_a_tool_priced_per_input_token_is_counted_and_the_job_goes_on(refusing_expert):
    class Student:
        takes = "text"

        def generate(self, requests, sampling, on_results=None):
            turns = [("<ask>1+1</ask>" if "</ans>" not in r.prompt else "\\boxed{2}") for r in requests]
            texts = [truncate_at_stop(turn, sampling.stop)[0] for turn in turns]
            return [GenerationResult(text, len(text), "stop") for text in texts]

    price = Price(per_call=1.0, per_input_token=0.5, per_output_token=0.5)
    use = ToolUse(settings=limits(None), tags=None, max_calls=2, workers=1, models=((refusing_expert, ASK, price),))
    [result] = ToolLoop(Student(), use).generate([GenerationRequest(seed=0, prompt="q=")], SAMPLING)
    assert result.tools["tool_errors"] == 1 and result.tools["code_rounds_executed"] == 1
    assert "The model refused the call: This model's maximum context length" in result.generation
    [call] = result.tools["tool_call_log"]
    assert (call["input_tokens"], call["output_tokens"], call["error"]) == (0, 0, True)
    assert call["cost"] == 0.0  # nothing ran: not even the price per call (the loop reads ToolResult.refused)


def test_a_shared_servers_context_overflow_is_a_refused_call_too(behind):
    """The shared model server's soft failure (``types.context_overflow``) has the openai server's shape."""
    expert = behind(Expert())
    expert.generate = lambda requests, sampling, on_results=None: [context_overflow(40, 16, 32) for _ in requests]
    result = session().call("1+1")
    assert (result.error, result.refused, result.input_tokens, result.output_tokens) == (True, True, 0, 0)
    assert result.output.startswith("The model refused the call: prompt of 40 tokens + max_new_tokens 16")
