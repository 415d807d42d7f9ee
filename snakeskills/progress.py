"""How far a long job is, in its log: rows done / total, rows/s, generated tokens/s, elapsed time and ETA.

Backends report each batch of results as it finishes (``generate(..., on_results=...)``); ``Progress`` turns
those reports into log lines, at most one every ``MIN_INTERVAL_SECONDS`` plus one when the last row is done,
so a job's log answers "how long until this finishes?" without one line per row. Rates count only the rows
this run produced, not rows resumed from a progress file, and only the time since the model finished its first rows:
what came before (the model's load, a server's start, the first batch's warm-up) is no rate of the rows to come. A
first batch of 64 rows can take a minute of load and warm-up and then the next ones seconds; from it, a job of
3 minutes read as 1h04m.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)

MIN_INTERVAL_SECONDS = 10.0  # between two progress lines of one job


def format_duration(seconds: float) -> str:
    """``"2h05m"``, ``"3m41s"`` or ``"12s"``."""
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{seconds:02d}s"
    return f"{seconds}s"


class Progress:
    """Counts rows (and generated tokens) of one job toward ``total`` and logs how far it is."""

    def __init__(
        self,
        total: int,
        *,
        label: str,
        min_interval: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        log: Callable[[str], None] | None = None,
    ):
        self.total = total
        self.label = label
        self.min_interval = MIN_INTERVAL_SECONDS if min_interval is None else min_interval
        self.clock = clock
        self.log = log or logger.info
        self.started = clock()
        self.last_logged = self.started
        self.resumed = 0
        self.done = 0
        self.tokens = 0
        # (time, rows done, tokens) when the model finished its first rows of this run: the rates start there
        self.warm: tuple[float, int, int] | None = None
        self.batch_started = self.started  # when the batch being decoded took its first step
        self.batch_step: tuple[int, int, int, int] | None = None  # (rows, step, max_steps, tokens) of that batch
        # (time, step) the batch's step rate is measured from: its first decoding step's end, then each step line's
        self.step_mark: tuple[float, int] | None = None
        self.lock = threading.Lock()  # the heartbeat logs from its own thread

    def resume(self, rows: int) -> None:
        """Rows an earlier run already did: they count toward the total but not toward the rates."""
        self.resumed = rows
        self.done = rows

    def advance(self, rows: int, tokens: int = 0, *, generated: bool = False) -> None:
        """``rows`` more done, ``tokens`` generated for them; ``generated``: the model's rows (``on_results``), whose
        first ones end the warm-up, not rows answered without it."""
        with self.lock:
            self.done += rows
            self.tokens += tokens
            self.batch_step = None
            now = self.clock()
            if generated and rows and self.warm is None:
                self.warm = (now, self.done, self.tokens)
            if self.done >= self.total or now - self.last_logged >= self.min_interval:
                self.last_logged = now
                self.log(self.line(now))

    def heartbeat(self) -> None:
        """Log where the job is when nothing was logged for the interval: work no callback reports (a batch's
        prompt pass, which takes tens of seconds for 64 long prompts on a CPU, or a server's slow answer)."""
        with self.lock:
            now = self.clock()
            if now - self.last_logged < self.min_interval or self.done >= self.total:
                return
            self.last_logged = now
            self.log(self.step_line(now) if self.batch_step is not None else self.line(now))

    def rows_done(self) -> str:
        """How a progress line starts: the job and its rows done."""
        return f"{self.label}: {self.done}/{self.total} rows ({100 * self.done / max(self.total, 1):.1f}%)"

    def rates(self, now: float) -> tuple[float, float] | None:
        """(rows/s, generated tokens/s) since the model finished its first rows (``warm``); None until more rows
        finished after them."""
        if self.warm is None or self.done <= self.warm[1] or now <= self.warm[0]:
            return None
        since, rows, tokens = self.warm
        return (self.done - rows) / (now - since), (self.tokens - tokens) / (now - since)

    def line(self, now: float | None = None) -> str:
        now = self.clock() if now is None else now
        elapsed = max(now - self.started, 1e-9)
        rates = self.rates(now)
        if rates is None and self.done >= self.total:  # done in one report: its rates are the whole run's
            rates = ((self.done - self.resumed) / elapsed, self.tokens / elapsed)
        parts = [self.rows_done()]
        if rates is not None:
            parts += [f"{rates[0]:.2f} rows/s", f"{rates[1]:.1f} generated tokens/s"]
        parts.append(f"elapsed {format_duration(elapsed)}")
        if self.done >= self.total:
            parts.append("done")
        elif rates is not None:
            parts.append(f"ETA {format_duration((self.total - self.done) / rates[0])}")
        elif self.warm is not None:
            parts.append("ETA unknown until more rows finish (the first ones waited for the model's load and warm-up)")
        else:
            parts.append("ETA unknown")
        return ", ".join(parts)

    def on_results(self, results) -> None:
        """A backend's callback: a batch of ``GenerationResult`` is done."""
        self.advance(len(results), sum(result.num_generated_tokens for result in results), generated=True)

    def on_step(self, rows: int, step: int, max_steps: int, tokens: int) -> None:
        """A backend's callback inside a batch of ``rows`` rows (hf): ``step`` of at most ``max_steps`` decoding
        steps done, ``tokens`` generated in the batch so far. A batch can take minutes: at the interval this
        logs where it is, with an ETA (``step_line``)."""
        with self.lock:
            now = self.clock()
            if step == 1:
                self.batch_started, self.step_mark = now, None
            elif step == 2:  # the first decoding step (a compiled model's warm-up) is left out of the step rate
                self.step_mark = (now, step)
            self.batch_step = (rows, step, max_steps, tokens)
            if step < 2 or now - self.last_logged < self.min_interval:
                return
            self.last_logged = now
            self.log(self.step_line(now))
            self.step_mark = (now, step)

    def step_line(self, now: float) -> str:
        """Where the batch being decoded is (``on_step``'s last report), with an ETA: from the rate of the rows the
        model finished (``rates``) once there is one, else an upper bound from the batch's step rate since its last
        step line (or its first decoding step), as if every row ran to ``max_steps``."""
        rows, step, max_steps, tokens = self.batch_step
        elapsed = max(now - self.started, 1e-9)
        rates = self.rates(now)
        decoding = max(now - self.batch_started, 1e-9)
        speed = tokens / decoding if rates is None else rates[1]
        line = (
            f"{self.rows_done()}, a batch of {rows} at step {step}/{max_steps}, {speed:.1f} generated tokens/s, "
            f"elapsed {format_duration(elapsed)}, "
        )
        if rates is not None:
            return line + f"ETA {format_duration((self.total - self.done) / rates[0])}"
        if self.step_mark is None or step <= self.step_mark[1]:
            return line + "ETA unknown"
        seconds_per_step = (now - self.step_mark[0]) / (step - self.step_mark[1])
        rows_after_batch = max(self.total - self.done - rows, 0)
        remaining = seconds_per_step * ((max_steps - step) + max_steps * rows_after_batch / max(rows, 1))
        return line + f"ETA at most {format_duration(remaining)}"


def generate_with_progress(backend, requests, sampling, progress: Progress, *, heartbeat_seconds: float | None = None):
    """``backend.generate`` reporting to ``progress``: each finished batch, where the backend decodes step by step
    in this process (hf: ``reports_steps``), where a batch is, and, from a heartbeat thread that looks every
    ``heartbeat_seconds`` (a quarter of the interval), a line whenever the interval passed without one (a batch's
    prompt pass, a slow server)."""
    steps = {"on_step": progress.on_step} if getattr(backend, "reports_steps", False) else {}
    period = progress.min_interval / 4 if heartbeat_seconds is None else heartbeat_seconds
    if period <= 0:  # no interval: every report is logged already, and a zero wait would spin
        return backend.generate(requests, sampling, on_results=progress.on_results, **steps)
    finished = threading.Event()

    def beat() -> None:
        while not finished.wait(period):
            progress.heartbeat()

    heart = threading.Thread(target=beat, name="progress-heartbeat", daemon=True)
    heart.start()
    try:
        return backend.generate(requests, sampling, on_results=progress.on_results, **steps)
    finally:
        finished.set()
        heart.join()
