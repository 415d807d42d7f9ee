"""The tool loop with the real Python tool in the sandbox: a hostile sample's calls (the job's secret, a results file,
another sample's session) get nothing, a hanging call ends as a timeout in its transcript while the other rows
finish, and the model reads each call's output. The model is a scripted text backend (its turns fixed by the
transcript so far); the calls are real sandboxed runs."""

from __future__ import annotations

import time

import pytest

from snakeskills.backends.types import GenerationRequest, GenerationResult, SamplingParams, truncate_at_stop
from snakeskills.settings.tools import TAG_PRESETS, Tools
from snakeskills.tools.loop import ToolLoop, ToolUse

pytestmark = pytest.mark.usefixtures("bubblewrap")

TAGS = TAG_PRESETS["markdown"]
SAMPLING = SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=2000)


class ScriptedBackend:
    """Each row's next turn by the number of tool outputs in its prompt so far, cut at the stop strings."""

    takes = "text"
    batch_size = 8

    def __init__(self, scripts: dict[str, list[str]]):
        self.scripts = scripts

    def generate(self, requests, sampling, on_results=None):
        results = []
        for request in requests:
            name, _, transcript = request.prompt.partition(":")
            turn = transcript.count(TAGS.code_output_begin)
            text, _ = truncate_at_stop(self.scripts[name][turn], sampling.stop)
            results.append(GenerationResult(generation=text, num_generated_tokens=len(text), finish_reason="stop"))
        return results


def code(source: str) -> str:
    return f"{TAGS.code_begin}{source}\n{TAGS.code_end}"


def run(scripts, *names, timeout: float = 5) -> dict[str, GenerationResult]:
    settings = Tools.filled({"tool": "python", "timeout_seconds": timeout}, "tools")
    use = ToolUse(settings=settings, tags=TAGS, max_calls=4, workers=4)
    requests = [GenerationRequest(seed=index, prompt=f"{name}:") for index, name in enumerate(names)]
    results = ToolLoop(ScriptedBackend(scripts), use).generate(requests, SAMPLING)
    return dict(zip(names, results, strict=True))


def outputs(result: GenerationResult) -> list[str]:
    return [result.generation[start:end] for start, end in result.tools["tool_output_spans"]]


def test_a_hostile_samples_calls_reach_no_secret_no_file_and_no_other_session(tmp_path, monkeypatch):
    secret = "sk-test-" + "7" * 24
    monkeypatch.setenv("SNAKESKILLS_JUDGE_API_KEY", secret)
    results_file = tmp_path / "results.jsonl"
    results_file.write_text('{"symbolic_correct": false}\n')
    monkeypatch.chdir(tmp_path)
    probe = (
        "import os, pathlib\n"
        "print(sorted(k for k in os.environ if 'KEY' in k))\n"
        "print(open('/proc/1/environ', 'rb').read().count(b'sk-test'))\n"
        f"print(pathlib.Path({str(results_file)!r}).exists(), pathlib.Path('results.jsonl').exists())\n"
        f"try:\n    open({str(results_file)!r}, 'w').write('{{\"symbolic_correct\": true}}')\n"
        "except OSError as error:\n    print(type(error).__name__)"
    )
    scripts = {
        "hostile": [code(probe), code("print(shared)"), "done"],
        "honest": [code("shared = 'mine'\nprint(shared)"), "\\boxed{1}"],
    }
    results = run(scripts, "hostile", "honest")
    hostile = outputs(results["hostile"])
    assert secret not in results["hostile"].generation
    # no key in its environment or bubblewrap's, neither path exists in the sandbox, so the write cannot reach it
    expected = f"{TAGS.code_output_begin}[]\n0\nFalse False\nFileNotFoundError\n{TAGS.code_output_end}"
    assert hostile[0] == expected, hostile[0]
    assert "NameError" in hostile[1] and results["hostile"].tools["tool_errors"] == 1
    assert results_file.read_text() == '{"symbolic_correct": false}\n'
    assert outputs(results["honest"]) == [f"{TAGS.code_output_begin}mine\n{TAGS.code_output_end}"]


def test_a_hanging_call_is_a_timeout_in_its_transcript_and_the_others_finish():
    scripts = {
        "hangs": [code("import time\nwhile True:\n    time.sleep(1)"), "gave up"],
        "quick": [code("x = 6 * 7\nx"), "\\boxed{42}"],
    }
    start = time.monotonic()
    results = run(scripts, "hangs", "quick", timeout=1.5)
    assert time.monotonic() - start < 30
    hangs = results["hangs"]
    assert hangs.tools["num_code_timeouts"] == 1 and hangs.tools["code_execution_time"] >= 1.5
    assert "Timed out" in outputs(hangs)[0] and hangs.generation.endswith("gave up")
    quick = results["quick"]
    assert outputs(quick) == [f"{TAGS.code_output_begin}42\n{TAGS.code_output_end}"]
    assert quick.generation.endswith("\\boxed{42}") and quick.tools["num_code_timeouts"] == 0
