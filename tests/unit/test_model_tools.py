"""Models as priced tools in the tool loop (``snakeskills.tools.model_tool``, ``settings.tools.Price``,
``tools.loop``): a scripted student (its turns fixed by the transcript so far) calls the real calculator and an
expert model, and every call's price is counted. The expert here is a scripted backend put behind the tool's
``AskedModel`` (the seam the job's backend takes); the expert as a real model behind the real shared model server is
tested in tests/components/test_model_tool_server.py, and the whole loop in
tests/workflow/test_orchestrator_workflow.py."""

from __future__ import annotations

import threading
import time

import pytest
from conftest import default_section, model_tool_settings

from snakeskills.backends.types import GenerationRequest, GenerationResult, SamplingParams, truncate_at_stop
from snakeskills.errors import SnakeskillsError
from snakeskills.prompts import resolve_prompt
from snakeskills.settings.tools import Price, Tags, Tools
from snakeskills.tools.loop import ToolLoop, ToolUse, turn_seed
from snakeskills.tools.model_tool import ModelToolSettings, asked_model, call_seed
from snakeskills.tools.protocol import ToolCall, tools_output_spans, turn_call
from snakeskills.training.grpo import REWARD_TERMS, JudgeRewards, reward_weight, reward_weights

CALC = Tags("<calc>", "</calc>", "<out>", "</out>")
ASK = Tags("<ask>", "</ask>", "<ans>", "</ans>")
SAMPLING = SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=200)
CALC_PRICE = Price.filled({"per_call": 0.01})
EXPERT_PRICE = Price(per_call=1.0, per_input_token=0.001, per_output_token=0.01)


class ScriptedStudent:
    """Answers each request with the next turn of its row's script (by how many tool outputs its prompt holds), cut
    at the first stop string; one token per character."""

    takes = "text"
    batch_size = 8

    def __init__(self, scripts: dict[str, list[str]]):
        self.scripts = scripts
        self.calls: list[list[GenerationRequest]] = []

    def generate(self, requests, sampling, on_results=None):
        self.calls.append(list(requests))
        results = []
        for request in requests:
            question, _, transcript = request.prompt.partition("=")
            turn = transcript.count(CALC.code_output_end) + transcript.count(ASK.code_output_end)
            text, _ = truncate_at_stop(self.scripts[question][turn], sampling.stop)
            results.append(GenerationResult(generation=text, num_generated_tokens=len(text), finish_reason="stop"))
        return results


class ScriptedExpert:
    """An expert at sums: answers ``\\boxed{a+b}`` to the prompt ``a+b=`` and says how long the prompt was (one token
    per character; ``count_prompt`` False: a server that reports no usage). It records each batch it was sent."""

    takes = "text"
    tokenizer = None

    def __init__(self, count_prompt: bool = True):
        self.count_prompt = count_prompt
        self.batches: list[list[GenerationRequest]] = []
        self.lock = threading.Lock()
        self.hold_first_batch_for = None  # (the AskedModel, calls): the first batch waits until they queue

    def generate(self, requests, sampling, on_results=None):
        if self.hold_first_batch_for is not None and not self.batches:
            asked, waiting = self.hold_first_batch_for
            deadline = time.monotonic() + 30
            while len(asked._queue) < waiting and time.monotonic() < deadline:
                time.sleep(0.01)
        with self.lock:
            self.batches.append(list(requests))
        results = []
        for request in requests:
            a, b = request.prompt.removesuffix("=").split("+")
            answer = f"\\boxed{{{int(a) + int(b)}}}#{request.seed % 89}"
            tokens = len(request.prompt) if self.count_prompt else None
            results.append(GenerationResult(answer, len(answer), "stop", num_prompt_tokens=tokens))
        return results


EXPERT_PROMPT = resolve_prompt(
    default_section("prompt") | {"system": None, "user": "{problem}=", "chat_template": False}
)


def expert_settings(name: str = "expert") -> ModelToolSettings:
    generation = {"backend": "openai", "sampling": {"max_new_tokens": 200}, "share_model": {"threads": 1}}
    return model_tool_settings(name, EXPERT_PROMPT, generation, tags=ASK)


@pytest.fixture
def expert():
    """The scripted expert behind the tool's process-wide ``AskedModel``; removed after the test."""
    from snakeskills.tools import model_tool

    scripted = ScriptedExpert()
    asked = asked_model(expert_settings())
    asked.backend, asked.sampling = scripted, SAMPLING
    yield scripted
    model_tool._ASKED.clear()


def orchestrator(student, *, first_call=None, calc_price=CALC_PRICE, expert_price=EXPERT_PRICE, workers=4):
    settings = Tools.filled({"tool": "calculator", "sandbox": "none"}, "tools")
    use = ToolUse(
        settings=settings,
        tags=CALC,
        max_calls=4,
        workers=workers,
        price=calc_price,
        models=((expert_settings(), ASK, expert_price),),
        first_call=first_call,
    )
    return ToolLoop(student, use)


