"""Entry points of the per-chunk jobs (generate, judge, llm_judge) and the LLM contamination check of synthesized
problems, run by ``shell:`` rules; and ``samples``, which prints judged samples from a run's results.

These rules are nearly all of a large run's jobs, and Snakemake plans a ``shell:`` job faster than a ``script:`` job
(bench/planning.py). Each command only unpacks its arguments and calls the package. Settings never pass through the
shell as text: a model job reads a settings file (``settings/generate/{model}/{benchmark}/{split}.json``, which
names the prepared split), and the rule-based judge gets one quoted JSON argument.

    python3 -m snakeskills.cli generate --wildcards seed=N,chunk=K,num_chunks=C,... --settings S \
        --threads T --gpus G --output O --log L
    python3 -m snakeskills.cli judge --settings-json JSON --threads T --input I --output O --log L
    python3 -m snakeskills.cli llm-judge --settings S --threads T --gpus G --input I --output O --log L
    python3 -m snakeskills.cli llm-contamination-check --settings S --threads T --gpus G --candidates C \
        --eval E [E ...] --output O --checked K --stats J --log L

``samples`` is for people: a few judged samples per model and benchmark, chosen by a seed
(``snakeskills.results.samples``), filtered by model, benchmark, split, verdict and extraction route, with tool calls
and their outputs marked.

    python3 -m snakeskills.cli samples results/tiny-arithmetic --model sft-round1 --verdict incorrect --limit 3"""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import TYPE_CHECKING

from snakeskills.errors import SnakeskillsError
from snakeskills.job import script_logging

if TYPE_CHECKING:
    from snakeskills.generation.model_job import AskedModel
    from snakeskills.settings.generation import Generation


def parse_wildcards(text: str) -> dict[str, str]:
    """Snakemake's formatted wildcards, ``chunk=0,model=base,num_chunks=2,seed=1``, as a dict."""
    wildcards = {}
    for item in text.split(","):
        name, separator, value = item.partition("=")
        if not separator or not name:
            raise argparse.ArgumentTypeError(f"wildcards must be name=value,...; got {text!r}")
        wildcards[name] = value
    missing = {"seed", "chunk", "num_chunks"} - wildcards.keys()
    if missing:
        raise argparse.ArgumentTypeError(f"wildcards {text!r} lack {', '.join(sorted(missing))}")
    return wildcards


def claim_gpus_for(generation: Generation, gpus: int) -> None:
    """The job's GPUs (its rule's gpu resource); the one the config pins (hf device cuda:N) if it pins one."""
    from snakeskills.backends.gpus import claim_job_gpus
    from snakeskills.backends.specs import pinned_device

    # a job with GPUs of its own is never served by a server on them (the server's key holds the GPUs it runs on), so
    # while it waits it asks servers holding them to exit
    claim_job_gpus(gpus, pinned=pinned_device(generation))


def asked_model(
    arguments: argparse.Namespace, *, model: dict, generation: Generation, prompt: dict, model_path, adapter_path
) -> AskedModel:
    """The model a job asks, as its settings file says: its backend on the job's threads and GPUs, its resolved
    prompt, sampling and reasoning settings; the settings file is part of the job's fingerprint."""
    from snakeskills.backends import backend_from_config, sampling_params
    from snakeskills.generation.model_job import AskedModel, reasoning_settings

    claim_gpus_for(generation, arguments.gpus)
    backend = backend_from_config(
        generation,
        model,
        model_path=model_path,
        adapter_path=adapter_path,
        threads=arguments.threads,
        chat_template=prompt["chat_template"],
        chat_template_kwargs=prompt["chat_template_kwargs"],
        functions=prompt.get("functions"),
        template=prompt.get("template"),
    )
    return AskedModel(
        backend=backend,
        prompt=prompt,
        sampling=sampling_params(generation.sampling, prompt),
        reasoning=reasoning_settings(generation),
        rows_per_flush=generation.rows_per_flush,
        fingerprint_files=[arguments.settings],
    )


