"""KTO's data and plan-time rules: every judged sample becomes desirable (judged correct) or undesirable, repeats and
cut-off correct samples are left out, the loss weights balance the two sides, and the section's mistakes stop the
plan naming the key."""

from __future__ import annotations

import copy

import pytest
from conftest import checked_config, resolved_prompt

from snakeskills.errors import SnakeskillsError
from snakeskills.io import read_json, read_jsonl, write_jsonl
from snakeskills.training.kto import balanced_weights
from snakeskills.training.kto_samples import select_kto_samples, write_kto_samples

PROMPT = resolved_prompt(user="{problem}=")
SAMPLES = {"score": "symbolic_correct", "max_per_problem": None, "include_truncated": True}
EVERY_PROBLEM = {"min": 0.0, "max": 1.0}


def sample(id_: str, generation: str, correct: bool, finish: str = "stop") -> dict:
    problem = {"a": "1+1", "b": "2+2", "c": "3+3"}[id_]
    return {
        "id": id_,
        "problem": problem,
        "expected_answer": str(2 * int(problem[0])),
        "generation": generation,
        "predicted_answer": None,
        "symbolic_correct": correct,
        "finish_reason": finish,
        "num_generated_tokens": 4,
    }


@pytest.fixture
def judged_files(tmp_path):
    seed0 = [
        sample("a", "\\boxed{2}", True),
        sample("b", "\\boxed{5}", False),
        sample("c", "\\boxed{7}", False),
    ]
    seed1 = [
        sample("a", "\\boxed{2}", True),  # a repeat of seed 0's text
        sample("b", "\\boxed{4}", True),
        sample("c", "\\boxed{6", True, finish="length"),  # cut off: never desirable
    ]
    seed2 = [
        sample("a", "\\boxed{3}", False),
        sample("b", "\\boxed{4", False, finish="length"),  # cut off and wrong: undesirable when include_truncated
        sample("c", "\\boxed{9}", False),
    ]
    paths = []
    for index, rows in enumerate([seed0, seed1, seed2]):
        path = tmp_path / f"seed{index}.jsonl"
        write_jsonl(path, rows)
        paths.append(path)
    return paths


def select(paths, samples=SAMPLES, pass_rate=EVERY_PROBLEM):
    return select_kto_samples(paths, ["sums"] * len(paths), [PROMPT] * len(paths), samples, pass_rate)


def test_every_judged_sample_is_desirable_or_undesirable(judged_files):
    records, counts = select(judged_files)
    labels = [(record["id"], record["completion"][0]["content"], record["label"]) for record in records]
    assert labels == [
        ("a", "\\boxed{2}", True),
        ("a", "\\boxed{3}", False),
        ("b", "\\boxed{5}", False),
        ("b", "\\boxed{4}", True),
        ("b", "\\boxed{4", False),
        ("c", "\\boxed{7}", False),
        ("c", "\\boxed{9}", False),
    ]
    assert counts["duplicate"] == 1 and counts["truncated"] == 1
    assert (counts["desirable"], counts["undesirable"], counts["samples"]) == (2, 5, 7)
    assert counts["problems_kept"] == 3 and counts["judged"] == 9
    first = records[0]
    assert first["prompt"] == [{"role": "user", "content": "1+1="}] and first["benchmark"] == "sums"
    assert first["expected_answer"] == "2"


def test_pass_rate_cap_and_truncated_rejections_narrow_the_samples(judged_files):
    # a is solved by 2 of its 3 samples (a repeat counts as a sample, as for every method), b and c by 1 of 3
    records, counts = select(judged_files, pass_rate={"min": 0.5, "max": 1.0})
    assert {record["id"] for record in records} == {"a"}
    assert counts["problems_in_pass_rate"] == 1 and counts["problems_below_pass_rate"] == 2
    capped, counts = select(judged_files, samples={**SAMPLES, "max_per_problem": 1, "include_truncated": False})
    assert [(record["id"], record["label"]) for record in capped] == [("a", True), ("b", False), ("c", False)]
    assert counts["over_per_problem_cap"] == 3 and counts["truncated"] == 2


