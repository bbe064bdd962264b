"""Free TCP ports for the processes a test starts, outside the ranges other processes take
ports from unasked: the kernel's ephemeral range (32768-60999 by default), where a port the
system chose for this test could be handed to another process (a Ray node picks its own
ports there, and its workers' from 10002-19999) between the look and the bind."""

from __future__ import annotations

import random
import socket

TEST_PORTS = range(20_000, 32_000)


def free_port() -> int:
    """A port of TEST_PORTS that nothing on 127.0.0.1 listens on now."""
    for port in random.sample(TEST_PORTS, 200):
        try:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        return port
    raise RuntimeError(f"no free port in {TEST_PORTS} after 200 tries")
