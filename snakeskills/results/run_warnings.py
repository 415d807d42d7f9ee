"""Warnings where a run is weak: one line each, in the job's log and gathered at the end of the eval comparison.
Each names what fell short, the threshold (config key ``warnings``), the cause and the config key that changes it
(tests/unit/test_run_warnings.py follows each advice and checks that the warning goes, and that every key a
warning names is in config/schema.yaml).

What is checked:
- a round trained on too few records (SFT examples, DPO pairs, KTO samples) or problems: more data; or in too few
  optimizer steps: raise ``<method>.training.max_steps`` where it stopped the training, else ``num_epochs``;
- a model whose samples on a benchmark hit ``max_new_tokens`` (truncated) or give no answer too often;
- a built tiny model whose bootstrap missed its target (``tiny_bootstrap.bootstrap_miss`` words that one).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from snakeskills.judging.extraction_routes import ROUTES, is_fallback
from snakeskills.results.method_wording import MORE_DATA
from snakeskills.results.metrics import headline_modes
from snakeskills.training.methods import TrainingMethod, training_method

WARNING = "warning: "


def batches_per_pass(method: str, records: int, section: dict) -> int:
    """The optimizer steps one pass over a round's ``records`` makes: batches of ``training.batch_size`` records, the
    last one partial; for a method whose record makes several batch units (GRPO: a problem's grpo.num_generations
    completions), whole batches only (TRL's sampler drops a partial one)."""
    entry, batch = training_method(method), section["training"]["batch_size"]
    if entry.batch_units_key is None:
        return math.ceil(records / batch)
    return records * section[entry.batch_units_key] // batch


def planned_steps(method: str, records: int, section: dict) -> int:
    """The optimizer steps ``<method>.training.num_epochs`` passes over a round's ``records`` make (what its trainer
    takes without ``max_steps``), rounded up. Packing (sft.training.packing) makes fewer."""
    return math.ceil(section["training"]["num_epochs"] * batches_per_pass(method, records, section))


def trained_steps(method: str, records: int, section: dict) -> int:
    """The optimizer steps a round's trainer takes: ``<method>.training.max_steps`` where set (it overrides
    num_epochs: the trainer passes over the data as often as that takes), else ``planned_steps``."""
    max_steps = section["training"].get("max_steps")
    return planned_steps(method, records, section) if max_steps is None else max_steps


def sft_warnings(model: str, stats: dict, training: dict, thresholds: dict) -> list[str]:
    """An SFT round's warning from its data, before it trains (the sft_data job) and in the comparison: the steps
    are those its examples make (``trained_steps``). ``stats``: the round's stats.json (kept, problems_covered,
    judged); ``training``: sft.training."""
    records = stats[training_method("sft").records.stat]
    steps = trained_steps("sft", records, {"training": training})
    detail = f" ({stats['judged']} samples judged)"
    return round_warnings(
        model, "sft", records, stats["problems_covered"], steps, {"training": training}, thresholds, detail
    )


def training_warnings(model: str, cost: dict, section: dict, thresholds: dict, stats: dict | None = None) -> list[str]:
    """A trained round's warning from its cost (``method_comparison.training_cost``: its records, problems and the
    steps its trainer took); ``section``: its method's config section (``dpo``, ``kto``, ``grpo``). The records are
    its data's (``stats``: its data rule's stats.json), not the share of them a fraction of an epoch drew (the cost
    column), so that a short round is told to train longer, not to find more data."""
    entry = training_method(cost["method"])
    if entry.records and stats is not None:
        records = stats[entry.records.stat]
    else:
        records = cost[entry.records.column] if entry.records else cost["train_problems"]
    return round_warnings(
        model, cost["method"], records, cost["train_problems"], cost["optimizer_steps"], section, thresholds
    )


def round_warnings(
    model: str,
    method: str,
    records: int,
    problems: int,
    steps: int,
    section: dict,
    thresholds: dict,
    detail: str = "",
) -> list[str]:
    """One line for a round short of records, problems or optimizer steps, each shortfall with its threshold, the
    cause and the advice that removes it; nothing when none falls short."""
    entry = training_method(method)
    short = []  # what falls short, each with its threshold
    if entry.records and records < thresholds["min_sft_examples"]:
        short.append(f"{entry.records.unit} (warnings.min_sft_examples {thresholds['min_sft_examples']})")
    if problems < thresholds["min_sft_problems"]:
        short.append(f"problems (warnings.min_sft_problems {thresholds['min_sft_problems']})")
    more = MORE_DATA[entry.name]
    parts = [f"too few {' and '.join(short)}: {more} (its stats.json counts what was left out)"] if short else []
    if steps < thresholds["min_optimizer_steps"]:
        wanted = thresholds["min_optimizer_steps"]
        advice = steps_advice(entry, records, steps, section, wanted)
        parts.append(
            f"{'Too' if parts else 'too'} few optimizer steps (warnings.min_optimizer_steps {wanted}): {advice}"
        )
    if not parts:
        return []
    data = f"{records} {entry.records.unit} of {problems} problems" if entry.records else f"{problems} problems"
    return [f"{WARNING}{model} trains on {data}{detail} in {steps} optimizer steps: " + ". ".join(parts)]


def steps_advice(entry: TrainingMethod, records: int, steps: int, section: dict, wanted: int) -> str:
    """Why a round took only ``steps`` optimizer steps and what gives it ``wanted``: ``training.max_steps`` where it
    ended the training, else the epochs over the data and their batches (``planned_steps``)."""
    name, training = entry.name, section["training"]
    unit = entry.records.unit if entry.records else "problems"
    over_data = f"num_epochs {training['num_epochs']:g} over the {records} {unit}"
    max_steps = training.get("max_steps")
    if max_steps is not None and steps == max_steps:
        planned = planned_steps(name, records, section)
        cause = f"{name}.training.max_steps {max_steps} ended the training"
        if planned >= wanted:
            return f"{cause} ({over_data} would make {planned}): raise it to {wanted}, or set it to null"
        return f"{cause} (null would make only {planned}: {over_data}): raise it to {wanted}"
    batch = f"{training['batch_size']}"
    if entry.batch_units_key is None:
        batches = f"in batches of {batch} ({name}.training.batch_size)"
    else:
        units = section[entry.batch_units_key]
        batches = (
            f"{units} completions each ({name}.{entry.batch_units_key}), in whole batches of {batch} completions "
            f"({name}.training.batch_size)"
        )
    per_pass, lower = batches_per_pass(name, records, section), ""
    if per_pass == 0:  # one pass does not fill a batch: a batch of all of it makes one step a pass
        per_pass, lower = 1, f"lower {name}.training.batch_size to {records * section[entry.batch_units_key]} and "
    epochs = math.ceil(wanted / per_pass)
    return f"{over_data}, {batches}, make {steps}: {lower}raise {name}.training.num_epochs to {epochs}"


def metrics_warnings(
    model: str, benchmark: str, split: str, metrics: dict, thresholds: dict, *, teacher: bool = False
) -> list[str]:
    """``metrics``: one benchmark's ``{eval_mode: {metric: value}}`` from metrics.json; ``teacher``: the model is
    the teacher, asked and sampled by the teacher section's keys (teacher.prompt, teacher.generation)."""
    max_new_tokens = f"{'teacher.' if teacher else ''}generation.sampling.max_new_tokens"
    prompt = "teacher.prompt" if teacher else "prompt"
    values = metrics[headline_modes(metrics)[0]]
    where = f"{model} on {benchmark} ({split})"
    lines = []
    truncated = values.get("truncated")
    if truncated is not None and truncated > thresholds["max_truncated_share"]:
        lines.append(
            f"{WARNING}{where}: {truncated:.1f}% of samples hit max_new_tokens (warnings.max_truncated_share "
            f"{thresholds['max_truncated_share']}%): raise {max_new_tokens}, or the model does not stop (the judged "
            "files show its texts)"
        )
    no_answer = values.get("no_answer")
    if no_answer is not None and no_answer > thresholds["max_no_answer_share"]:
        # a text cut at max_new_tokens mostly ends before its answer: then that is the first thing to change
        cut = f"the samples cut at {max_new_tokens} (above) count here too; " if lines else ""
        lines.append(
            f"{WARNING}{where}: {no_answer:.1f}% of samples give no answer the judge can read "
            f"(warnings.max_no_answer_share {thresholds['max_no_answer_share']}%): {cut}the judged files show what "
            f"the model wrote; ask for the answer in the form judge.extraction reads ({prompt}.user, "
            f"{prompt}.template), or read the model's form: judge.extraction regex with a judge.regex matching its "
            f"answer line (benchmarks.{benchmark}.judge for this benchmark alone)"
        )
    return lines


def format_warnings(lines: list[str]) -> str:
    """The comparison's closing section: every warning, or nothing."""
    if not lines:
        return ""
    return f"\nwarnings ({len(lines)}):\n" + "".join(f"  {line.removeprefix(WARNING)}\n" for line in lines)


# ---- answers credited by a fallback extraction (judging/extraction_routes)

DOCS = "docs/benchmarks.md, Judging"


def setting_keys(own_judge: Mapping, benchmark: str | None) -> dict[str, str]:
    """The config keys of a benchmark's ``regex`` and ``extraction`` judge settings: its own
    ``benchmarks.<name>.judge.<setting>`` where ``own_judge`` (its ``judge`` section) gives one, else
    ``judge.<setting>``; for data of several benchmarks (``benchmark`` None), both."""
    keys = {}
    for setting in ("regex", "extraction"):
        if benchmark is None:
            keys[setting] = f"judge.{setting} (or benchmarks.<name>.judge.{setting})"
        else:
            keys[setting] = f"benchmarks.{benchmark}.judge.{setting}" if setting in own_judge else f"judge.{setting}"
    return keys


def _fallback_parts(counts: Mapping[str, int], keys: Mapping[str, str]) -> tuple[int, str, str]:
    """(how many the fallback routes credited, how many each one, what to do instead), for a warning."""
    fallbacks = [route for route in ROUTES if is_fallback(route) and counts.get(route)]
    parts = "; ".join(
        f"{counts[route]} by {route} ({ROUTES[route].meaning}, set by {keys[ROUTES[route].setting]})"
        for route in fallbacks
    )
    fixes = "; or ".join(dict.fromkeys(ROUTES[route].instead.format(**keys) for route in fallbacks))
    return sum(counts[route] for route in fallbacks), parts, fixes


# why a fallback is unsafe, in a warning
_RISK = (
    "A fallback reads the answer from text the prompt did not ask for, and credits wrong statements that mention the "
    "right answer ('221 is larger than 427' read as 427)"
)


def metrics_fallback_warnings(
    model: str, benchmark: str, split: str, summary: dict | None, thresholds: Mapping, own_judge: Mapping
) -> list[str]:
    """The warning when more of a model's correct verdicts on a benchmark than ``warnings.max_fallback_share``
    (percent) rest on a fallback route. ``summary``: the benchmark's ``"<benchmark>/extraction_routes"`` from
    metrics.json (None for older results without routes: no warning); ``own_judge``: the
    benchmark's own judge section (``benchmarks.<name>.judge``), which says which config key to name."""
    if summary is None:
        return []
    share, limit = summary["correct_by_fallback"], thresholds["max_fallback_share"]
    if share <= limit:
        return []
    routes = summary["routes"]
    correct = sum(counts["correct"] for counts in routes.values())
    credited = {route: counts["correct"] for route, counts in routes.items()}
    by_fallback, parts, fixes = _fallback_parts(credited, setting_keys(own_judge, benchmark))
    return [
        f"{WARNING}{model} on {benchmark} ({split}): {share:.1f}% of the correct verdicts ({by_fallback} of {correct}) "
        f"rest on a fallback extraction (warnings.max_fallback_share {limit:g}%): {parts}. {_RISK}: "
        f"{fixes} ({DOCS})"
    ]


def training_data_fallback_warnings(model: str, method: str, stats: Mapping, thresholds: Mapping) -> list[str]:
    """The warning when more of a round's credited examples (``credited_counts`` in its stats.json) than
    ``warnings.max_fallback_share`` (percent) rest on a fallback route: the round learns what the fallback
    credited. A stats.json written before these counts gives none."""
    credited, by_fallback = stats.get("credited"), stats.get("fallback_credited")
    if not credited or by_fallback is None:
        return []
    share, limit = 100.0 * by_fallback / credited, thresholds["max_fallback_share"]
    if share <= limit:
        return []
    _, parts, fixes = _fallback_parts(stats["fallback_credited_by_route"], setting_keys({}, None))
    return [
        f"{WARNING}{model}: {by_fallback} of {credited} {training_method(method).credited} ({share:.1f}%) were "
        f"credited by a fallback extraction (warnings.max_fallback_share {limit:g}%): {parts}. {_RISK}, and the round "
        f"learns them: {fixes} ({DOCS})"
    ]


def online_reward_warnings(model: str, method: str, log_history: list, thresholds: Mapping) -> list[str]:
    """For a method rewarded online by the judge: the fallback warning of the rewards its trainer logged
    (``training_data_fallback_warnings`` on the credited counts of its ``log_history``); none for the others."""
    from snakeskills.training.grpo_rewards import credited_counts_of

    if not training_method(method).judges_rewards:
        return []
    return training_data_fallback_warnings(model, method, credited_counts_of(log_history or []), thresholds)
