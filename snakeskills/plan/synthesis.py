"""Problem synthesis (config key ``synthesis``): before round r a writer writes new problems from train problems,
which are filtered and decontaminated, answered by a solver and labelled by majority vote. Its plan object exists
only when synthesis is on; the core plan asks it about the synthesis splits' seeds and jobs."""

from __future__ import annotations

from typing import Protocol

from snakeskills.backends.specs import backend_spec, declared_job_gpus
from snakeskills.errors import SnakeskillsError
from snakeskills.plan.job_resources import sampling_job_resources, with_overrides
from snakeskills.plan.layout import Layout, synthesis_split, synthesis_split_part
from snakeskills.plan.sections import MULTICHOICE, benchmark_judge
from snakeskills.plan.teacher import TeacherPlan
from snakeskills.plan.values import check_model_name, check_regex
from snakeskills.prompts import resolve_prompt
from snakeskills.settings.generation import Generation, Sampling
from snakeskills.settings.jobs import LLMJudge, LLMJudgeJob
from snakeskills.training.methods import training_method, tuned_model_parts


def sft_round(round_number: int) -> str:
    """The SFT round whose training data synthesis round ``round_number`` adds to (sft-round<r>)."""
    return training_method("sft").tuned_model_name(round_number)


class RunPlan(Protocol):
    """What the synthesis plan asks of the run's plan (``plan.run.Plan``, which holds the synthesis plan)."""

    layout: Layout
    teacher: TeacherPlan | None

    def parent_model(self, model: str) -> str: ...

    def seeds(self, model: str, split: str) -> list[int]: ...

    def generated_files(self, model: str, benchmark: str, split: str) -> list[str]: ...


def check_synthesis(config: dict) -> None:
    """The synthesis section's cross-key checks: who writes and solves exists, an own writer is configured whole,
    the train benchmarks have open answers, the checker of contamination is set, no split takes a synthesis name."""
    synthesis = config["synthesis"]
    writer, solver = synthesis["writer"], synthesis["label"]["solver"]
    for key, who in (("synthesis.writer", writer), ("synthesis.label.solver", solver)):
        if who == "teacher" and config["teacher"] is None:
            raise SnakeskillsError(f"config key {key} is 'teacher' but no teacher is set (config key teacher)")
    if writer == "own":
        if synthesis["generation"] is None:
            raise SnakeskillsError(
                "config key synthesis.generation (backend, sampling) is required when synthesis.writer is own"
            )
        if synthesis["sampling"] is not None:
            raise SnakeskillsError(
                "config key synthesis.sampling replaces a teacher or student writer's sampling; an own writer "
                "samples with synthesis.generation.sampling"
            )
        name = synthesis["name"]
        check_model_name(name, "synthesis.name")
        taken = {config["model"]["name"]: "model.name"}
        if config["teacher"] is not None:
            taken[config["teacher"]["name"]] = "teacher.name"
        if name in taken:
            raise SnakeskillsError(
                f"config keys synthesis.name and {taken[name]} are both {name!r}: they would share results paths; "
                "rename one"
            )
        if solver == "writer" and synthesis["label"]["prompt"] is None:
            raise SnakeskillsError(
                "config key synthesis.label.prompt (how the writer is asked to solve) is required when "
                "synthesis.label.solver is writer and synthesis.writer is own"
            )
    check_regex(synthesis["filter"]["pattern"], "synthesis.filter.pattern")
    for benchmark in config["train_benchmarks"]:  # multiple-choice and code benchmarks are judged so (checked before)
        extraction = benchmark_judge(config, benchmark)["extraction"]
        kind = "multiple-choice" if extraction in MULTICHOICE else {"code": "a code benchmark"}.get(extraction)
        if kind is not None:
            raise SnakeskillsError(
                f"config key synthesis: train benchmark {benchmark!r} is {kind}, and synthesis writes "
                "open-answer problems labelled by majority vote; train on it without synthesis (synthesis: null), or "
                "leave it out of train_benchmarks"
            )
    checker = synthesis["decontamination"]["llm_check"]
    section = {"judge": "judge.llm", "teacher": "teacher"}.get(checker)
    if checker is not None and (config["judge"]["llm"] if checker == "judge" else config["teacher"]) is None:
        raise SnakeskillsError(
            f"config key synthesis.decontamination.llm_check is {checker!r}, which asks {section} whether a new "
            f"problem is an eval problem, but {section} is not set; set it, or llm_check: null"
        )
    for key in ("train_split", "eval_split"):
        if synthesis_split_part(config[key]) is not None:
            raise SnakeskillsError(f"config key {key}: split names synth-round<r>... are kept for synthesized data")


