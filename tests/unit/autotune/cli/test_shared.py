"""What every command shares: SIGTERM is Ctrl-C, and an interrupt exits 130."""

from __future__ import annotations

import os
import signal
import threading

import pytest
import typer

from autotune.cli.shared import EXIT_INTERRUPTED, _exit_codes, sigterm_interrupts


def test_sigterm_interrupts_like_ctrl_c_and_exits_130() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(typer.Exit) as info, _exit_codes(), sigterm_interrupts():
        os.kill(os.getpid(), signal.SIGTERM)
        threading.Event().wait(10)  # the handler raises here
    assert info.value.exit_code == EXIT_INTERRUPTED
    assert signal.getsignal(signal.SIGTERM) is before
