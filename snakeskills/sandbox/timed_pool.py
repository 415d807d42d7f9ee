"""Worker processes with a hard per-task time limit.

math-verify's own timeout uses ``signal.alarm``, which only works on a process's main thread and
cannot interrupt C code (a sympy power like ``10^10^10^10`` never returns to the interpreter).
Here every task runs in a worker process; the parent watches the clock and, when a task runs past
its limit, kills that worker (SIGKILL), records the task as timed out, and starts a fresh worker.
An optional memory limit makes a runaway task fail with ``MemoryError`` instead of exhausting the
node's memory. It bounds what a worker may add to the address space it was forked with: a worker
forked from a process that already maps gigabytes (a model trained or loaded in the same process)
would otherwise start above an absolute limit and die on its first allocation.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import wait

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outcome:
    value: object = None
    timed_out: bool = False
    error: str | None = None


def _address_space_bytes() -> int:
    """This process's virtual address space (Linux ``/proc``); 0 where it cannot be read."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _worker_main(function, connection, memory_limit_mb):
    if memory_limit_mb:
        import resource

        limit = _address_space_bytes() + memory_limit_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    while True:
        message = connection.recv()
        if message is None:
            return
        index, arguments = message
        try:
            connection.send((index, function(*arguments), None))
        except BaseException as error:  # noqa: BLE001 - reported back to the parent, which decides
            connection.send((index, None, f"{type(error).__name__}: {error}"))


class _Worker:
    def __init__(self, context, function, memory_limit_mb):
        self.connection, child_connection = context.Pipe()
        self.process = context.Process(
            target=_worker_main, args=(function, child_connection, memory_limit_mb), daemon=True
        )
        self.process.start()
        child_connection.close()
        self.task: int | None = None
        self.deadline = 0.0

    def kill(self):
        self.process.kill()
        self.process.join()
        self.connection.close()


class TimedProcessPool:
    """``map(arguments)`` runs ``function(*args)`` for each tuple in worker processes, each within the limit."""

    def __init__(
        self,
        function: Callable,
        *,
        num_workers: int,
        timeout_seconds: float,
        memory_limit_mb: int | None = None,
    ):
        if num_workers < 1:
            raise ValueError("num_workers must be at least 1")
        self.function = function
        self.timeout_seconds = timeout_seconds
        self.memory_limit_mb = memory_limit_mb
        methods = multiprocessing.get_all_start_methods()
        # fork shares the parent's already-imported modules (sympy takes ~1 s to import)
        self.context = multiprocessing.get_context("fork" if "fork" in methods and os.name == "posix" else "spawn")
        self.workers = [self._start_worker() for _ in range(num_workers)]
        self.timed_out_tasks = 0

    def _start_worker(self) -> _Worker:
        return _Worker(self.context, self.function, self.memory_limit_mb)

    def map(self, arguments: Sequence[tuple]) -> list[Outcome]:
        outcomes: list[Outcome | None] = [None] * len(arguments)
        pending = deque(range(len(arguments)))
        idle = deque(self.workers)
        busy: dict = {}
        while pending or busy:
            while pending and idle:
                worker = idle.popleft()
                index = pending.popleft()
                worker.task, worker.deadline = index, time.monotonic() + self.timeout_seconds
                worker.connection.send((index, arguments[index]))
                busy[worker.connection] = worker
            next_deadline = min(worker.deadline for worker in busy.values())
            ready = wait(list(busy), timeout=max(0.0, next_deadline - time.monotonic()))
            for connection in ready:
                worker = busy.pop(connection)
                try:
                    index, value, error = connection.recv()
                except EOFError:  # the worker died (e.g. killed by the kernel)
                    index, value, error = worker.task, None, f"worker exited with code {worker.process.exitcode}"
                    worker.kill()
                    worker = self._replace(worker)
                outcomes[index] = Outcome(value=value, error=error)
                idle.append(worker)
            now = time.monotonic()
            for connection, worker in list(busy.items()):
                if worker.deadline <= now:
                    del busy[connection]
                    outcomes[worker.task] = Outcome(timed_out=True)
                    self.timed_out_tasks += 1
                    worker.kill()
                    idle.append(self._replace(worker))
        return outcomes

    def _replace(self, worker: _Worker) -> _Worker:
        fresh = self._start_worker()
        self.workers[self.workers.index(worker)] = fresh
        return fresh

    def close(self):
        for worker in self.workers:
            with contextlib.suppress(BrokenPipeError, OSError):
                worker.connection.send(None)
        for worker in self.workers:
            worker.process.join(timeout=5)
            if worker.process.is_alive():
                worker.kill()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
