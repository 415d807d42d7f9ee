"""The plan of one run: which models exist, which samples feed each round's training, how many seeds each model
draws on each split, what each generate job runs with, and which files each step reads. Each optional feature has
a plan object of its own, ``None`` when the feature is off: ``teacher`` (``TeacherPlan``) and ``synthesis``
(``SynthesisPlan``); each training method's decisions are ``trainings[method]`` (``TrainingPlan``)."""

from __future__ import annotations

from snakeskills.backends.specs import backend_spec, declared_job_gpus
from snakeskills.plan.job_resources import UNKNOWN, sampling_job_resources, training_job_resources, with_overrides
from snakeskills.plan.layout import Layout, synthesis_split_part
from snakeskills.plan.sections import benchmark_prompt, llm_judged
from snakeskills.plan.synthesis import SynthesisPlan
from snakeskills.plan.teacher import TeacherPlan
from snakeskills.plan.tools import ToolsPlan
from snakeskills.plan.training import TrainingPlan, without_save_timer
from snakeskills.plan.validation import CurvesPlan
from snakeskills.prompts import resolve_prompt
from snakeskills.settings.generation import Generation
from snakeskills.settings.jobs import GenerationJob, LLMJudge, LLMJudgeJob
from snakeskills.settings.run import RunSettings
from snakeskills.settings.tools import Tools
from snakeskills.training.methods import TRAINING_METHODS, checkpoint_model_parts, tuned_model_parts


