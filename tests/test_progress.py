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
