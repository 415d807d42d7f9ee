"""Tool outputs are masked out of SFT's, DPO's and KTO's loss (``training.tool_masks``): the tokens of a transcript's
tool output blocks (text the generation loop appended, not the model) carry no loss weight, everywhere else the loss
is what it was.

The trainers' tests run a round of each method (real TRL trainers) on a tiny Llama without decoder layers, a bigram
model: each position's prediction reads its own token only, so two transcripts that differ only inside a tool output
block differ only in what the loss is taken on there. With the mask, their loss and every gradient are the same bit
for bit; without it they differ, and the batch's mask leaves out exactly the block's tokens."""

from __future__ import annotations

import pytest
from conftest import training_section

from snakeskills.errors import SnakeskillsError
from snakeskills.io import write_jsonl
from snakeskills.training import dpo, kto, sft
from snakeskills.training import trainer as trainer_module
from snakeskills.training.rounds import RoundRun
from snakeskills.training.tool_masks import completion_ids_and_mask, trained_spans

PROMPT = [{"role": "user", "content": "37*84="}]


def transcript(output: str, answer: str = "3108", call: str = "37*84") -> str:
    """A tool-integrated answer: a call, the output block the loop appended, the model's answer."""
    return f"<calc>{call}</calc><out>{output}</out>\\boxed{{{answer}}}"


def wrong(output: str) -> str:
    """A wrong answer whose output block lies elsewhere than ``transcript``'s: its call is shorter."""
    return transcript(output, answer="296", call="37*8")


def output_span(text: str) -> list[int]:
    """The output block of ``transcript`` (its tags included), as the loop records it."""
    return [text.index("<out>"), text.index("</out>") + len("</out>")]


def test_every_token_of_a_span_is_masked_and_only_those():
    from snakeskills.models.tiny_model import build_char_tokenizer

    tokenizer = build_char_tokenizer()
    text = transcript("3108")
    start, end = output_span(text)
    ids, mask = completion_ids_and_mask(tokenizer, text, [[start, end]])
    assert ids == tokenizer(text, add_special_tokens=False)["input_ids"]
    assert mask == [0 if start <= index < end else 1 for index in range(len(text))], "one token a character"
    assert completion_ids_and_mask(tokenizer, text, []) == (ids, [1] * len(ids))
    with pytest.raises(SnakeskillsError, match="ends past the text"):
        completion_ids_and_mask(tokenizer, text, [[start, len(text) + 1]])


def merging_tokenizer():
    """A BPE tokenizer built in memory whose merges join characters across the output block's edges: ``><`` (the
    call's ``</calc>`` and the block's ``<out>``) and ``>\\`` (the block's ``</out>`` and the answer), plus tokens of
    several characters inside and outside the block."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    merges = [(">", "<"), (">", "\\"), ("o", "u"), ("ou", "t"), ("3", "1"), ("0", "8"), ("b", "o")]
    vocabulary = {"</s>": 0}
    for character in sorted(set(transcript("3108") + "9")):
        vocabulary[character] = len(vocabulary)
    for left, right in merges:
        vocabulary[left + right] = len(vocabulary)
    bpe = Tokenizer(models.BPE(vocab=vocabulary, merges=merges))
    return PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="</s>")


def test_a_token_straddling_a_span_edge_is_masked():
    tokenizer = merging_tokenizer()
    text = transcript("3108")
    ids, mask = completion_ids_and_mask(tokenizer, text, [output_span(text)])
    assert ids == tokenizer(text, add_special_tokens=False)["input_ids"]
    tokens = tokenizer.convert_ids_to_tokens(ids)
    # "><" is the call's last character and the block's first, ">\" the block's last and the answer's first
    masked = ["><", "out", ">", "31", "08", "<", "/", "out", ">\\"]
    assert [token for token, bit in zip(tokens, mask, strict=True) if not bit] == masked
    first, after = tokens.index("><"), tokens.index(">\\") + 1
    assert mask == [1] * first + [0] * (after - first) + [1] * (len(tokens) - after)
    assert tokens[after:] == ["bo", "x", "e", "d", "{", "31", "08", "}"], "the answer's tokens are in the loss"


def test_a_reasoning_models_spans_mark_the_whole_transcript_it_trains_on():
    """With parse_reasoning the trained text is ``_full_generation``, the loop's whole transcript, which its spans
    mark; ``generation`` is only the answer after the thinking."""
    text = "<think>" + transcript("3108") + "</think>\\boxed{3108}"
    spans = [[text.index("<out>"), text.index("</out>") + len("</out>")]]
    row = {"generation": "\\boxed{3108}", "_full_generation": text, "tool_output_spans": spans}
    assert trained_spans(row, "row 1") == spans
    assert trained_spans({"generation": "\\boxed{3108}"}, "row 2") == []
    with pytest.raises(SnakeskillsError, match="row 3: tool_output_spans: the tool output span .* ends past"):
        trained_spans({"generation": "\\boxed{3108}", "tool_output_spans": spans}, "row 3")


class Scored(Exception):
    """Raised once the first batch is scored: the round stops there, before any step."""


def first_batch(monkeypatch, train) -> dict:
    """``train()`` (a round of a method) up to its first batch: the policy and its reference are made to differ (the
    reference's weights moved at random where the trainer keeps a copy of the starting model, else the policy's: a
    precomputed reference scored the starting model), so the reference's sums count in the loss; the batch is scored
    and back-propagated. Returns the batch, the loss, every parameter's gradient and the KL estimate (KTO)."""
    import torch

    scored = {}

    def score(trainer, resume_from, num_examples):
        model = trainer.model
        moved = getattr(trainer, "ref_model", None) or model
        generator = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for parameter in moved.parameters():
                parameter.add_(0.1 * torch.randn(parameter.shape, generator=generator))
        batch = next(iter(trainer.get_train_dataloader()))
        model.train()
        loss = trainer.compute_loss(model, batch)
        loss.backward()
        gradients = {name: parameter.grad.clone() for name, parameter in model.named_parameters()}
        scored.update(batch=batch, loss=loss.detach(), gradients=gradients, kl=trainer._metrics["train"].get("kl"))
        raise Scored

    monkeypatch.setattr(trainer_module, "run_trainer", score)
    with pytest.raises(Scored):
        train()
    return scored