class Plan:
    """The decisions of one run, made from its validated and checked config."""

    def __init__(self, config: dict, layout: Layout, settings: RunSettings | None = None):
        self.config = config
        self.settings = settings = settings or RunSettings.from_config(config)
        self.layout = layout
        self.generations = settings.generations
        self.base_model: str = config["model"]["name"]
        self.methods: list[str] = list(config["methods"])
        # each training method's rounds, one chain per method from the same base model, in config order
        self.tuned_models = [
            TRAINING_METHODS[method].tuned_model_name(r)
            for method in self.methods
            for r in range(1, config["rounds"] + 1)
        ]
        self.models = [self.base_model, *self.tuned_models]
        self.benchmarks = list(config["benchmarks"])
        self.trainings = {method: TrainingPlan(config, layout, method) for method in self.methods}
        self.curves = CurvesPlan(config, self)  # checkpoints evaluated on validation as rounds train
        teacher = config["teacher"]
        self.teacher = TeacherPlan(teacher, settings.teacher_tools) if teacher is not None else None
        self.synthesis = SynthesisPlan(config, self) if config["synthesis"] is not None else None
        self.tools = ToolsPlan(settings.tools, self.base_model) if settings.tools is not None else None
        if self.tools is not None and self.tools.section.chat:  # the rounds' prompts offer the tools as functions
            for training in self.trainings.values():
                training.chat_tools = self.tools.prompt_format()
        own_writer = self.synthesis.own_writer if self.synthesis is not None else None
        tool_models = self.tools.evaluated_models if self.tools is not None else []
        # models that are sampled but never trained, each from its own config section (model, generation, prompt)
        self.served_models = [name for name in (self.teacher and self.teacher.name, own_writer) if name] + tool_models
        # the base student's eval-only variants (tools.baselines): it answers without tools, or calls a tool first
        self.baseline_models = self.tools.baseline_models() if self.tools is not None else []
        # the models compared on the eval split, in table order: the student before and after each round (its
        # baselines after the base model), the teacher, the models as tools answering alone
        evaluated_teacher = self.teacher.name if self.teacher is not None and self.teacher.evaluated else None
        self.eval_models = [self.base_model, *self.baseline_models, *self.tuned_models]
        self.eval_models += ([evaluated_teacher] if evaluated_teacher else []) + tool_models
        self.evaluated_teacher = evaluated_teacher
        # the plots of `snakemake --report`
        self.report_plots = [
            "pass_at_1",
            "gains",
            "pass_at_k",
            "generation_lengths",
            "sft_examples",
            "training_curves",
        ] + (["synthesis_funnel"] if self.synthesis is not None else [])
        self.report_plots += ["tool_use"] if self.tools is not None else []
        self.report_plots += ["accuracy_cost"] if self.cost_references() else []
        self.report_plots += ["validation_curves"] if self.curves.validated_rounds() else []

    # ---- models and rounds

    def cost_references(self) -> list[str]:
        """The models the accuracy-against-cost comparison reads every model against (``ToolsPlan.cost_references``;
        none without priced tools)."""
        return self.tools.cost_references() if self.tools is not None else []

    def student_model(self, model: str) -> str:
        """The student model whose weights ``model`` generates with: the base model for its baselines."""
        return self.base_model if model in self.baseline_models else model

    def parent_model(self, model: str) -> str:
        """The model ``model`` was trained after: the base model for a method's round 1, else the same method's
        previous round."""
        method, round_number = self.tuned_parts(model)
        return self.base_model if round_number == 1 else TRAINING_METHODS[method].tuned_model_name(round_number - 1)

    @staticmethod
    def tuned_parts(model: str) -> tuple[str, int]:
        """(training method, round) of a tuned model, or of one of its round's checkpoints."""
        checkpoint = checkpoint_model_parts(model)
        parts = tuned_model_parts(model) or (checkpoint[:2] if checkpoint else None)
        if parts is None:
            raise ValueError(f"{model!r} is not a tuned model's name")
        return parts

    def training_data(self, model: str, kind: str = "data") -> str:
        """The data file (``kind`` "stats": stats.json) a round or one of its segments trains on: its data rule's."""
        method, round_number = self.tuned_parts(model)
        entry = TRAINING_METHODS[method]
        return getattr(self.layout, getattr(entry, kind)).format(model=entry.tuned_model_name(round_number))

    def method_models(self, method: str) -> list[str]:
        """``method``'s rounds, in order (none when ``methods`` does not list it)."""
        return [model for model in self.tuned_models if self.tuned_parts(model)[0] == method]

    def training_for(self, model: str) -> TrainingPlan:
        """The training plan of a tuned model's method."""
        return self.trainings[self.tuned_parts(model)[0]]

    def training_output(self, method: str) -> str:
        """The pattern of what ``method``'s rounds write (an adapter or a checkpoint); the adapter's for a method
        the run does not list (its rule then plans no job)."""
        return self.trainings[method].output if method in self.trainings else self.layout.adapter

    def training_outputs(self) -> list[str]:
        """Every tuned model's adapter or checkpoint, in ``tuned_models`` order."""
        return [self.training_for(model).output.format(model=model) for model in self.tuned_models]

    def sft_data_models(self, model: str) -> list[str]:
        """Models whose judged train generations feed ``model``'s SFT data (sft.rounds_data, teacher.later_rounds).

        replace: the previous round's only; accumulate: the base model's and every earlier round's. With a
        teacher, the teacher takes the base model's place (``TeacherPlan.sft_data_models``)."""
        chain = [self.base_model, *self.method_models("sft")]
        student = chain[: chain.index(model)]
        if self.config["sft"]["rounds_data"] == "replace":
            student = student[-1:]
        if self.teacher is None:
            return student
        return self.teacher.sft_data_models([name for name in student if name != self.base_model])

    def train_sampled_models(self) -> list[str]:
        """Every model that samples the train split: those whose generations feed some round's SFT data, and those
        whose failures seed problem synthesis."""
        feeding = [source for model in self.method_models("sft") for source, _, _ in self.sft_judged_runs(model)]
        # dpo pairs and grpo problems come from the previous model's judged train samples
        parents = [self.parent_model(model) for model in self.tuned_models if self.tuned_parts(model)[0] != "sft"]
        feedback = self.synthesis.failure_feedback_models() if self.synthesis is not None else []
        return list(dict.fromkeys([*feeding, *parents, *feedback]))

    def seeds(self, model: str, split: str) -> list[int]:
        """Random seeds a model samples a split with: train_num_seeds (teacher.train_num_seeds for the teacher)
        on the train split, a synthesis split's own (``SynthesisPlan.seeds``), num_seeds on any other."""
        config = self.config
        part = synthesis_split_part(split)
        if part is not None:
            return self.synthesis.seeds(part)
        if split != config["train_split"]:
            return list(range(config["num_seeds"]))
        if self.teacher is not None and model == self.teacher.name:
            return list(range(self.teacher.train_num_seeds))
        return list(range(config["train_num_seeds"]))

    # ---- what a model generates with

    def base_model_folder(self) -> str:
        """The base checkpoint folder: the built tiny model or model.path."""
        if self.config["model"]["build_tiny"]:
            return self.layout.checkpoint.format(model=self.base_model)
        return self.config["model"]["path"]

    def base_model_inputs(self) -> list[str]:
        """Files Snakemake must produce before the base model can load (none for a local checkpoint)."""
        return [self.layout.checkpoint.format(model=self.base_model)] if self.config["model"]["build_tiny"] else []

    def tiny_model_settings(self) -> dict:
        """The tiny_model section as build_tiny_model's params hold it: its training without the save timer
        (``training.without_save_timer``)."""
        tiny = self.config["tiny_model"]
        settings = {**tiny, "training": without_save_timer(tiny["training"])}
        if tiny["tool_share"] and self.tools is not None:  # a bootstrap that shows the tool protocol
            return {**settings, "tools": self.tools.training_section().to_dict()}
        # without: only the tool-free keys, so that a tool-free bootstrap's key and results stand
        return {key: value for key, value in settings.items() if key not in ("tool_completion", "tool_share")}

    def tiny_model_prompt(self) -> dict:
        """The prompt the tiny model bootstraps with: the student's, with its bootstrap benchmark's question."""
        benchmark = self.config["tiny_model"]["bootstrap_benchmark"]
        return benchmark_prompt(self.config["prompt"], self.config["benchmarks"][benchmark])

    def tiny_model_inputs(self) -> dict[str, str]:
        """The prepared splits the tiny model bootstraps on and is validated with."""
        tiny = self.config["tiny_model"]
        return {
            name: self.layout.prepared.format(benchmark=tiny["bootstrap_benchmark"], split=tiny[f"{name}_split"])
            for name in ("bootstrap", "validation")
        }

    def sampling_section(self, model: str) -> dict:
        """The config section that says how ``model`` samples (model, prompt, generation): the teacher's own, an
        own synthesis writer's (solving with synthesis.label.prompt), or the student's (every other model)."""
        if self.teacher is not None and model == self.teacher.name:
            return self.teacher.section
        if self.synthesis is not None and model == self.synthesis.own_writer:
            return self.synthesis.own_writer_section()
        if self.tools is not None and model in self.tools.evaluated_models:
            return self.tools.model_section(model)
        return self.config

    def model_generation(self, model: str) -> Generation:
        """The generation section ``model`` samples with (``sampling_section``'s): the teacher's, an own synthesis
        writer's, a model tool's (through its shared model server, ``ToolsPlan.model_section``), or the student's."""
        if self.teacher is not None and model == self.teacher.name:
            return self.generations["teacher.generation"]
        if self.synthesis is not None and model == self.synthesis.own_writer:
            return self.generations["synthesis.generation"]
        if self.tools is not None and model in self.tools.evaluated_models:
            from snakeskills.tools.model_tool import shared_generation

            return shared_generation(self.generations[f"tools.models.{model}.generation"])
        return self.generations["generation"]

    def job_generation(self, model: str, split: str) -> Generation:
        """The generation section ``model``'s generate jobs on ``split`` run with: the model's own, with
        synthesis.sampling in place of its sampling where a teacher or student writer writes new problems (a
        synthesis sources split)."""
        generation = self.model_generation(model)
        if synthesis_split_part(split) == "sources":
            return self.synthesis.writing_generation(generation)
        return generation

    def generation_job(self, model: str, benchmark: str, split: str) -> dict:
        """What ``model``'s generate jobs on ``benchmark``'s ``split`` run with: model, generation
        (``job_generation``) and prompt sections. Writing new problems (a synthesis sources split) uses
        synthesis.prompt; answering, the model's prompt with the benchmark's question (``benchmark_prompt``)."""
        section = self.sampling_section(model)
        if synthesis_split_part(split) == "sources":
            prompt = self.synthesis.section["prompt"]
        else:
            prompt = benchmark_prompt(section["prompt"], self.config["benchmarks"][benchmark])
        return {"model": section["model"], "generation": self.job_generation(model, split), "prompt": prompt}

    def generation_model_path(self, model: str) -> str | None:
        """The checkpoint a model generates with: a full fine-tune's own (sft.method full), else the base model;
        a served model's own (teacher.model.path, synthesis.model.path; none for an openai server)."""
        if model in self.served_models:
            return self.sampling_section(model)["model"]["path"]
        model = self.student_model(model)
        if model != self.base_model and self.training_for(model).full:
            return self.training_for(model).tuned_checkpoint(model)
        return self.base_model_folder()

    def generation_adapter_path(self, model: str) -> str | None:
        """The LoRA adapter a tuned round generates with (sft.method lora); none for the base model, a served
        model, or full fine-tunes."""
        model = self.student_model(model)
        if model == self.base_model or model in self.served_models:
            return None
        return self.training_for(model).tuned_adapter(model)

    def generation_model_inputs(self, model: str) -> list[str]:
        """The files a model's generation loads: base model, base + adapter (lora) or the round's checkpoint
        (full); none for a served model (a local folder or a server)."""
        if model in self.served_models:
            return []
        model = self.student_model(model)
        if model != self.base_model and self.training_for(model).full:
            return [self.training_for(model).tuned_checkpoint(model)]
        adapter = self.generation_adapter_path(model)
        return self.base_model_inputs() + ([] if adapter is None else [adapter])

    def generation_settings(self, model: str, benchmark: str, split: str) -> dict:
        """What a generate job reads from its settings file: the prepared split, the model and where its weights
        are, the generation section, the resolved prompt, and whether a chunk may be empty (a synthesis split's: a
        round may write fewer new problems than there are chunks)."""
        job = self.generation_job(model, benchmark, split)
        return GenerationJob(
            split=self.layout.prepared.format(benchmark=benchmark, split=split),
            model=job["model"],
            model_path=self.generation_model_path(model),
            adapter_path=self.generation_adapter_path(model),
            generation=job["generation"],
            prompt=resolve_prompt(job["prompt"]),
            allow_empty_chunk=synthesis_split_part(split) is not None,
            tools=self.generation_tools(model, split),
            price=self.tools.price(model) if self.tools is not None else None,
            reuse_by_content=True if self.curves.reused_by_content(model) else None,
        ).to_dict()

    def generation_tools(self, model: str, split: str) -> Tools | None:
        """The ``tools`` section a model's generation calls tools with (``ToolsPlan.job_section``): the student's,
        its tuned rounds' and its baselines', and the teacher's with teacher.tools (a synthesis writer, a model tool
        answering alone and the writing of new problems answer in one turn)."""
        if self.tools is None or synthesis_split_part(split) == "sources":
            return None
        tool_teacher = self.teacher is not None and self.teacher.tools and model == self.teacher.name
        if model in self.served_models and not tool_teacher:
            return None
        return self.tools.job_section(model)

    def llm_judge_settings(self) -> dict | None:
        """What an LLM judge job reads from its settings file: judge.llm and its resolved prompt (``None`` without
        an LLM judge, whose settings rule then plans no job)."""
        llm = self.config["judge"]["llm"]
        if llm is None:
            return None
        return LLMJudgeJob(llm=LLMJudge.from_dict(llm, "judge.llm"), prompt=resolve_prompt(llm["prompt"])).to_dict()

    def training_init(self, model: str) -> list[str]:
        """What ``model``'s training continues from (sft.init continue, from round 2 on): the previous round's
        adapter (lora) or checkpoint (full); none otherwise (training starts from the base model)."""
        parent = self.parent_model(model)
        return self.training_for(model).init(None if parent == self.base_model else parent)

    # ---- jobs: GPUs and envs

    def generation_gpus(self, model: str, split: str, gpus_available: bool, *, local_run: bool = False) -> int:
        """GPUs one of ``model``'s generate jobs declares (``specs.declared_job_gpus``): its backend's (none for a
        teacher behind an openai server), or, in a ``local_run`` where its jobs share a model server, none (the
        server claims them)."""
        return declared_job_gpus(self.job_generation(model, split), gpus_available, local_run=local_run)

    def generation_env(self, model: str, split: str) -> str:
        """The conda env of ``model``'s generate jobs: its backend's (the teacher's may differ from the student's)."""
        return backend_spec(self.job_generation(model, split)).conda_env

    def llm_judge_generation(self) -> Generation:
        """The LLM judge's generation section (judge.llm.generation); the student's when there is no LLM judge
        (its rule then plans no job, but still names an env)."""
        return self.generations.get("judge.llm.generation", self.generations["generation"])

    def llm_judge_gpus(self, gpus_available: bool, *, local_run: bool = False) -> int:
        """GPUs one LLM judge job declares (``specs.declared_job_gpus``, as ``generation_gpus``)."""
        return declared_job_gpus(self.llm_judge_generation(), gpus_available, local_run=local_run)

    def generation_resources(self, model: str, split: str) -> dict:
        """``mem_mb`` and ``runtime`` of ``model``'s generate jobs (``job_resources``; resources.generate)."""
        estimate = sampling_job_resources(
            self.sampling_section(model)["model"], self.job_generation(model, split), self.config
        )
        return with_overrides("generate", estimate, self.config)

    def llm_judge_resources(self) -> dict:
        llm = self.config["judge"]["llm"]
        if llm is None:  # no job is planned
            return dict(UNKNOWN)
        return with_overrides(
            "llm_judge", sampling_job_resources(llm["model"], self.llm_judge_generation(), self.config), self.config
        )

    def training_resources(self, method: str) -> dict:
        """``mem_mb`` and ``runtime`` of ``method``'s training jobs (resources.<method>)."""
        if method not in self.trainings:  # no job is planned
            return dict(UNKNOWN)
        return with_overrides(method, training_job_resources(self.config, method), self.config)

    def llm_judge_env(self) -> str:
        return backend_spec(self.llm_judge_generation()).conda_env

    # ---- which files each step reads

    def sft_judged_runs(self, model: str) -> list[tuple[str, str, int]]:
        """(model, benchmark, seed) of every judged train-split seed file ``model``'s SFT data is made from (none
        with synthesis.sft_data only)."""
        if self.synthesis is not None and self.synthesis.section["sft_data"] == "only":
            return []
        split = self.config["train_split"]
        return [
            (source, benchmark, seed)
            for source in self.sft_data_models(model)
            for benchmark in self.config["train_benchmarks"]
            for seed in self.seeds(source, split)
        ]

    def sft_judged_sources(self, model: str) -> list[tuple[str, str, str]]:
        """(source, benchmark, judged file) of everything ``model``'s SFT data is filtered from: each train-split
        seed file with the model that wrote it, and the solver's samples of each synthesized split, as
        "synthesized"."""
        split = self.config["train_split"]
        sources = [
            (source, benchmark, self.layout.judged.format(model=source, benchmark=benchmark, split=split, seed=seed))
            for source, benchmark, seed in self.sft_judged_runs(model)
        ]
        if self.synthesis is not None:
            sources += [("synthesized", benchmark, path) for benchmark, path in self.synthesis.sft_judged_files(model)]
        return sources

    def sft_judged_files(self, model: str) -> list[str]:
        return [path for _, _, path in self.sft_judged_sources(model)]

    def sft_prompts(self, model: str) -> list[dict]:
        """The prompt section of each of ``model``'s SFT sources (``sft_judged_sources``): the student's, with the
        source benchmark's question, so that an example is what the student is asked on that benchmark."""
        return [
            benchmark_prompt(self.config["prompt"], self.config["benchmarks"][benchmark])
            for _, benchmark, _ in self.sft_judged_sources(model)
        ]

    def generated_files(self, model: str, benchmark: str, split: str) -> list[str]:
        """Every generated chunk file of ``model`` on ``split``, seed by seed (``num_chunks`` files per seed)."""
        num_chunks = self.config["num_chunks"]
        return [
            self.layout.generated.format(
                model=model, benchmark=benchmark, split=split, seed=seed, chunk=chunk, num_chunks=num_chunks
            )
            for seed in self.seeds(model, split)
            for chunk in range(num_chunks)
        ]

    def judged_chunks(self, model: str, benchmark: str, split: str, seed: int | str) -> list[str]:
        """The judged chunks merged into one seed file: LLM-judged ones where the LLM judge reads the benchmark."""
        pattern = self.layout.llm_judged_chunk if llm_judged(self.config, benchmark) else self.layout.judged_chunk
        chunks = self.config["num_chunks"]
        return [
            pattern.format(model=model, benchmark=benchmark, split=split, seed=seed, chunk=chunk, num_chunks=chunks)
            for chunk in range(chunks)
        ]

    def judged_seed_files(self, model: str, benchmark: str, split: str) -> list[str]:
        return [
            self.layout.judged.format(model=model, benchmark=benchmark, split=split, seed=seed)
            for seed in self.seeds(model, split)
        ]

    def eval_runs(self) -> list[tuple[str, str]]:
        """(model, benchmark) pairs compared on the eval split, in table order."""
        return [(model, benchmark) for model in self.eval_models for benchmark in self.benchmarks]

    def eval_judged_runs(self) -> list[tuple[str, str, int]]:
        """(model, benchmark, seed) of every judged seed file on the eval split, in plot order."""
        split = self.config["eval_split"]
        return [(model, benchmark, seed) for model, benchmark in self.eval_runs() for seed in self.seeds(model, split)]

    def eval_metrics_files(self) -> list[str]:
        split = self.config["eval_split"]
        return [self.layout.metrics.format(model=m, benchmark=b, split=split) for m, b in self.eval_runs()]

    def eval_problem_score_files(self) -> list[str]:
        """Each eval run's problems.jsonl, in ``eval_runs`` order."""
        split = self.config["eval_split"]
        return [self.layout.problem_scores.format(model=m, benchmark=b, split=split) for m, b in self.eval_runs()]

    def eval_judged_files(self) -> list[str]:
        split = self.config["eval_split"]
        return [
            self.layout.judged.format(model=m, benchmark=b, split=split, seed=seed)
            for m, b, seed in self.eval_judged_runs()
        ]

    def sft_stats_files(self) -> list[str]:
        return [self.layout.sft_stats.format(model=model) for model in self.method_models("sft")]

    def training_data_stats(self, model: str) -> str:
        """What a tuned model's training data counted (its method's stats.json: SFT examples, DPO pairs, ...)."""
        return self.training_data(model, "stats")

    def method_comparisons(self) -> list[tuple[str, str]]:
        """(model, other) pairs of the same round trained by different methods, each later method against each
        earlier one in ``methods`` order (a paired comparison on the eval split)."""
        pairs = []
        for round_number in range(1, self.config["rounds"] + 1):
            models = [TRAINING_METHODS[method].tuned_model_name(round_number) for method in self.methods]
            pairs += [(model, other) for index, model in enumerate(models) for other in models[:index]]
        return pairs

    def previous_model_train_files(self, model: str) -> list[tuple[str, str]]:
        """(benchmark, judged file) of the previous model's train-split samples a dpo, kto or grpo round starts from."""
        parent, split = self.parent_model(model), self.config["train_split"]
        return [
            (benchmark, self.layout.judged.format(model=parent, benchmark=benchmark, split=split, seed=seed))
            for benchmark in self.config["train_benchmarks"]
            for seed in self.seeds(parent, split)
        ]

    def funnel_tables(self) -> list[str]:
        """The synthesis funnel table the comparison text ends with (none without synthesis)."""
        return [self.layout.synthesis_funnel_table] if self.synthesis is not None else []

    def targets(self) -> list[str]:
        """What a plain ``snakemake`` builds: the comparison, the train metrics, the plots and samples, the tuned models
        (adapters or checkpoints: a rerun always leaves them in place), merged models (sft.merge) and the synthesis
        funnel."""
        layout = self.layout
        train_metrics = [
            layout.metrics.format(model=model, benchmark=benchmark, split=self.config["train_split"])
            for model in self.train_sampled_models()
            for benchmark in self.config["train_benchmarks"]
        ]
        plots = [layout.plot.format(plot=plot) for plot in self.report_plots]
        tuned = self.training_outputs()
        funnel = self.synthesis.targets() if self.synthesis is not None else []
        return [
            layout.summary,
            layout.summary_table,
            *train_metrics,
            *self.curves.validation_targets(),
            *self.curves.selection_files(),
            *plots,
            layout.samples,
            *tuned,
            *(self.trainings["sft"].merged(self.method_models("sft")) if "sft" in self.trainings else []),
            *funnel,
        ]
