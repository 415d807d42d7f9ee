"""An expert at 2-digit sums, built once per machine: SmolLM2-135M-Instruct (``pretrained``) after a short supervised
fine-tune on labelled sums, in the chat format it is asked in. The stock model solves 0-7 % of 2-digit sums; this one
is right on 87 % of its samples at temperature 0.7 on sums of two numbers from 10 to 99 (76 % from 0 to 99), and
answers ``\\boxed{<sum>}``. It is the test suite's teacher and the expert of the models-as-tools example
(``config/examples/tiny-addition-expert-orchestrator.yaml``).

About 5 minutes on 2 cores, once: cached beside the converted SmolLM2 (``pretrained.cache_directory``), keyed by the
recipe, built under a lock and renamed into place when complete::

    python3 -m snakeskills.training.arithmetic_expert --link models/smollm2-arithmetic-expert
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

# sums of two numbers from 10 to 99: operands from 0 gave 76 % and unanimous wrong answers on sums with a one-digit
# operand (which majority labels then inherit)
RECIPE = {
    "examples": 512,
    "operands": [10, 99],
    "seed": 7,
    "training": {"num_epochs": 2, "learning_rate": 2e-4, "batch_size": 16, "max_length": 64},
}


def arithmetic_expert_folder(*, cache: str | Path | None = None) -> Path:
    """The expert's checkpoint folder, built first if this machine has none."""
    from snakeskills.models.pretrained import packaged_model_folder, recipe_folder

    base = packaged_model_folder("smollm2-135m-instruct", cache=cache)
    return recipe_folder("smollm2-arithmetic-teacher", RECIPE, lambda folder: _build(base, folder), cache=cache)


def _build(base: Path, folder: Path) -> None:
    from snakeskills.training.sft import fine_tune_folder

    rng = random.Random(RECIPE["seed"])
    examples = []
    for index in range(RECIPE["examples"]):
        a, b = (rng.randint(*RECIPE["operands"]) for _ in range(2))
        examples.append(
            {
                "id": f"labelled-{index}",
                "messages": [
                    {"role": "user", "content": f"{a}+{b}="},
                    {"role": "assistant", "content": f"\\boxed{{{a + b}}}"},
                ],
            }
        )
    fine_tune_folder(base, folder, examples, RECIPE["training"])


def main(argv: list[str] | None = None) -> None:
    from snakeskills.models.pretrained import print_model_folder

    parser = argparse.ArgumentParser(
        prog="python3 -m snakeskills.training.arithmetic_expert",
        description="Build (once per machine) SmolLM2-135M-Instruct fine-tuned on 2-digit sums.",
    )
    parser.add_argument("--link", help="also make this path a link to the folder (models/smollm2-arithmetic-expert)")
    parser.add_argument("--cache", help="cache folder (default: $SNAKESKILLS_CACHE or ~/.cache/snakeskills)")
    arguments = parser.parse_args(argv)
    print_model_folder(lambda: arithmetic_expert_folder(cache=arguments.cache), arguments.link)


if __name__ == "__main__":
    main()