def round_run(checkpoint, tmp_path, name: str, records: list[dict], batch_size: int) -> RoundRun:
    """A full fine-tune's round of ``records`` (the method's data file) on the bigram model."""
    folder = tmp_path / name
    folder.mkdir()
    write_jsonl(folder / "data.jsonl", records)
    return RoundRun(
        weights="full",
        base_model_path=str(checkpoint),
        data_path=str(folder / "data.jsonl"),
        output_dir=str(folder / "model"),
        lora=None,
        training=training_section(num_epochs=1, learning_rate=1e-3, batch_size=batch_size, max_length=64),
        chat_template=False,
        chat_template_kwargs={},
        seed=0,
        threads=1,
        dtype="auto",
        trust_remote_code=False,
    )


def unmasked(records: list[dict]) -> list[dict]:
    """The records without their tool output spans: the tools' tokens in the loss."""
    return [{key: value for key, value in record.items() if "tool_output_spans" not in key} for record in records]


def assert_same(first: dict, second: dict) -> None:
    import torch

    assert torch.equal(first["loss"], second["loss"]), (first["loss"], second["loss"])
    assert first["gradients"].keys() == second["gradients"].keys()
    for name, gradient in first["gradients"].items():
        assert torch.equal(gradient, second["gradients"][name]), name


def gradients_differ(first: dict, second: dict) -> bool:
    import torch

    return any(not torch.equal(gradient, second["gradients"][name]) for name, gradient in first["gradients"].items())


def left_out(masked_row, unmasked_row, text: str) -> None:
    """The positions the mask took out of a batch row's completion (1 in ``unmasked_row``, 0 in ``masked_row``) are
    exactly the output block's characters, one token each; the rest of the answer and its EOS stay in."""
    completion = unmasked_row.tolist()
    prompt_length = completion.index(1)
    assert sum(completion) == len(text) + 1, "the answer's characters and its EOS"
    start, end = output_span(text)
    removed = (unmasked_row - masked_row).nonzero().flatten().tolist()
    assert removed == list(range(prompt_length + start, prompt_length + end))


def sft_records(outputs: tuple[str, ...]) -> list[dict]:
    records = []
    for index, output in enumerate(outputs):
        text = transcript(output)
        messages = [*PROMPT, {"role": "assistant", "content": text}]
        records.append({"id": f"p{index}", "messages": messages, "tool_output_spans": [output_span(text)]})
    return records


def test_sft_trains_on_none_of_a_tools_output(bigram_checkpoint, tmp_path, monkeypatch):
    def scored(name, records):
        run = round_run(bigram_checkpoint, tmp_path, name, records, batch_size=2)
        return first_batch(monkeypatch, lambda: sft.train(run))

    real, other = sft_records(("3108", "3108")), sft_records(("9999", "1234"))
    masked = scored("real", real)
    assert_same(masked, scored("other", other))
    plain = scored("real-unmasked", unmasked(real))
    plain_other = scored("other-unmasked", unmasked(other))
    assert not plain["loss"].equal(plain_other["loss"]) and gradients_differ(plain, plain_other)
    labels, plain_labels = masked["batch"]["labels"], plain["batch"]["labels"]
    for row in range(2):
        left_out((labels[row] != -100).long(), (plain_labels[row] != -100).long(), transcript("3108"))


def pair(chosen_output: str, rejected_output: str) -> dict:
    chosen, rejected = transcript(chosen_output), wrong(rejected_output)
    return {
        "id": "p0",
        "prompt": PROMPT,
        "chosen": [{"role": "assistant", "content": chosen}],
        "rejected": [{"role": "assistant", "content": rejected}],
        "chosen_tool_output_spans": [output_span(chosen)],
        "rejected_tool_output_spans": [output_span(rejected)],
    }