def judging_model(arguments: argparse.Namespace) -> AskedModel:
    """The model of a job that asks a judging model (the LLM judge, the contamination checker), from its settings
    file (``llm``: model and generation sections; ``prompt``)."""
    from snakeskills.settings.jobs import LLMJudgeJob

    job = LLMJudgeJob.from_json(arguments.settings)
    return asked_model(
        arguments,
        model=job.llm.model.to_dict(),
        generation=job.llm.generation,
        prompt=job.prompt,
        model_path=job.llm.model.path,
        adapter_path=None,
    )


def run_generate(arguments: argparse.Namespace) -> None:
    from snakeskills.generation.generate import generate_chunk
    from snakeskills.settings.jobs import GenerationJob

    with script_logging(arguments.log) as logger:
        job = GenerationJob.from_json(arguments.settings)
        reuse_key = None
        if job.reuse_by_content:  # a round's checkpoint: the rows of an earlier run with the same weights
            from snakeskills.generation import reuse

            reuse_key = reuse.content_key(
                job.to_dict(),
                weights=job.adapter_path or job.model_path,
                base_model=job.model_path if job.adapter_path else None,
                split=job.split,
                wildcards=arguments.wildcards,
            )
            if reuse.restore(arguments.output, reuse_key):
                return
        prompt = job.prompt
        if job.tools is not None:  # with tools.format chat_template, the prompt offers the tools as functions
            from snakeskills.tools.functions import prompt_with_functions

            prompt = prompt_with_functions(prompt, job.tools)
        model = asked_model(
            arguments,
            model=job.model,
            generation=job.generation,
            prompt=prompt,
            model_path=job.model_path,
            adapter_path=job.adapter_path,
        )
        if job.tools is not None:
            from snakeskills.tools.loop import ToolLoop, tool_use

            use = tool_use(job.tools, prompt["chat_template_kwargs"])
            model = dataclasses.replace(model, backend=ToolLoop(model.backend, use))
            logger.info("tools: %s", json.dumps(job.tools.to_dict()))
        counts = generate_chunk(
            model,
            prepared_path=job.split,
            output_path=arguments.output,
            chunk_index=int(arguments.wildcards["chunk"]),
            num_chunks=int(arguments.wildcards["num_chunks"]),
            random_seed=int(arguments.wildcards["seed"]),
            allow_empty_chunk=job.allow_empty_chunk,
            price=job.price,
        )
        logger.info("generate done: %s", counts)
        if reuse_key is not None:
            reuse.keep(arguments.output, reuse_key)


def run_judge(arguments: argparse.Namespace) -> None:
    from snakeskills.io import read_jsonl, write_jsonl
    from snakeskills.judging.judge import judge_records
    from snakeskills.settings.judging import RuleJudge

    with script_logging(arguments.log) as logger:
        try:
            judge = RuleJudge.from_dict(json.loads(arguments.settings_json), "--settings-json")
        except json.JSONDecodeError as error:
            raise SnakeskillsError(f"--settings-json is not JSON ({error.msg})") from None
        records = read_jsonl(arguments.input)
        judged = judge_records(records, judge, num_workers=arguments.threads, source=arguments.input)
        rows = write_jsonl(arguments.output, judged)
        logger.info("judged %d rows", rows)


def run_llm_judge(arguments: argparse.Namespace) -> None:
    from snakeskills.judging.llm_judge import llm_judge_chunk

    with script_logging(arguments.log) as logger:
        counts = llm_judge_chunk(judging_model(arguments), judged_path=arguments.input, output_path=arguments.output)
        logger.info("llm judge done: %s", counts)


def run_llm_contamination_check(arguments: argparse.Namespace) -> None:
    from snakeskills.synthesis.contamination_check import llm_contamination_check

    with script_logging(arguments.log) as logger:
        counts = llm_contamination_check(
            judging_model(arguments),
            candidates_path=arguments.candidates,
            eval_paths=arguments.eval,
            problems_path=arguments.output,
            checked_path=arguments.checked,
            stats_path=arguments.stats,
        )
        logger.info("contamination check done: %s", counts)


