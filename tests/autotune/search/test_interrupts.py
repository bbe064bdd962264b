"""A stop signal during a study: SIGINT or SIGTERM stops it after its running trials; a
second interrupts at once."""

from __future__ import annotations

import signal
import threading

import pytest

from autotune.search.interrupts import stop_on_signals


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_the_first_stop_signal_sets_stop_and_a_second_interrupts(signum: int) -> None:
    before = signal.getsignal(signum)
    stop = threading.Event()
    with stop_on_signals(stop) as received:
        # To this thread, the main one: a signal to the process may land on another of its
        # threads, which cannot wake the main one from a wait (its handler would then run only
        # after the wait, when the handlers are the ones put back).
        signal.raise_signal(signum)
        assert stop.wait(10)
        assert received == [signal.Signals(signum).name]
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signum)
            threading.Event().wait(10)  # the handler raises here, in the main thread
    assert signal.getsignal(signum) is before
