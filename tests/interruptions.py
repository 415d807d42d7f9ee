"""Jobs cut off part-way, for resume tests: a backend that dies after some batches, as a killed job would."""

from __future__ import annotations

import pytest


class Killed(Exception):
    pass


def run_killed_after_batches(backend, monkeypatch, run, batches: int) -> None:
    """Run ``run()`` with ``backend.generate`` raising on call ``batches + 1``; the backend is restored after."""
    original, calls = backend.generate, []

    def generate_then_die(requests, sampling, **options):
        calls.append(len(requests))
        if len(calls) > batches:
            raise Killed()
        return original(requests, sampling, **options)

    monkeypatch.setattr(backend, "generate", generate_then_die)
    with pytest.raises(Killed):
        run()
    monkeypatch.undo()