def request(question: str, seed: int = 1, forced_call: str | None = None) -> GenerationRequest:
    return GenerationRequest(seed=seed, prompt=f"{question}=", forced_call=forced_call)


def expert_cost(problem: str, seed: int, call: int) -> float:
    """The price of the expert's answer to ``problem``, counted from what it reads and writes."""
    answer = f"\\boxed{{{sum(int(x) for x in problem.split('+'))}}}#{call_seed(seed, 'expert', call) % 89}"
    return EXPERT_PRICE.cost(len(f"{problem}="), len(answer))


def test_every_call_is_priced_by_its_tool_and_the_sample_costs_their_sum(expert):
    scripts = {"q": ["<calc>2+3</calc>", "<ask>20+30</ask>", "<ask>1+1</ask>", "\\boxed{50}"]}
    [result] = orchestrator(ScriptedStudent(scripts)).generate([request("q", seed=7)], SAMPLING)
    log = result.tools["tool_call_log"]
    assert [call["tool"] for call in log] == ["calculator", "expert", "expert"]
    costs = [0.01, expert_cost("20+30", 7, 0), expert_cost("1+1", 7, 1)]
    assert [call["cost"] for call in log] == pytest.approx(costs)
    assert log[1]["input_tokens"] == len("20+30=") and log[1]["output_tokens"] == len(
        f"\\boxed{{50}}#{call_seed(7, 'expert', 0) % 89}"
    )
    # the sample's cost counts every call: leaving any one out changes it
    assert result.tools["cost"] == pytest.approx(sum(costs))
    for left_out in costs:
        assert result.tools["cost"] != pytest.approx(sum(costs) - left_out)
    assert result.tools["code_rounds_executed"] == 3


def test_each_call_goes_to_the_tool_its_tags_open_and_its_output_comes_back_in_that_tools_tags(expert):
    scripts = {"q": ["<calc>2+3</calc>", "so <ask>20+30</ask>", "\\boxed{50}"]}
    [result] = orchestrator(ScriptedStudent(scripts)).generate([request("q")], SAMPLING)
    answer = f"\\boxed{{50}}#{call_seed(1, 'expert', 0) % 89}"
    assert result.generation == f"<calc>2+3</calc><out>5</out>so <ask>20+30</ask><ans>{answer}</ans>\\boxed{{50}}"
    spans = result.tools["tool_output_spans"]
    assert [result.generation[a:b] for a, b in spans] == ["<out>5</out>", f"<ans>{answer}</ans>"]
    assert [list(span) for span in tools_output_spans(result.generation, [CALC, ASK])] == spans
    assert len(expert.batches) == 1 and expert.batches[0][0].prompt == "20+30="


def test_a_tools_tags_inside_another_tools_output_are_not_a_call(expert):
    # the expert's answer holds an unclosed <calc>: the student's next turn is read after that output
    text = "<ask>1+1</ask><ans>use <calc></ans>\\boxed{2}"
    assert turn_call(text[text.index("</ans>") + 6 :], {"calculator": CALC, "expert": ASK}) is None
    assert turn_call("a <calc>1+1", {"calculator": CALC, "expert": ASK}) == ToolCall("calculator", "1+1")
    assert turn_call("<calc>1</calc><out>1</out><ask>2+2", {"calculator": CALC, "expert": ASK}) == ToolCall(
        "expert", "2+2"
    )


def test_the_expert_answers_calls_that_wait_together_in_one_batch_and_each_by_its_own_seed(expert):
    scripts = {f"{n}": [f"<ask>{n}+{n}</ask>", f"\\boxed{{{2 * n}}}"] for n in range(12)}
    requests = [request(f"{n}", seed=100 + n) for n in range(12)]
    alone = []
    for single in requests:
        [result] = orchestrator(ScriptedStudent(scripts)).generate([single], SAMPLING)
        alone.append(result.generation)
    expert.batches.clear()
    # while the first call's batch is out, the other eleven queue: they go as the next batch
    expert.hold_first_batch_for = (asked_model(expert_settings()), 11)
    together = orchestrator(ScriptedStudent(scripts), workers=12).generate(requests, SAMPLING)
    assert [result.generation for result in together] == alone
    assert [len(batch) for batch in expert.batches] == [1, 11]
    assert sorted(r.seed for batch in expert.batches for r in batch) == sorted(
        call_seed(100 + n, "expert", 0) for n in range(12)
    )


