"""README.md's code blocks, and a terminal session that runs them as a user would.

A fenced block is run unless the line above its fence marks it:
- `<!-- not run: REASON -->`: not run (an install step, an illustration, the test suite);
- `<!-- until Ctrl-C: URL -->`: a command that serves until Ctrl-C. It is started, must
  answer at URL, and is then stopped with SIGINT, as a user stops it.

Shell blocks (sh, bash, console) run one after another in `bash` with `set -euo pipefail`,
like commands typed into one terminal: what a block exports and the directory it ends in
carry over to the next block. A python block runs as `python -` in that same session. What
a block starts in the background (`autotune serve ... &`) runs in that block's process
group, which ends with the session.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.process_groups import end_groups, exited

SHELL_LANGUAGES = ("sh", "bash", "console")
RUN_LANGUAGES = (*SHELL_LANGUAGES, "python")
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
MARK = re.compile(r"^\s*<!--\s*(not run|until Ctrl-C):\s*(.+?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    language: str
    text: str
    line: int  # of the opening fence, 1-based
    mark: str | None = None  # "not run" or "until Ctrl-C"
    mark_value: str | None = None  # the reason, or the URL that must answer

    @property
    def runs(self) -> bool:
        return self.language in RUN_LANGUAGES and self.mark != "not run"


def readme_blocks(text: str) -> list[Block]:
    """Every fenced block, with its language and the mark on the line above its fence."""
    lines = text.splitlines()
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        indent, language = opening.groups()
        end = next(i for i in range(index + 1, len(lines)) if lines[i].strip() == "```")
        body = "\n".join(line.removeprefix(indent) for line in lines[index + 1 : end]) + "\n"
        mark = MARK.match(lines[index - 1]) if index > 0 else None
        blocks.append(
            Block(
                language,
                body,
                index + 1,
                mark.group(1) if mark else None,
                mark.group(2) if mark else None,
            )
        )
        index = end + 1
    return blocks


def substituted(text: str, substitutions: dict[str, str]) -> str:
    """`text` with each whole word of `substitutions` replaced by its value."""
    for word, value in substitutions.items():
        text = re.sub(rf"\b{re.escape(word)}\b", value, text)
    return text


def copy_tracked_files(repo: Path, work: Path) -> None:
    """The checkout's tracked files as they are in its working tree (edits included)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=repo, capture_output=True, check=True
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = repo / name
        if source.is_file():
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, work / name)


class Session:
    """One terminal, in `work`, with `env`: blocks run in it one after another."""

    def __init__(self, work: Path, env: dict[str, str], logs: Path) -> None:
        self.work, self.env, self.logs = work, env, logs
        logs.mkdir(parents=True, exist_ok=True)
        self.state = logs / "exported.sh"
        self.cwd = logs / "cwd"
        self.cwd.write_text(str(work))
        self.groups: list[subprocess.Popen[bytes]] = []

    def run(self, block: Block, timeout_s: float) -> str:
        """Run a block to its end; its output, or an AssertionError with it."""
        process, log = self._start(block, save_state=True)
        returncode = self._wait(process, timeout_s, log)
        output = log.read_text(errors="replace")
        assert returncode == 0, (
            f"README.md line {block.line} exited {returncode}:\n{block.text}\n--- output:\n"
            f"{output[-6000:]}"
        )
        return output

    def serve_until_ctrl_c(self, block: Block, url: str, timeout_s: float) -> None:
        """Start a block that serves until Ctrl-C, wait until `url` answers, then Ctrl-C it."""
        process, log = self._start(block, save_state=False)
        deadline = time.monotonic() + timeout_s
        while not _answers(url):
            assert not exited(process), (
                f"README.md line {block.line} ended before {url} answered:\n"
                f"{log.read_text(errors='replace')[-6000:]}"
            )
            assert time.monotonic() < deadline, f"{url} did not answer in {timeout_s:.0f}s"
            time.sleep(0.5)
        os.killpg(process.pid, signal.SIGINT)
        self._wait(process, 60, log)

    def close(self) -> None:
        """End every process group a block started (a server left running, its children)."""
        end_groups(self.groups, grace_s=30)

    def _start(self, block: Block, save_state: bool) -> tuple[subprocess.Popen[bytes], Path]:
        number = len(self.groups) + 1
        script = self.logs / f"block-{number}.sh"
        log = self.logs / f"block-{number}.log"
        script.write_text(self._script(block, save_state))
        with log.open("wb") as out:
            process = subprocess.Popen(
                ["bash", str(script)],
                cwd=self.work,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.groups.append(process)
        return process, log

    def _script(self, block: Block, save_state: bool) -> str:
        saving = f"trap 'export -p > {self.state}; pwd > {self.cwd}' EXIT\n" if save_state else ""
        if block.language == "python":
            body = f"python - <<'README_PYTHON'\n{block.text}README_PYTHON\n"
        else:
            body = block.text
        restore = f'if [ -f {self.state} ]; then source {self.state}; fi\ncd "$(cat {self.cwd})"\n'
        return "set -euo pipefail\n" + restore + saving + body

    def _wait(self, process: subprocess.Popen[bytes], timeout_s: float, log: Path) -> int:
        """The block's exit status, its process left unreaped: its group's number stays its
        own until `close` ends the group."""
        deadline = time.monotonic() + timeout_s
        while not exited(process):
            if time.monotonic() > deadline:
                output = log.read_text(errors="replace")[-6000:]
                raise AssertionError(f"still running after {timeout_s:.0f}s:\n{output}")
            time.sleep(0.2)
        status = os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT)
        assert status is not None
        if status.si_code == os.CLD_EXITED:
            return status.si_status
        return -status.si_status


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=5).status_code < 500
    except httpx.TransportError:
        return False