@pytest.mark.parametrize("precompute", [True, False], ids=["precomputed-reference", "per-step-reference"])
def test_dpo_trains_on_none_of_a_tools_output(bigram_checkpoint, tmp_path, monkeypatch, precompute):
    """The policy's, the reference's (precomputed or in the step) and RPO's NLL term (nll_weight) all leave the
    tools' tokens out."""

    def scored(name, records):
        run = round_run(bigram_checkpoint, tmp_path, name, records, batch_size=1)
        options = {"beta": 0.1, "loss": "sigmoid", "nll_weight": 1.0, "precompute_reference": precompute}
        return first_batch(monkeypatch, lambda: dpo.train(run, **options))

    real, other = [pair("3108", "296")], [pair("9999", "111")]
    masked = scored("real", real)
    assert_same(masked, scored("other", other))
    plain = scored("real-unmasked", unmasked(real))
    plain_other = scored("other-unmasked", unmasked(other))
    assert not plain["loss"].equal(plain_other["loss"]) and gradients_differ(plain, plain_other)
    mask, plain_mask = masked["batch"]["completion_mask"], plain["batch"]["completion_mask"]
    left_out(mask[0], plain_mask[0], transcript("3108"))  # the chosen answer
    left_out(mask[1], plain_mask[1], wrong("296"))  # the rejected one


def kto_samples(right_output: str, wrong_output: str) -> list[dict]:
    samples = []
    for index, (text, label) in enumerate([(transcript(right_output), True), (wrong(wrong_output), False)]):
        completion = [{"role": "assistant", "content": text}]
        sample = {"id": f"p{index}", "prompt": PROMPT, "completion": completion, "label": label}
        samples.append(sample | {"tool_output_spans": [output_span(text)]})
    return samples


def test_kto_trains_on_none_of_a_tools_output(bigram_checkpoint, tmp_path, monkeypatch):
    """The policy's, the reference's and the KL estimate's (each completion scored after another's prompt) sums
    leave the tools' tokens out."""

    def scored(name, records):
        run = round_run(bigram_checkpoint, tmp_path, name, records, batch_size=2)
        options = {"beta": 0.1, "loss": "kto", "desirable_weight": None, "undesirable_weight": None}
        return first_batch(monkeypatch, lambda: kto.train(run, **options))

    real, other = kto_samples("3108", "296"), kto_samples("9999", "111")
    masked = scored("real", real)
    assert masked["kl"][0] > 0, "the KL estimate is in the loss (TRL clamps it at 0)"
    assert_same(masked, scored("other", other))
    plain = scored("real-unmasked", unmasked(real))
    plain_other = scored("other-unmasked", unmasked(other))
    assert not plain["loss"].equal(plain_other["loss"]) and gradients_differ(plain, plain_other)
    batch, plain_batch = masked["batch"], plain["batch"]
    texts = {len(text): text for text in (transcript("3108"), wrong("296"))}  # which answer a row holds
    for key in ("completion_mask", "KL_completion_mask"):  # a row's KL completion is another row's answer
        for row in range(2):
            text = texts[int(plain_batch[key][row].sum()) - 1]
            left_out(batch[key][row], plain_batch[key][row], text)


def test_answers_without_tool_output_tokenize_as_before(bigram_checkpoint, tmp_path):
    """Rows of answers without spans are what they were before tools (no loss mask column: the same datasets, the
    same checkpoints' fingerprints); in a dataset where some answer has spans, every row has the mask columns (all
    ones where no tool wrote), as a dataset's columns must be the same in every row."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(bigram_checkpoint)
    run = round_run(bigram_checkpoint, tmp_path, "rows", [], batch_size=1)

    def answer_ids(text):
        return tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]

    plain = unmasked([pair("3108", "296")])
    (row,) = dpo.tokenize_pairs(plain, tokenizer, run)
    prompt_ids = row["prompt_ids"]
    assert row == {
        "prompt_ids": prompt_ids,
        "chosen_ids": answer_ids(transcript("3108")),
        "rejected_ids": answer_ids(wrong("296")),
    }
    first, second = dpo.tokenize_pairs(plain + [pair("3108", "296")], tokenizer, run)
    assert first.keys() == second.keys() == {*row, "chosen_loss_mask", "rejected_loss_mask"}
    assert first["chosen_loss_mask"] == [1] * len(first["chosen_ids"])
    assert second["chosen_loss_mask"].count(0) == len("<out>3108</out>") and second["chosen_loss_mask"][-1] == 1

    (sample,) = kto.tokenize_samples(unmasked(kto_samples("3108", "296"))[:1], tokenizer, run)
    assert sample == {"prompt_ids": prompt_ids, "completion_ids": answer_ids(transcript("3108")), "label": True}

    (example,) = [
        sft.to_prompt_completion(record, chat_template=False, chat_template_kwargs={}, tokenizer=tokenizer)
        for record in unmasked(sft_records(("3108",)))
    ]
    assert example == {"prompt_ids": prompt_ids, "completion": transcript("3108")}
    dataset = sft.tokenize_prompt_completion(tokenizer, [example], max_length=64)
    assert dataset.column_names == ["input_ids", "completion_mask"]
    assert dataset[0]["completion_mask"] == [0] * len(prompt_ids) + [1] * len(answer_ids(transcript("3108")))
