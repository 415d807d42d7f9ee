"""Every name the workflow writes under its results folder: file patterns of wildcards, and the names of the
synthesized splits."""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from pathlib import Path

CHUNK = "{model}/{benchmark}/{split}/rs{seed}/chunk{chunk}-of-{num_chunks}.jsonl"

# round r's synthesis splits: the writer's sources, the new problems the solver answers, and the labelled split
SYNTHESIS_SPLIT = "synth-round{round}"
_SYNTHESIS_SPLIT = re.compile(r"^synth-round(\d+)(-sources|-problems|)$")
# the splits prepare_data makes: any but a synthesis split (rules/synthesis.smk makes those)
PREPARED_SPLIT = r"(?!synth-round\d)[A-Za-z0-9._-]+"


def synthesis_split(round_number: int, part: str = "") -> str:
    """The name of a synthesis split of round ``round_number``: part "sources", "problems" or "" (labelled)."""
    return SYNTHESIS_SPLIT.format(round=round_number) + (f"-{part}" if part else "")


def synthesis_split_part(split: str) -> str | None:
    """ "sources", "problems" or "" (the labelled split) for a synthesis split's name, ``None`` for any other."""
    match = _SYNTHESIS_SPLIT.match(split)
    return match.group(2).lstrip("-") if match else None


@dataclass(frozen=True)
class Layout:
    """Every file the workflow writes, as a pattern of wildcards; ``under(results)`` puts them in one results
    folder (the defaults here are relative to it)."""

    prepared: str = "data/{benchmark}/{split}.jsonl"
    # a full checkpoint: the built tiny base model or a round's full fine-tune (sft.method full)
    checkpoint: str = "models/{model}/checkpoint"
    adapter: str = "models/{model}/adapter"
    merged_model: str = "models/{model}/merged"
    # a training segment's trainer state (weights, optimizer, scheduler, RNG), which the next segment resumes
    trainer_state: str = "models/{model}/trainer-state"
    # which of a segmented round's checkpoints its output model is (<method>.select) and why
    selection: str = "models/{model}/selection.json"
    generation_settings: str = "settings/generate/{model}/{benchmark}/{split}.json"
    llm_judge_settings: str = "settings/llm_judge.json"
    generated: str = f"generate/{CHUNK}"
    judged_chunk: str = f"judge/{CHUNK}"
    llm_judged_chunk: str = f"judge-llm/{CHUNK}"
    judged: str = "judge/{model}/{benchmark}/{split}/output-rs{seed}.jsonl"
    metrics: str = "metrics/{model}/{benchmark}/{split}/metrics.json"
    metrics_table: str = "metrics/{model}/{benchmark}/{split}/metrics.txt"
    # each problem's correct samples: what a paired comparison of two models reads
    problem_scores: str = "metrics/{model}/{benchmark}/{split}/problems.jsonl"
    sft_data: str = "sft/{model}/data.jsonl"
    sft_stats: str = "sft/{model}/stats.json"
    sft_alpaca: str = "sft/{model}/alpaca.json"
    sft_dataset_info: str = "sft/{model}/dataset_info.json"
    # a dpo round's (correct, incorrect) pairs (TRL's conversational prompt / chosen / rejected), their counts, and
    # the same pairs for LLaMA-Factory (pairwise Alpaca with its dataset_info.json)
    preference_pairs: str = "dpo/{model}/pairs.jsonl"
    preference_stats: str = "dpo/{model}/stats.json"
    preference_pairwise: str = "dpo/{model}/pairwise.json"
    preference_dataset_info: str = "dpo/{model}/dataset_info.json"
    # a grpo round's train problems (pass-rate filtered) and their counts
    kto_samples: str = "kto/{model}/samples.jsonl"
    kto_stats: str = "kto/{model}/stats.json"
    rl_problems: str = "grpo/{model}/problems.jsonl"
    rl_stats: str = "grpo/{model}/stats.json"
    # problem synthesis, per round and train benchmark: the writer's sources, the parsed and filtered new problems,
    # the labelled split, and what was dropped and why
    synthesis_sources: str = f"data/{{benchmark}}/{SYNTHESIS_SPLIT}-sources.jsonl"
    synthesis_problems: str = f"data/{{benchmark}}/{SYNTHESIS_SPLIT}-problems.jsonl"
    # with synthesis.decontamination.llm_check: the problems the n-gram check kept, and the LLM judge's verdicts
    synthesis_candidates: str = "synthesis/round{round}/{benchmark}/candidates.jsonl"
    synthesis_llm_checked: str = "synthesis/round{round}/{benchmark}/llm-check.jsonl"
    synthesis_llm_check_stats: str = "synthesis/round{round}/{benchmark}/llm-check.json"
    contamination_check_settings: str = "settings/contamination_check.json"
    synthesized: str = f"data/{{benchmark}}/{SYNTHESIS_SPLIT}.jsonl"
    synthesis_dropped: str = "synthesis/round{round}/{benchmark}/dropped.jsonl"
    synthesis_filter_stats: str = "synthesis/round{round}/{benchmark}/filter.json"
    synthesis_judged: str = "synthesis/round{round}/{benchmark}/judged.jsonl"
    synthesis_label_stats: str = "synthesis/round{round}/{benchmark}/label.json"
    synthesis_funnel: str = "synthesis/funnel.json"
    synthesis_funnel_table: str = "synthesis/funnel.txt"
    summary: str = "eval/summary.json"
    summary_table: str = "eval/summary.txt"
    # the run's warnings, one line each (also the end of summary.txt), for the report
    warnings: str = "eval/warnings.json"
    flips: str = "eval/flips.tsv"
    plot: str = "report/{plot}.png"
    # a few judged eval samples of each model and benchmark, as a page of the report
    samples: str = "report/samples.html"
    # each job's log: logs/<rule>/<the job's output, wildcards and all>.log
    logs: str = "logs"

    def chunk_log(self, rule: str) -> str:
        """The log of a ``rule`` job that makes one chunk of a model's samples (generate, judge, llm_judge)."""
        return f"{self.logs}/{rule}/{CHUNK.removesuffix('.jsonl')}.log"

    @classmethod
    def under(cls, results: str | Path) -> Layout:
        return cls(**{field.name: str(Path(results) / field.default) for field in fields(cls)})
