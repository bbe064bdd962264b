"""A stop signal during a study: SIGINT or SIGTERM stops it after its running trials; a
second interrupts at once.

Each case runs in a fresh process, as a study's coordinator is one: a test process that
has hosted Ray, torch or a server in earlier tests may hold threads of theirs and handlers
they set at the C level, which are not what a command starts with."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests.conftest import REPO

# The first signal sets the study's stop; the second raises KeyboardInterrupt in the main
# thread; the handlers that were there before are put back after.
SCENARIO = """
import signal, sys, threading
from autotune.search.interrupts import stop_on_signals

signum = signal.Signals[sys.argv[1]]
before = signal.getsignal(signum)
stop = threading.Event()
with stop_on_signals(stop) as received:
    signal.raise_signal(signum)
    print("stop set:", stop.wait(10), "received:", received, flush=True)
    try:
        signal.raise_signal(signum)
        threading.Event().wait(10)  # the handler raises here, in the main thread
        print("second signal: nothing raised")
    except KeyboardInterrupt:
        print("second signal: KeyboardInterrupt")
print("handler put back:", signal.getsignal(signum) is before)
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "sigint"])
def test_the_first_stop_signal_sets_stop_and_a_second_interrupts(signum: signal.Signals) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCENARIO, signum.name],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"stop set: True received: ['{signum.name}']",
        "second signal: KeyboardInterrupt",
        "handler put back: True",
    ]