class SynthesisPlan:
    """Who writes and solves each round's new problems, with which seeds and settings, and which files each
    synthesis step reads and writes."""

    def __init__(self, config: dict, plan: RunPlan):
        self.section = config["synthesis"]
        self.config = config
        self.plan = plan
        self.layout = plan.layout
        # an own writer (synthesis.writer own) is a served model of its own name
        self.own_writer: str | None = self.section["name"] if self.section["writer"] == "own" else None
        self.rounds = list(range(1, config["rounds"] + 1))
        # (round, train benchmark) of every synthesis, in funnel order
        self.runs = [(r, b) for r in self.rounds for b in config["train_benchmarks"]]
        checker = self.section["decontamination"]["llm_check"]
        self.llm_check = checker is not None
        # a teacher or student writer's sampling while it writes (synthesis.sampling), None: its own
        sampling = self.section["sampling"]
        self.writing_sampling = None if sampling is None else Sampling.from_dict(sampling, "synthesis.sampling")
        # what the parse, filter and n-gram step writes: the problems the solver answers, or, with the LLM check,
        # the candidates that check reads
        self.filtered = self.layout.synthesis_candidates if self.llm_check else self.layout.synthesis_problems
        # the prepared splits new problems are checked against: every train benchmark's train split (copies) and
        # every benchmark's eval split (contamination)
        prepared = self.layout.prepared
        self.train_references = [
            prepared.format(benchmark=b, split=config["train_split"]) for b in config["train_benchmarks"]
        ]
        self.eval_references = [prepared.format(benchmark=b, split=config["eval_split"]) for b in config["benchmarks"]]

    # ---- who and how

    def writer(self, round_number: int) -> str:
        """Who writes round ``round_number``'s new problems: the own writer, the teacher, or the student before the
        round (synthesis.writer)."""
        writer = self.section["writer"]
        if writer == "own":
            return self.own_writer
        return self.plan.teacher.name if writer == "teacher" else self.plan.parent_model(sft_round(round_number))

    def solver(self, round_number: int) -> str:
        """Who answers round ``round_number``'s new problems (synthesis.label.solver)."""
        solver = self.section["label"]["solver"]
        if solver == "writer":
            return self.writer(round_number)
        return self.plan.teacher.name if solver == "teacher" else self.plan.parent_model(sft_round(round_number))

    def own_writer_section(self) -> dict:
        """How an own writer samples when it solves (model, generation, synthesis.label.prompt)."""
        section = self.section
        return {"model": section["model"], "generation": section["generation"], "prompt": section["label"]["prompt"]}

    def seeds(self, part: str) -> list[int]:
        """Seeds on a synthesis split: synthesis.sources.new_per_problem on a writer's sources, and
        synthesis.label.num_samples on new problems (and their labelled split, whose judged samples are the
        solver's)."""
        section, key = ("sources", "new_per_problem") if part == "sources" else ("label", "num_samples")
        return list(range(self.section[section][key]))

    def writing_generation(self, generation: Generation) -> Generation:
        """A teacher or student writer's generation section while it writes: synthesis.sampling in place of its
        sampling, when set."""
        return generation if self.writing_sampling is None else generation.replace(sampling=self.writing_sampling)

    def split_name(self, round_number: int) -> str:
        """Round ``round_number``'s labelled split, also the prefix of its new problems' ids."""
        return synthesis_split(round_number)

    def exact_answer(self, benchmark: str) -> str | None:
        """How a benchmark checks a synthesized problem's label itself: "arithmetic" for the synthetic skill (a
        parsed a+b has an exact answer), else ``None``."""
        return "arithmetic" if self.config["benchmarks"][benchmark]["source"] == "synthetic" else None

    # ---- which files each step reads

    def failure_feedback_models(self) -> list[str]:
        """Models whose judged train samples choose synthesis sources (synthesis.sources.problems failed): the
        model before each round."""
        if self.section["sources"]["problems"] != "failed":
            return []
        return [self.plan.parent_model(sft_round(round_number)) for round_number in self.rounds]

    def feedback_files(self, round_number: int, benchmark: str) -> list[str]:
        """The judged train samples that decide which problems round ``round_number``'s writer starts from: the
        previous model's (none for synthesis.sources.problems all)."""
        if self.section["sources"]["problems"] != "failed":
            return []
        model, split = self.plan.parent_model(sft_round(round_number)), self.config["train_split"]
        return [
            self.layout.judged.format(model=model, benchmark=benchmark, split=split, seed=seed)
            for seed in self.plan.seeds(model, split)
        ]

    def writer_files(self, round_number: int, benchmark: str) -> list[str]:
        """The writer's generated chunks of round ``round_number``, seed by seed (``num_chunks`` per seed)."""
        split = synthesis_split(round_number, "sources")
        return self.plan.generated_files(self.writer(round_number), benchmark, split)

    def solver_files(self, round_number: int, benchmark: str) -> list[str]:
        """The solver's generated chunks of round ``round_number``'s new problems, seed by seed."""
        split = synthesis_split(round_number, "problems")
        return self.plan.generated_files(self.solver(round_number), benchmark, split)

    def sft_rounds(self, model: str) -> list[int]:
        """The rounds whose synthesized problems feed ``model``'s SFT: its own (sft.rounds_data replace), or every
        round up to it (accumulate)."""
        round_number = tuned_model_parts(model)[1]
        return [round_number] if self.config["sft"]["rounds_data"] == "replace" else list(range(1, round_number + 1))

    def sft_judged_files(self, model: str) -> list[tuple[str, str]]:
        """(train benchmark, the solver's judged samples) of each synthesized split ``model``'s SFT learns from."""
        return [
            (benchmark, self.layout.synthesis_judged.format(round=round_number, benchmark=benchmark))
            for round_number in self.sft_rounds(model)
            for benchmark in self.config["train_benchmarks"]
        ]

    def stats_files(self) -> dict[str, list[str]]:
        """The filter (and LLM check) and label counts of every round and train benchmark, and each round's SFT
        stats: the funnel."""
        runs, layout = self.runs, self.layout
        checked = runs if self.llm_check else []
        return {
            "filter": [layout.synthesis_filter_stats.format(round=r, benchmark=b) for r, b in runs],
            "llm_check": [layout.synthesis_llm_check_stats.format(round=r, benchmark=b) for r, b in checked],
            "label": [layout.synthesis_label_stats.format(round=r, benchmark=b) for r, b in runs],
            "sft": [layout.sft_stats.format(model=sft_round(r)) for r in self.rounds],
        }

    def targets(self) -> list[str]:
        return [self.layout.synthesis_funnel, self.layout.synthesis_funnel_table]

    # ---- the LLM contamination check

    def contamination_checker(self) -> LLMJudge | None:
        """The model and generation section (judge.llm's or the teacher's) of the LLM contamination check; ``None``
        without it."""
        if not self.llm_check:
            return None
        key = "judge.llm" if self.section["decontamination"]["llm_check"] == "judge" else "teacher"
        section = self.config["judge"]["llm"] if key == "judge.llm" else self.config["teacher"]
        return LLMJudge.from_dict({"model": section["model"], "generation": section["generation"]}, key)

    def contamination_check_settings(self) -> dict:
        """What the contamination check job reads from its settings file: the checker and its resolved prompt."""
        prompt = self.section["decontamination"]["llm_prompt"]
        return LLMJudgeJob(llm=self.contamination_checker(), prompt=resolve_prompt(prompt)).to_dict()

    def contamination_check_gpus(self, gpus_available: bool, *, local_run: bool = False) -> int:
        """GPUs of the contamination check's job (``specs.declared_job_gpus``: none in a local run whose jobs share
        a model server)."""
        return declared_job_gpus(self.contamination_checker().generation, gpus_available, local_run=local_run)

    def contamination_check_resources(self) -> dict:
        checker = self.contamination_checker()
        estimate = sampling_job_resources(checker.model.to_dict(), checker.generation, self.config)
        return with_overrides("synthesis_llm_check", estimate, self.config)

    def contamination_check_env(self) -> str:
        return backend_spec(self.contamination_checker().generation).conda_env