def test_always_ask_calls_the_expert_with_the_problem_before_the_students_first_turn(expert):
    scripts = {"20+30": ["(no turn before the call)", "\\boxed{50}"]}
    student = ScriptedStudent(scripts)
    [result] = orchestrator(student, first_call="expert").generate(
        [request("20+30", seed=3, forced_call="20+30")], SAMPLING
    )
    answer = f"\\boxed{{50}}#{call_seed(3, 'expert', 0) % 89}"
    assert result.generation == f"<ask>20+30</ask><ans>{answer}</ans>\\boxed{{50}}"
    assert result.tools["cost"] == pytest.approx(expert_cost("20+30", 3, 0))
    # the student's first turn reads the expert's answer, under the seed of a turn after a call
    assert [call[0].seed for call in student.calls] == [turn_seed(3, 1)]
    assert result.num_generated_tokens == len("\\boxed{50}")  # the forced call is not the model's
    with pytest.raises(SnakeskillsError, match="first_call"):
        orchestrator(student, first_call="expert").generate([request("20+30")], SAMPLING)


def test_free_tools_give_no_cost_field_and_a_price_per_input_token_needs_the_count(expert):
    free = ToolUse(
        settings=Tools.filled({"tool": "calculator", "sandbox": "none"}, "tools"), tags=CALC, max_calls=2, workers=1
    )
    [result] = ToolLoop(ScriptedStudent({"q": ["<calc>1+1</calc>", "\\boxed{2}"]}), free).generate(
        [request("q")], SAMPLING
    )
    assert "cost" not in result.tools and result.tools["tool_call_log"][0]["cost"] == 0.0
    expert.count_prompt = False
    with pytest.raises(SnakeskillsError, match="per_input_token"):
        orchestrator(ScriptedStudent({"q": ["<ask>1+1</ask>", "x"]})).generate([request("q")], SAMPLING)
    # priced per call and per answer token only, the count is not needed
    [result] = orchestrator(
        ScriptedStudent({"q": ["<ask>1+1</ask>", "x"]}), expert_price=Price(2.0, 0.0, 0.5)
    ).generate([request("q")], SAMPLING)
    assert result.tools["cost"] == pytest.approx(2.0 + 0.5 * len(f"\\boxed{{2}}#{call_seed(1, 'expert', 0) % 89}"))


def test_a_price_section_names_its_key():
    assert Tools.filled({"tool": "calculator"}, "tools").program_price.free
    assert Price.filled({"per_call": 1}, "k") == Price(1.0, 0.0, 0.0)
    with pytest.raises(SnakeskillsError, match="tools.models.expert.price.per_output_token"):
        Price.filled({"per_output_token": -1}, "tools.models.expert.price")
    with pytest.raises(SnakeskillsError, match="tools.price.per_token"):
        Price.from_dict({"per_token": 1}, "tools.price")


def test_grpo_rewards_price_the_calls_and_weigh_each_tool_by_preference():
    rewards = JudgeRewards({}, {"parse_reasoning": False}, 40, 1, tool_preference={"calculator": 0.2, "expert": -0.5})
    functions = dict(zip(REWARD_TERMS, rewards.functions(), strict=True))
    logs = [
        [{"tool": "expert", "cost": 1.1}, {"tool": "calculator", "cost": 0.01}],
        [{"tool": "calculator", "cost": 0.01}],
        [],
    ]
    cost = functions["tool_cost"]([], ["a", "b", "c"], [], [], tool_cost=[1.11, 0.01, 0.0])
    assert cost == [1.11, 0.01, 0.0]
    preference = functions["tool_preference"]([], ["a", "b", "c"], [], [], tool_call_log=logs)
    assert preference == pytest.approx([-0.3, 0.2, 0.0])
    # without tools (no transcript fields) both are 0
    assert functions["tool_cost"]([], ["a"], [], []) == [0.0]
    assert functions["tool_preference"]([], ["a"], [], []) == [0.0]
    # a preference table is one term weighed 1 (its weights are inside); an empty one is no term
    config = {"correct": 1.0, "tool_cost": -0.3, "tool_preference": {"expert": -0.5}}
    assert reward_weight(config, "tool_preference") == 1.0 and reward_weight(config, "tool_cost") == -0.3
    assert reward_weights({"tool_preference": {}}, "tool_preference") == []


def test_always_ask_with_max_calls_0_makes_no_call(expert):
    """Item 9: the forced call counts against ``tools.max_calls``; with 0 it is beyond the limit and never runs."""
    import dataclasses

    student = ScriptedStudent({"20+30": ["\\boxed{50}"]})
    loop = orchestrator(student, first_call="expert")
    loop.use = dataclasses.replace(loop.use, max_calls=0)
    [result] = loop.generate([request("20+30", seed=3, forced_call="20+30")], SAMPLING)
    assert expert.batches == [] and student.calls == []
    assert result.tools["code_rounds_executed"] == 0 and result.tools["tool_call_over_limit"] is True
    assert result.tools["cost"] == 0
