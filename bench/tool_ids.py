"""Token ids against text in the tool loop, on SmolLM2-135M-Instruct: what GRPO trains on against what the judge reads.

Usage: python bench/tool_ids.py [--prompts 64] [--max-new-tokens 64] [--temperature 0.7] [--threads 2]
       [--output bench/results/tool-ids-cpu.json]

The workload of bench/tools.py (2-digit products asked in the chat template with three worked examples in the
``markdown`` tags, stop at ``\\n\\nProblem:``), answered through ``ToolLoop`` with the calculator on the hf backend
as GRPO's rollouts run it (``HFBackend.around``: each result carries its token ids and the model mask). Per row:
- ``ids_other_text``: its ids do not decode to its text and what ended it (its EOS, or the stop string: the token
  that completed it may run past it), counted here as ``tools.loop.ids_match_text`` does (so that an older checkout
  is counted the same way);
- ``ids_end_in_stop``: its ids end with the stop string its text leaves out (by design: the model learns to stop);
- ``mask_wrong``: a token the mask calls the model's lies in a tool output span, or a span holds a model token;
- ``calls``, ``rows_calling``.
Run it against an older checkout (``PYTHONPATH=<checkout> python bench/tool_ids.py``) to count what that one did.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tools import STOP, build_workload  # noqa: E402  (bench/tools.py: the same prompts)

REPO = Path(__file__).resolve().parent.parent


def mask_wrong(tokenizer, result) -> bool:
    """Whether the mask marks a token inside a tool output span as the model's, or a span's token as not masked."""
    ids, mask, spans = list(result.token_ids), result.model_token_mask, result.tools["tool_output_spans"]

    def decode(part):
        return tokenizer.decode(part, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    offsets = [len(decode(ids[:index])) for index in range(len(ids) + 1)]
    for index, mine in enumerate(mask):
        start, end = offsets[index], offsets[index + 1]
        if mine and any(start < span_end and span_start < end for span_start, span_end in spans):
            return True
    return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--output", default=str(REPO / "bench" / "results" / "tool-ids-cpu.json"))
    arguments = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from snakeskills.backends.hf import HFBackend
    from snakeskills.backends.types import GenerationRequest, SamplingParams
    from snakeskills.models.pretrained import packaged_model_folder
    from snakeskills.settings.tools import TAG_PRESETS, Tools
    from snakeskills.tools.loop import ToolLoop, ToolUse

    torch.set_num_threads(arguments.threads)
    path = str(packaged_model_folder("smollm2-135m-instruct"))
    workload = build_workload(path, arguments.prompts)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    tags = TAG_PRESETS["markdown"]
    use = ToolUse(Tools.filled({"tool": "calculator", "sandbox": "none"}, "tools"), tags, max_calls=2, workers=4)
    loop = ToolLoop(HFBackend.around(model, tokenizer, batch_size=arguments.prompts), use)
    sampling = SamplingParams(arguments.temperature, 1.0, 0, arguments.max_new_tokens, stop=STOP)
    requests = [
        GenerationRequest(seed=index, prompt_token_ids=tuple(ids))
        for index, ids in enumerate(workload["prompt_token_ids"])
    ]
    started = time.perf_counter()
    with torch.no_grad():
        results = loop.generate(requests, sampling)
    seconds = time.perf_counter() - started
    ends = (*STOP, tags.code_end)

    def decode(ids):
        return tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def ending(result):  # what the ids hold past the text, or None where they do not begin with it
        decoded = decode(result.token_ids)
        return decoded[len(result.generation) :] if decoded.startswith(result.generation) else None

    def agree(result):  # nothing, the EOS, or a stop string whose last token may run past it
        rest, last = ending(result), decode(result.token_ids[-1:])
        if rest is None:
            return False
        return rest in ("", tokenizer.eos_token) or any(
            rest.startswith(end) and len(rest) < len(end) + len(last) for end in ends
        )

    other = [index for index, result in enumerate(results) if not agree(result)]
    in_stop = [index for index, result in enumerate(results) if (ending(result) or "").startswith(STOP[0])]
    wrong_mask = [index for index, result in enumerate(results) if mask_wrong(tokenizer, result)]
    report = {
        "model": "SmolLM2-135M-Instruct",
        "prompts": arguments.prompts,
        "max_new_tokens": arguments.max_new_tokens,
        "temperature": arguments.temperature,
        "seconds": round(seconds, 1),
        "calls": sum(result.tools["code_rounds_executed"] for result in results),
        "rows_calling": sum(result.tools["code_rounds_executed"] > 0 for result in results),
        "ids_other_text": len(other),
        "ids_end_in_stop": len(in_stop),
        "mask_wrong": len(wrong_mask),
        "examples_other_text": [
            {"text": results[index].generation, "ids": decode(results[index].token_ids)} for index in other[:3]
        ],
        "machine": platform.processor() or platform.machine(),
        "torch": torch.__version__,
    }
    Path(arguments.output).parent.mkdir(parents=True, exist_ok=True)
    Path(arguments.output).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({key: value for key, value in report.items() if key != "examples_other_text"}, indent=1))


if __name__ == "__main__":
    main()
