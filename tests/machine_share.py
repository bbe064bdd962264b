"""Tests that run side by side in pytest-xdist workers share the machine, except those marked
`exclusive` (they measure other processes' load on their cores, so another worker's test would
be load): such a test runs while no other worker runs one.

A readers-writer lock across the workers' processes, on two files: every test holds `machine`
shared while it runs; an exclusive one holds it alone. `turnstile` is taken by everyone on
the way in, and held by an exclusive test while it waits, so that a stream of shared holders
cannot keep it waiting for ever.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def machine_share(directory: Path, exclusive: bool) -> Iterator[None]:
    """Hold the machine, shared or alone, for the body; `directory` is common to all workers.
    Closing a file releases its locks."""
    with (directory / "turnstile.lock").open("a") as turnstile:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        with (directory / "machine.lock").open("a") as machine:
            fcntl.flock(machine, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            if not exclusive:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
            yield
