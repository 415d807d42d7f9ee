"""SmolLM2-135M-Instruct taught to call a calculator through a chat template, built once per machine: one supervised
round on 128 scripted tool conversations in TRL's Qwen2.5 template (``tools.chat_template: qwen2_5``), the calculator
offered as a function. The stock model writes a well-formed call on 0 of 64 sampled answers with that template (8 %
with two worked conversations before the question), so it cannot learn the format from its own samples; this one
calls on its own, and is the base model of ``config/examples/smollm2-135m-instruct-chat-template-tools.yaml``.

Each scripted conversation asks one sum, difference or product of a 3-digit and a 2-digit number (the example's
benchmark asks products of 2-digit numbers: the format is taught, not its answers), calls the calculator, reads the
tool message (masked out of the loss) and answers ``The answer is \\boxed{<result>}.`` The prompts are the
example's: its user text, the template's system turn with the calculator's schema.

About 9 minutes on 2 cores (16 steps of about 300 tokens a row: the tools' schemas fill the system turn), once:
cached beside the converted SmolLM2 (``pretrained.cache_directory``), keyed by the recipe, built under a lock and
renamed into place when complete::

    python3 -m snakeskills.training.calculator_caller --link models/smollm2-calculator-caller
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

SYSTEM = "You are a helpful assistant."
USER = "Use the calculator for arithmetic, then give the answer in \\boxed{{}}.\n\nWhat is {problem}?"
RECIPE = {
    "examples": 128,
    "operands": [[100, 999], [10, 99]],
    "operations": ["+", "-", "*"],
    "seed": 11,
    "template": "qwen2_5",
    "system": SYSTEM,
    "user": USER,
    "training": {"num_epochs": 1, "learning_rate": 3e-4, "batch_size": 8, "max_length": 512},
}


def calculator_caller_folder(*, cache: str | Path | None = None) -> Path:
    """The taught model's checkpoint folder, built first if this machine has none."""
    from snakeskills.models.pretrained import packaged_model_folder, recipe_folder

    base = packaged_model_folder("smollm2-135m-instruct", cache=cache)
    return recipe_folder("smollm2-calculator-caller", RECIPE, lambda folder: _build(base, folder), cache=cache)


def scripted_conversation(chat, problem: str, output: str) -> tuple[str, list[list[int]]]:
    """The assistant's side of one scripted conversation (``chat``: a ``ChatTurns``): the call of the calculator
    with ``problem``, the model's end of turn, the tool message ``output`` as the template renders it, the answer;
    and the tool message's character span (masked out of the loss)."""
    from snakeskills.tools.function_calls import FunctionCall

    text = chat.call_turn(FunctionCall("calculator", {"expression": problem})) + chat.end_text
    suffix = "".join(piece for piece, _ in chat.suffix([{"role": "tool", "name": "calculator", "content": output}]))
    span = [len(text), len(text) + len(suffix)]
    return f"{text}{suffix}The answer is \\boxed{{{output}}}.", [span]


def _build(base: Path, folder: Path) -> None:
    from transformers import AutoTokenizer

    from snakeskills.prompts import fill_template
    from snakeskills.settings.tools import Tools
    from snakeskills.tools.chat_turns import ChatTurns, template_text
    from snakeskills.tools.functions import function_settings, functions_format
    from snakeskills.tools.registry import new_session
    from snakeskills.training.sft import fine_tune_folder

    tools = Tools.filled({"tool": "calculator", "format": "chat_template"}, "tools")
    tools = tools.replace(functions=function_settings(tools), template_text=template_text(RECIPE["template"], "t"))
    formatting = functions_format(tools)
    chat = ChatTurns(AutoTokenizer.from_pretrained(base), formatting["template"], formatting["functions"], {}, "t")
    calculator = new_session(tools)
    rng = random.Random(RECIPE["seed"])
    examples = []
    for index in range(RECIPE["examples"]):
        a, b = (rng.randint(*bounds) for bounds in RECIPE["operands"])
        problem = f"{a}{rng.choice(RECIPE['operations'])}{b}"
        answer, spans = scripted_conversation(chat, problem, calculator.call(problem).output)
        examples.append(
            {
                "id": f"scripted-{index}",
                "messages": [
                    {"role": "system", "content": RECIPE["system"]},
                    {"role": "user", "content": fill_template(RECIPE["user"], {"problem": problem})},
                    {"role": "assistant", "content": answer},
                ],
                "tool_output_spans": spans,
            }
        )
    fine_tune_folder(base, folder, examples, RECIPE["training"], **formatting)


def main(argv: list[str] | None = None) -> None:
    from snakeskills.models.pretrained import print_model_folder

    parser = argparse.ArgumentParser(
        prog="python3 -m snakeskills.training.calculator_caller",
        description="Build (once per machine) SmolLM2-135M-Instruct taught to call a calculator through TRL's "
        "Qwen2.5 chat template.",
    )
    parser.add_argument("--link", help="also make this path a link to the folder (models/smollm2-calculator-caller)")
    parser.add_argument("--cache", help="cache folder (default: $SNAKESKILLS_CACHE or ~/.cache/snakeskills)")
    arguments = parser.parse_args(argv)
    print_model_folder(lambda: calculator_caller_folder(cache=arguments.cache), arguments.link)


if __name__ == "__main__":
    main()