def test_samples_of_one_kind_only_are_a_clear_error(tmp_path, judged_files):
    output, stats = tmp_path / "samples.jsonl", tmp_path / "stats.json"
    counts = write_kto_samples(judged_files, ["sums"] * 3, [PROMPT] * 3, SAMPLES, EVERY_PROBLEM, output, stats)
    assert len(read_jsonl(output)) == counts["samples"] == read_json(stats)["samples"]
    wrong = tmp_path / "wrong.jsonl"
    write_jsonl(wrong, [sample("b", "\\boxed{5}", False), sample("c", "\\boxed{7}", False)])
    with pytest.raises(SnakeskillsError, match=r"no desirable \(judged correct\) KTO samples.*kto\.pass_rate"):
        write_kto_samples([wrong], ["sums"], [PROMPT], SAMPLES, EVERY_PROBLEM, output, stats)
    cut_off = tmp_path / "cut-off.jsonl"
    write_jsonl(cut_off, [sample("a", "\\boxed{2", True, finish="length"), sample("b", "\\boxed{5}", False)])
    with pytest.raises(SnakeskillsError, match=r"no desirable .* 1 samples were left out because they were cut off"):
        write_kto_samples([cut_off], ["sums"], [PROMPT], SAMPLES, EVERY_PROBLEM, output, stats)


@pytest.mark.parametrize(
    ("counts", "given", "weights"),
    [
        ((2, 6), (None, None), (3.0, 1.0)),
        ((6, 2), (None, None), (1.0, 3.0)),
        ((4, 4), (None, None), (1.0, 1.0)),
        ((2, 6), (None, 0.5), (1.5, 0.5)),
        ((2, 6), (2.0, None), (2.0, 2 / 3)),
        ((2, 6), (1.0, 1.0), (1.0, 1.0)),
    ],
)
def test_null_weights_balance_desirable_and_undesirable(counts, given, weights):
    desirable, undesirable = balanced_weights(*counts, *given)
    assert (desirable, undesirable) == pytest.approx(weights)
    if None in given:  # the weighted totals are equal, inside the KTO paper's [1, 4/3]
        assert desirable * counts[0] == pytest.approx(undesirable * counts[1])


def kto_config(**section) -> dict:
    import yaml
    from conftest import REPO

    config = yaml.safe_load((REPO / "config/examples/tiny-arithmetic-sft-dpo-kto-grpo.yaml").read_text())
    config["kto"] = {**config["kto"], **section}
    return config


def test_the_example_lists_kto_and_its_rounds_are_named_for_it():
    from snakeskills.plan.layout import Layout
    from snakeskills.plan.run import Plan

    config = checked_config(kto_config())
    plan = Plan(config, Layout.under("results/x"))
    assert "kto-round1" in plan.tuned_models and plan.parent_model("kto-round1") == "base"
    assert plan.training_data_stats("kto-round1") == "results/x/kto/kto-round1/stats.json"
    assert ("kto-round1", "sft-round1") in plan.method_comparisons()


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda config: config["kto"]["training"].update(packing=True),
            "config key kto.training.packing: KTO samples are not packed",
        ),
        (
            lambda config: config["kto"]["training"].update(batch_size=1),
            "config key kto.training.batch_size (1): each forward pass takes 1 sample(s)",
        ),
        (lambda config: config.update(methods=["sft", "dpo", "grpo"]), "the config has a kto section, but"),
        (lambda config: config.update(kto=None), "config key methods lists 'kto', but the config has no kto"),
        (
            lambda config: config["kto"].update(loss="sigmoid"),
            "config key kto.loss: 'sigmoid' is not one of 'kto', 'apo_zero_unpaired'",
        ),
    ],
)
def test_kto_mistakes_stop_the_plan(mutate, message):
    config = copy.deepcopy(kto_config())
    mutate(config)
    with pytest.raises(SnakeskillsError) as error:
        checked_config(config)
    assert message in str(error.value)


def test_a_sample_keeps_the_spans_of_its_tool_outputs(tmp_path):
    """A completion that called a tool keeps its tool outputs' spans (which the trainer masks out of the loss); one
    that called none adds no key, as before tools."""
    called = "<calc>1+1</calc><out>2</out>\\boxed{2}"
    spans = [[called.index("<out>"), called.index("\\boxed")]]
    path = tmp_path / "seed0.jsonl"
    write_jsonl(path, [{**sample("a", called, True), "tool_output_spans": spans}, sample("a", "\\boxed{3}", False)])
    with_tool, without = select([path])[0]
    assert with_tool["completion"][0]["content"] == called and with_tool["tool_output_spans"] == spans
    assert "tool_output_spans" not in without
