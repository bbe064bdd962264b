"""The reaper of a local Ray: once the process that started Ray is gone (its pipe ends), the
processes Ray started, and theirs, are killed."""

from __future__ import annotations

import subprocess
import sys

import psutil

from autotune.execution.ray_reaper import Reaper

# A root that starts a child of its own, as the raylet starts its agents.
ROOT = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
    "print(child.pid, flush=True)\n"
    "time.sleep(600)\n"
)


def test_the_roots_and_their_children_are_killed_when_the_pipe_ends() -> None:
    root = subprocess.Popen([sys.executable, "-c", ROOT], stdout=subprocess.PIPE, text=True)
    assert root.stdout is not None
    child = psutil.Process(int(root.stdout.readline()))
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        Reaper({root.pid}).close()  # the pipe ends as it does when its owner is killed
        assert root.wait(timeout=60) == -9
        child.wait(timeout=60)
        assert bystander.poll() is None  # not one of Ray's: left alone
    finally:
        for process in (root, bystander):
            process.kill()
            process.wait()
