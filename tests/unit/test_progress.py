"""Progress lines of long jobs: rows done / total, rates over this run's rows only, ETA, rate-limited."""

from __future__ import annotations

from snakeskills.progress import Progress, format_duration


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_lines_every_interval_and_at_the_end_with_rates_of_this_run_only():
    clock, lines = Clock(), []
    progress = Progress(100, label="generate chunk0-of-1.jsonl", min_interval=30, clock=clock, log=lines.append)
    progress.resume(40)  # an earlier run did 40 rows: not part of the rate
    clock.now += 10
    progress.advance(10, tokens=500)
    assert lines == []  # within the interval: silent
    clock.now += 20
    progress.advance(10, tokens=500)
    assert lines == [
        "generate chunk0-of-1.jsonl: 60/100 rows (60.0%), 0.67 rows/s, 33.3 generated tokens/s, elapsed 30s, ETA 1m00s"
    ]
    clock.now += 5
    progress.advance(40, tokens=2000)
    assert lines[-1] == (
        "generate chunk0-of-1.jsonl: 100/100 rows (100.0%), 1.71 rows/s, 85.7 generated tokens/s, elapsed 35s, done"
    )


def test_durations_read_like_a_clock():
    assert [format_duration(seconds) for seconds in (0, 12.4, 221, 7500)] == ["0s", "12s", "3m41s", "2h05m"]


def test_a_long_batch_logs_where_it_is_between_batches(tiny_checkpoint):
    """A batch can take minutes (one batch of 64 rows took 71 s on SmolLM2): the hf backend reports each decoding
    step and the log gets, at the interval, the batch's step with an ETA from its step rate."""
    from conftest import hf_backend

    from snakeskills.backends import GenerationRequest, SamplingParams
    from snakeskills.progress import generate_with_progress

    clock, lines = Clock(), []

    def tick():
        clock.now += 4  # each clock reading: 4 s later
        return clock.now

    backend = hf_backend(str(tiny_checkpoint), device="cpu", batch_size=4)
    requests = [
        GenerationRequest(seed=row, prompt_token_ids=tuple(backend.tokenizer(f"{row}+1=")["input_ids"]))
        for row in range(6)
    ]
    progress = Progress(6, label="generate chunk0-of-1.jsonl", min_interval=10, clock=tick, log=lines.append)
    sampling = SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=8)
    # the heartbeat reads the clock too: kept out of this count of the step callback's lines
    results = generate_with_progress(backend, requests, sampling, progress, heartbeat_seconds=3600)
    assert len(results) == 6
    in_batch = [line for line in lines if "a batch of" in line]
    assert in_batch and all(
        line.startswith("generate chunk0-of-1.jsonl: ") and "a batch of " in line and "ETA at most " in line
        for line in in_batch
    ), lines
    assert "0/6 rows (0.0%), a batch of 4 at step " in in_batch[0]
    assert lines[-1].endswith("done")


def test_the_heartbeat_logs_through_work_no_callback_reports():
    """A batch's prompt pass (tens of seconds for 64 long prompts on a CPU core) and a server's slow answer report
    nothing; the heartbeat thread logs where the job is whenever the interval passes without a line: the last step
    of a batch when one is in flight, else rows done. The backend here is a stand-in that stays silent for a while
    (what a real one does during a long prompt pass, which cannot be made slow on demand)."""
    import threading

    from snakeskills.progress import generate_with_progress

    lines = []
    progress = Progress(8, label="generate chunk0-of-1.jsonl", min_interval=0.05, log=lines.append)
    silent = threading.Event()

    class SilentBackend:
        reports_steps = True

        def generate(self, requests, sampling, *, on_results, on_step):
            on_step(4, 1, 16, 4)  # a batch's first step, then a long silence
            silent.wait(0.5)
            on_results([])
            return ["result"]

    assert generate_with_progress(SilentBackend(), [], None, progress, heartbeat_seconds=0.01) == ["result"]
    during = [line for line in lines if "a batch of 4 at step 1/16" in line]
    assert len(during) >= 3, lines
    assert all(line.endswith("ETA unknown") for line in during), "one step gives no step rate yet"
    count = len(lines)
    progress.heartbeat()
    assert len(lines) == count, "not before the interval has passed"
    silent.wait(0.1)
    progress.heartbeat()
    assert len(lines) == count + 1 and "0/8 rows" in lines[-1] and "a batch" not in lines[-1], (
        "between batches the heartbeat logs rows done"
    )
