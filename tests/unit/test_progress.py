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
    progress.advance(10, tokens=500, generated=True)  # the first rows: the rates start here
    assert lines == []  # within the interval: silent
    clock.now += 20
    progress.advance(10, tokens=500, generated=True)
    assert lines == [
        "generate chunk0-of-1.jsonl: 60/100 rows (60.0%), 0.50 rows/s, 25.0 generated tokens/s, elapsed 30s, ETA 1m20s"
    ]
    clock.now += 5
    progress.advance(40, tokens=2000, generated=True)
    assert lines[-1] == (
        "generate chunk0-of-1.jsonl: 100/100 rows (100.0%), 2.00 rows/s, 100.0 generated tokens/s, elapsed 35s, done"
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


class Result:
    def __init__(self, tokens: int):
        self.num_generated_tokens = tokens


def test_the_rate_leaves_out_the_models_load_and_warm_up():
    """Issue 65: a generate job's first ETA said 1h04m for a chunk that finished in 3 minutes. Here the model loads
    for 60 s and its first batch of 64 rows ends at 70 s; the next batches take 4 s each. From the first batch the
    rate was 64 rows in 70 s (ETA 7m57s for 500 rows); the rows take 16 rows/s once the model is warm."""
    clock, lines = Clock(), []
    progress = Progress(500, label="generate chunk0-of-1.jsonl", min_interval=10, clock=clock, log=lines.append)
    batch = [Result(10)] * 64
    clock.now += 70
    progress.on_results(batch)
    assert lines == [
        "generate chunk0-of-1.jsonl: 64/500 rows (12.8%), elapsed 1m10s, ETA unknown until more rows finish (the "
        "first ones waited for the model's load and warm-up)"
    ]
    for _ in range(3):
        clock.now += 4
        progress.on_results(batch)
    assert lines[-1] == (
        "generate chunk0-of-1.jsonl: 256/500 rows (51.2%), 16.00 rows/s, 160.0 generated tokens/s, elapsed 1m22s, "
        "ETA 15s"
    )
    for _ in range(3):
        clock.now += 4
        progress.on_results(batch)
    clock.now += 3
    progress.on_results([Result(10)] * 52)  # a last, smaller batch
    assert lines[-1].endswith("500/500 rows (100.0%), 16.15 rows/s, 161.5 generated tokens/s, elapsed 1m37s, done")


def test_rows_answered_without_the_model_do_not_start_the_rate():
    """Rows known without the model (``model_job``'s ``known``) are done at once, before the model loads."""
    clock, lines = Clock(), []
    progress = Progress(30, label="judge", min_interval=0, clock=clock, log=lines.append)
    progress.advance(10)
    assert lines[-1] == "judge: 10/30 rows (33.3%), elapsed 0s, ETA unknown"
    clock.now += 60
    progress.on_results([Result(5)] * 10)
    clock.now += 5
    progress.on_results([Result(5)] * 5)
    assert lines[-1] == "judge: 25/30 rows (83.3%), 1.00 rows/s, 5.0 generated tokens/s, elapsed 1m05s, ETA 5s"


def test_a_first_batchs_step_eta_leaves_out_its_warm_up_step_and_later_ones_read_the_rows_rate():
    """hf reports each decoding step. The first batch's first decoding step (a compiled model's warm-up) took 5 s
    and the next ones 0.125 s: from that step alone the upper bound read 2h50m; a batch after the first finished rows
    takes its ETA from their rate."""
    clock, lines = Clock(), []
    progress = Progress(256, label="generate chunk0-of-1.jsonl", min_interval=10, clock=clock, log=lines.append)
    clock.now += 55
    progress.on_step(64, 1, 512, 64)  # after the load and the prompt pass
    clock.now += 5
    progress.on_step(64, 2, 512, 128)
    assert lines == [
        "generate chunk0-of-1.jsonl: 0/256 rows (0.0%), a batch of 64 at step 2/512, 25.6 generated tokens/s, "
        "elapsed 1m00s, ETA unknown"
    ]
    for step in range(3, 83):
        clock.now += 0.125
        progress.on_step(64, step, 512, 64 * step)
    # steps 3-82 in 10 s: 0.125 s a step, 430 steps left in this batch and 3 batches of at most 512 after it
    assert lines[-1] == (
        "generate chunk0-of-1.jsonl: 0/256 rows (0.0%), a batch of 64 at step 82/512, 349.9 generated tokens/s, "
        "elapsed 1m10s, ETA at most 4m06s"
    )
    clock.now += 10
    progress.on_results([Result(100)] * 64)
    clock.now += 20
    progress.on_results([Result(100)] * 64)
    clock.now += 1
    progress.on_step(64, 1, 512, 64)
    clock.now += 10
    progress.on_step(64, 2, 512, 128)
    assert lines[-1] == (
        "generate chunk0-of-1.jsonl: 128/256 rows (50.0%), a batch of 64 at step 2/512, 206.5 generated tokens/s, "
        "elapsed 1m51s, ETA 1m02s"
    )