def run_samples(arguments: argparse.Namespace) -> None:
    import sys

    from snakeskills.plan.layout import Layout
    from snakeskills.results.samples import (
        choose_samples,
        experiment_folder,
        find_judged_files,
        no_samples_message,
        render_text,
        select_files,
    )

    pattern = Layout().judged
    try:
        results = experiment_folder(arguments.results, pattern)
        files = select_files(
            find_judged_files(results, pattern),
            models=arguments.model or (),
            benchmarks=arguments.benchmark or (),
            splits=arguments.split or (),
            where=str(results),
        )
        groups = choose_samples(
            files,
            per_verdict=arguments.limit,
            seed=arguments.seed,
            verdict=arguments.verdict,
            route=arguments.route,
            score=arguments.score,
        )
    except SnakeskillsError as error:
        print(f"snakeskills error: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    if not any(group.samples for group in groups):
        print(no_samples_message(groups, verdict=arguments.verdict, route=arguments.route), file=sys.stderr)
        raise SystemExit(1)
    text = render_text(groups, max_chars=None if arguments.full else arguments.max_chars, seed=arguments.seed)
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:  # `| head`: the reader has what it wanted
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def add_samples_command(commands) -> None:
    from snakeskills.results.samples import CHOICE_SEED, LONG_TEXT, PER_VERDICT, SCORES

    samples = commands.add_parser(
        "samples",
        help="print judged samples from a run's results (problem, generation, tool calls, answer, route, verdict)",
        description="Print a few judged samples of each model, benchmark and split from a run's results: the "
        "problem, the generation, the predicted answer, how the judge found it (extraction_route) and the verdict. "
        "With tools, the generation marks each tool's output ([tool output] ... [end of tool output]) and a tools "
        "line counts the sample's calls, errors and timeouts, their seconds and its cost. The same seed chooses the "
        f"same samples; the report (snakemake --report) shows those of seed {CHOICE_SEED} on the eval split.",
        epilog="example: python3 -m snakeskills.cli samples results/tiny-arithmetic --model sft-round1 "
        "--verdict incorrect --limit 3",
    )
    samples.set_defaults(run=run_samples)
    samples.add_argument(
        "results",
        nargs="?",
        default="results",
        help="the experiment's results folder, results/<experiment> (default: results, if it holds one experiment)",
    )
    samples.add_argument("--model", action="append", help="only this model (repeat for several; default: all)")
    samples.add_argument("--benchmark", action="append", help="only this benchmark (repeatable; default: all)")
    samples.add_argument("--split", action="append", help="only this split, e.g. test (repeatable; default: all)")
    samples.add_argument(
        "--verdict", choices=("correct", "incorrect", "all"), default="all", help="which samples (default: all)"
    )
    samples.add_argument(
        "--route",
        help="only samples whose answer was found this way (extraction_route, e.g. boxed; unknown: not recorded)",
    )
    samples.add_argument(
        "--limit",
        type=positive_int,
        default=PER_VERDICT,
        help=f"samples of each verdict per model, benchmark and split (default: {PER_VERDICT})",
    )
    samples.add_argument(
        "--seed", type=int, default=CHOICE_SEED, help=f"the seed that chooses the samples (default: {CHOICE_SEED})"
    )
    samples.add_argument(
        "--score",
        choices=SCORES,
        default=SCORES[0],
        help="the verdict: symbolic_correct (the rule-based judge, default) or judge_correct (the LLM judge)",
    )
    samples.add_argument(
        "--max-chars",
        type=positive_int,
        default=LONG_TEXT,
        help=f"cut longer texts to their start and end (default: {LONG_TEXT})",
    )
    samples.add_argument("--full", action="store_true", help="show every text whole")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1; got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python3 -m snakeskills.cli", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    def command(name: str, run, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text)
        sub.set_defaults(run=run)
        sub.add_argument("--threads", type=int, required=True, help="cores the job was given")
        sub.add_argument("--output", required=True, help="the JSONL file to write")
        sub.add_argument("--log", required=True, help="the job's log file")
        return sub

    def gpu_command(name: str, run, help_text: str) -> argparse.ArgumentParser:
        sub = command(name, run, help_text)
        sub.add_argument("--gpus", type=int, required=True, help="GPUs the job declares (its gpu resource)")
        return sub

    generate = gpu_command("generate", run_generate, "generate one chunk of a split with one random seed")
    generate.add_argument("--settings", required=True, help="settings/generate/{model}/{benchmark}/{split}.json")
    generate.add_argument(
        "--wildcards",
        type=parse_wildcards,
        required=True,
        help="the job's wildcards: name=value,... (seed, chunk, num_chunks)",
    )

    judge = command("judge", run_judge, "judge one chunk of generations (rule-based)")
    judge.add_argument("--settings-json", required=True, help="the judge settings, as JSON")
    judge.add_argument("--input", required=True, help="the generated chunk (JSONL)")

    llm_judge = gpu_command("llm-judge", run_llm_judge, "judge one judged chunk again with an LLM")
    llm_judge.add_argument("--settings", required=True, help="settings/llm_judge.json")
    llm_judge.add_argument("--input", required=True, help="the rule-based judged chunk (JSONL)")

    check = gpu_command(
        "llm-contamination-check",
        run_llm_contamination_check,
        "ask the LLM judge whether new problems are their most similar eval problems; --output gets the others",
    )
    check.add_argument("--settings", required=True, help="settings/contamination_check.json")
    check.add_argument("--candidates", required=True, help="the problems the n-gram check kept (JSONL)")
    check.add_argument("--eval", nargs="+", required=True, help="the prepared eval splits (JSONL)")
    check.add_argument("--checked", required=True, help="every candidate with its verdict (JSONL)")
    check.add_argument("--stats", required=True, help="the counts (JSON)")

    add_samples_command(commands)
    return parser


def job_generation_section(arguments: argparse.Namespace) -> Generation | None:
    """The generation section of a job that asks a model (its settings file), else None (the rule-based judge)."""
    from snakeskills.settings.jobs import GenerationJob, LLMJudgeJob

    if arguments.command == "generate":
        return GenerationJob.from_json(arguments.settings).generation
    if arguments.command in ("llm-judge", "llm-contamination-check"):
        return LLMJudgeJob.from_json(arguments.settings).llm.generation
    return None


def hand_over_to_configured_python(arguments: argparse.Namespace, argv: list[str]) -> None:
    """Run the job with the python its generation section names (``vllm.python``: vLLM in an environment of its
    own, ``snakeskills.backends.vllm_env``), replacing this process before anything is loaded or logged."""
    import os
    import sys
    from pathlib import Path

    from snakeskills.backends.vllm_env import configured_python, run_with

    if os.environ.get("SNAKESKILLS_HANDED_OVER"):
        return  # already the configured python (its prefix may read differently through links)
    generation = job_generation_section(arguments)
    python = configured_python(generation) if generation else None
    if python is None or Path(sys.prefix).resolve() == Path(python).parent.parent.resolve():
        return
    if not os.access(python, os.X_OK):
        raise SnakeskillsError(f"vllm.python of this job's settings ({arguments.settings}): {python} is not there")
    os.environ["SNAKESKILLS_HANDED_OVER"] = "1"
    run_with(python, argv)


def main(argv: list[str] | None = None) -> None:
    import sys

    argv = sys.argv[1:] if argv is None else argv
    arguments = build_parser().parse_args(argv)
    try:
        hand_over_to_configured_python(arguments, argv)
    except SnakeskillsError as error:
        print(f"snakeskills error: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    try:
        arguments.run(arguments)
    except KeyboardInterrupt:  # before or after the job's log is open (script_logging words it inside)
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
