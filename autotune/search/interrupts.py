"""Ctrl-C or SIGTERM during a study: the first stops asking for trials and lets the running
ones finish; a second interrupts at once (the study stays resumable: lost trials are reaped)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[list[str]]:
    """Within: SIGINT or SIGTERM sets `stop`; a second raises KeyboardInterrupt. Yields the
    names of the signals received, in order."""
    received: list[str] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def on_signal(signum: int, frame: Any) -> None:
        received.append(signal.Signals(signum).name)
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    previous = {signum: signal.signal(signum, on_signal) for signum in STOP_SIGNALS}
    try:
        yield received
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
