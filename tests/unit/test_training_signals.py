"""A training's stop signals (SIGINT, SIGTERM: ``trainer.stop_signals_interrupt``) and the private TRL name the
trainers override (``trainer.completion_positions_only``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from snakeskills.errors import SnakeskillsError

# a process that sends itself signals inside stop_signals_interrupt (signals sent to a test's own process would reach
# pytest's handlers) and prints what happened
SIGNALLED = """
import os, signal, sys, time
from snakeskills.training.trainer import stop_signals_interrupt

first, second = (getattr(signal, name) for name in sys.argv[1:3])
with stop_signals_interrupt():
    try:
        os.kill(os.getpid(), first)
        time.sleep(30)
        print("not interrupted")
    except KeyboardInterrupt as interruption:
        print(f"interrupted: {interruption}", flush=True)
        os.kill(os.getpid(), second)  # while the first one's line is being written
        time.sleep(0.2)
        print("the second signal was ignored", flush=True)
print("still ignored after:", signal.getsignal(first) is signal.SIG_IGN, signal.getsignal(second) is signal.SIG_IGN)
"""


@pytest.mark.parametrize(
    ("first", "second", "cause"),
    [("SIGINT", "SIGINT", "Ctrl-C"), ("SIGTERM", "SIGINT", "SIGTERM"), ("SIGINT", "SIGTERM", "Ctrl-C")],
)
def test_the_first_stop_signal_interrupts_and_later_ones_are_ignored(first, second, cause):
    process = subprocess.run(
        [sys.executable, "-c", SIGNALLED, first, second], capture_output=True, text=True, timeout=60
    )
    assert process.returncode == 0, process.stderr[-3000:]
    assert process.stdout.splitlines() == [
        f"interrupted: {cause}",
        "the second signal was ignored",
        "still ignored after: True True",
    ]


UNSIGNALLED = """
import signal
from snakeskills.training.trainer import stop_signals_interrupt

def own(signum, frame):
    pass

signal.signal(signal.SIGTERM, own)
with stop_signals_interrupt():
    print(signal.getsignal(signal.SIGINT) is signal.default_int_handler, signal.getsignal(signal.SIGTERM) is own)
print(signal.getsignal(signal.SIGINT) is signal.default_int_handler, signal.getsignal(signal.SIGTERM) is own)
"""


def test_a_signal_with_its_own_handler_keeps_it_and_the_defaults_come_back_when_none_came():
    process = subprocess.run([sys.executable, "-c", UNSIGNALLED], capture_output=True, text=True, timeout=60)
    assert process.returncode == 0, process.stderr[-3000:]
    assert process.stdout.splitlines() == ["False True", "True True"]


def test_a_trl_without_the_private_name_the_trainers_override_is_an_error_naming_it(monkeypatch):
    import trl
    from trl.trainer import utils as trl_utils

    from snakeskills.training.trainer import completion_positions_only

    monkeypatch.delattr(trl_utils, "_use_triton")
    missing = rf"TRL {trl.__version__} has no trl\.trainer\.utils\._use_triton"
    with pytest.raises(SnakeskillsError, match=missing), completion_positions_only():
        pass
