"""Ctrl-C or SIGTERM during a study: the first stops asking for trials and lets the running
ones finish; a second interrupts at once (the study stays resumable: lost trials are reaped).
Several studies at once (one per kind of node, each in a thread of its own) are stopped
together: only the main thread receives signals, and it stops every study within."""

from __future__ import annotations

import ctypes
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@dataclass
class _Stops:
    """The stops that the main thread's signal handler sets, and the signals it received."""

    stops: list[threading.Event]
    received: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def on_signal(self, signum: int, frame: Any) -> None:
        self.received.append(signal.Signals(signum).name)
        with self.lock:
            stops = list(self.stops)
        if any(stop.is_set() for stop in stops):
            raise KeyboardInterrupt
        for stop in stops:
            stop.set()

    def join(self, stop: threading.Event) -> None:
        with self.lock:
            self.stops.append(stop)
        if self.received:  # a signal came before this study started
            stop.set()

    def leave(self, stop: threading.Event) -> None:
        with self.lock:
            self.stops.remove(stop)


_installed: _Stops | None = None


@contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[list[str]]:
    """Within: SIGINT or SIGTERM sets `stop`; a second raises KeyboardInterrupt in the main
    thread. Yields the names of the signals received, in order. In another thread, where no
    handler can be installed, `stop` is set by the signals an enclosing `stop_on_signals` of
    the main thread receives, if there is one."""
    global _installed
    if threading.current_thread() is not threading.main_thread():
        relay = _installed
        if relay is None:
            yield []
            return
        relay.join(stop)
        try:
            yield relay.received
        finally:
            relay.leave(stop)
        return
    enclosing, _installed = _installed, _Stops([stop])
    previous = {signum: signal.signal(signum, _installed.on_signal) for signum in STOP_SIGNALS}
    try:
        yield _installed.received
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _installed = enclosing


def interrupt_thread(thread: threading.Thread) -> None:
    """Raise KeyboardInterrupt in `thread` as soon as it runs Python code again (a blocking
    call it is in returns first): a second signal interrupts a study in another thread as it
    interrupts one in the main thread."""
    if thread.ident is None:
        return
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread.ident), ctypes.py_object(KeyboardInterrupt)
    )
