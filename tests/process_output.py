"""A child process's output, read line by line in a thread as it comes: a test waits for a
line without blocking on the pipe, and still has everything said before and after it."""

from __future__ import annotations

import subprocess
import threading
import time

import pytest


class ProcessOutput:
    def __init__(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None, "the process's stdout must be a pipe"
        self.process = process
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    @property
    def text(self) -> str:
        return "".join(self.lines)

    def wait_for(self, text: str, within_s: float) -> None:
        """Until a line holds `text`; fails the test if none does within that time or the
        process ends first."""
        deadline = time.monotonic() + within_s
        while text not in self.text:
            if time.monotonic() > deadline or self.process.poll() is not None:
                self._reader.join(timeout=1)  # what it said last, where it ended
                if text in self.text:
                    return
                pytest.fail(f"never said {text!r}: {self.text[-3000:]}")
            time.sleep(0.1)

    def finished(self, within_s: float) -> int:
        """The process's exit code once it ends and its output is read to the end."""
        code = self.process.wait(timeout=within_s)
        self._reader.join(timeout=10)
        return code
