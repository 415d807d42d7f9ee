"""A tiny model that calls tools through a real chat template, for the tests of ``tools.format: chat_template`` in
training (tests/components/test_chat_tool_training.py) and behind ``vllm serve``
(tests/external/test_chat_tools_server.py)."""

from __future__ import annotations

from pathlib import Path

from conftest import learned_by_heart

from snakeskills.io import write_jsonl

# the problems the caller learned, each with the calculator calls it makes (one a turn), and their answers
CHAT_LEARNED = {"12*3": ["12*3"], "7*8+1": ["7*8", "56+1"]}
ANSWERS = {"12*3": "36", "7*8+1": "57"}


def build_chat_tool_caller(folder: Path, *, hidden_size: int = 64, num_heads: int = 4):
    """A tiny Llama on the character tokenizer with ChatML's two control tokens added (``<|im_end|>`` its EOS) and
    TRL's Qwen2.5 template, after a quick SFT (the project's SFT path: prompts rendered with the calculator offered as
    a function, the tool messages masked out of the loss) on conversations that call the calculator in the
    template's format: at a low temperature it calls by itself. Heads of 32 dimensions (``hidden_size`` /
    ``num_heads``) are the least vLLM's CPU build takes. Returns the folder and the tools section a job reads
    (functions and template set as the plan sets them)."""
    from snakeskills.models.tiny_model import build_char_tokenizer, build_tiny_llama
    from snakeskills.settings.tools import Tools
    from snakeskills.tools.chat_turns import ChatTurns, template_text
    from snakeskills.tools.function_calls import FunctionCall
    from snakeskills.tools.functions import function_settings
    from snakeskills.tools.registry import new_session
    from snakeskills.training.sft import to_prompt_completion

    section = Tools.filled({"tool": "calculator", "format": "chat_template", "max_calls": 3, "workers": 2}, "tools")
    section = section.replace(functions=function_settings(section), template_text=template_text("qwen2_5", "t"))
    schemas = [function["schema"] for function in section.functions]
    tokenizer = build_char_tokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tokenizer.eos_token = "<|im_end|>"
    chat = ChatTurns(tokenizer, section.template_text, schemas, {}, "test")
    calculator = new_session(Tools.filled({"tool": "calculator"}, "tools"))
    examples = []
    for problem, expressions in CHAT_LEARNED.items():
        text, spans = "", []
        for expression in expressions:
            text += chat.call_turn(FunctionCall("calculator", {"expression": expression})) + chat.end_text
            suffix = chat.suffix(
                [{"role": "tool", "name": "calculator", "content": calculator.call(expression).output}]
            )
            spans.append([len(text), len(text) + sum(len(piece) for piece, _ in suffix)])
            text += "".join(piece for piece, _ in suffix)
        text += f"\\boxed{{{calculator.call(problem).output}}}"
        record = {
            "id": problem,
            "messages": [{"role": "user", "content": problem}, {"role": "assistant", "content": text}],
        }
        record["tool_output_spans"] = spans
        examples.append(
            to_prompt_completion(
                record,
                tokenizer=tokenizer,
                chat_template=True,
                chat_template_kwargs={},
                functions=schemas,
                template=section.template_text,
            )
        )
    model = build_tiny_llama(
        tokenizer, hidden_size=hidden_size, num_layers=2, num_heads=num_heads, seed=0, max_positions=1536
    )
    tokenizer.chat_template = section.template_text  # its own template, as a model's that calls tools
    learned_by_heart(model, tokenizer, examples, folder, num_epochs=40, learning_rate=5e-3, max_length=1536)
    return folder, section


def caller_run_config(experiment: str, folder: Path, data: Path, sampling: dict) -> dict:
    """A run with the caller (``folder``) as the student on hf, its own chat template offering the calculator,
    asked the learned problems (written to ``data``) as its train and test splits, sampled with ``sampling``, and
    one small SFT round on its judged-correct conversations."""
    write_jsonl(data, [{"id": f"p{i}", "problem": p, "expected_answer": a} for i, (p, a) in enumerate(ANSWERS.items())])
    return {
        "experiment": experiment,
        "model": {"name": "caller", "build_tiny": False, "path": str(folder), "dtype": "float32"},
        "tools": {"tool": "calculator", "format": "chat_template", "max_calls": 3, "workers": 2},
        "benchmarks": {"calc": {"source": "jsonl", "jsonl": {"paths": {"train": str(data), "test": str(data)}}}},
        "train_benchmarks": ["calc"],
        "train_split": "train",
        "eval_split": "test",
        "prompt": {"user": "{problem}", "chat_template": True},
        "num_seeds": 2,
        "train_num_seeds": 2,
        "num_chunks": 1,
        "generation": {"backend": "hf", "device": "cpu", "batch_size": 4, "sampling": sampling},
        "judge": {"extraction": "boxed"},
        "methods": ["sft"],
        "sft": {
            "filters": {"correct_only": True},
            "lora": {"r": 4, "alpha": 8, "dropout": 0.0},
            "training": {"num_epochs": 1, "learning_rate": 1.0e-3, "batch_size": 2, "max_length": 1536},
        },
    }
