"""The reaper of a local Ray: once the process that started Ray is gone (its pipe ends), the
processes Ray started, and theirs, are killed; so are the processes of its process group that
began after the reaper and that the raylet left to init when it died first."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from autotune.execution.ray_reaper import Reaper, strays
from tests.conftest import REPO
from tests.process_groups import live_processes_of, session_ends

# A root that starts a child of its own, as the raylet starts its agents.
ROOT = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
    "print(child.pid, flush=True)\n"
    "time.sleep(600)\n"
)
# Sleeps once it has said so: a process seen saying it is older than what is started next.
SLEEPER = "import time; print(flush=True); time.sleep(600)"

# A coordinator whose raylet dies before it, as Ray's does (it shares its coordinator's fate),
# and which is killed before it has told its reaper of any process: the raylet's agent is left
# to init. Its helper, started before the reaper, is not one of Ray's.
KILLED_COORDINATOR = f"""
import os, signal, subprocess, sys
from autotune.execution.ray_reaper import Reaper, strays
helper = subprocess.Popen([sys.executable, '-c', {SLEEPER!r}], stdout=subprocess.PIPE)
helper.stdout.readline()
reaper = Reaper()
raylet = subprocess.Popen([sys.executable, '-c', {ROOT!r}], stdout=subprocess.PIPE, text=True)
agent = raylet.stdout.readline().strip()
print(helper.pid, agent, flush=True)
raylet.kill()
raylet.wait()
os.kill(os.getpid(), signal.SIGKILL)
"""

# A coordinator killed once it has told its reaper of its raylet: the raylet and its agent
# end with it, the reaper (a child made after `before` was listed) going on to kill them.
KILLED_AFTER_FOLLOW = f"""
import os, signal, subprocess, sys
from autotune.execution.ray_reaper import Reaper, children
before = children()
reaper = Reaper()
raylet = subprocess.Popen([sys.executable, '-c', {ROOT!r}], stdout=subprocess.PIPE, text=True)
agent = raylet.stdout.readline().strip()
reaper.follow(children() - before)
print(raylet.pid, agent, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""

# A coordinator killed as `ray.init` returns, before anything after it in RayCluster ran.
KILLED_AS_RAY_STARTS = """
import os, signal
import ray
from autotune.execution.ray_cluster import RayCluster

started = ray.init
def init_then_killed(*args, **kwargs):
    started(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)
ray.init = init_then_killed
RayCluster()
"""
# A coordinator killed once its Ray is up and its nodes surveyed (tasks have run).
KILLED_ONCE_RAY_IS_UP = """
import os, signal
from autotune.execution.ray_cluster import RayCluster

RayCluster()
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_the_roots_and_their_children_are_killed_when_the_pipe_ends() -> None:
    reaper = Reaper()
    root = subprocess.Popen([sys.executable, "-c", ROOT], stdout=subprocess.PIPE, text=True)
    assert root.stdout is not None
    child = psutil.Process(int(root.stdout.readline()))
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        reaper.follow({root.pid})
        reaper.close()  # the pipe ends as it does when its owner is killed
        assert root.wait(timeout=60) == -9
        child.wait(timeout=60)
        assert bystander.poll() is None  # this process's own child, not one of Ray's: left alone
    finally:
        for process in (root, bystander):
            process.kill()
            process.wait()


def test_a_group_led_by_a_process_started_since_is_not_strays() -> None:
    """A dead coordinator's number may lead the group of a process started after its reaper
    (pids wrap): that leader and its children are not the coordinator's strays."""
    since = psutil.Process().create_time()
    leader = subprocess.Popen(
        [sys.executable, "-c", ROOT], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert leader.stdout is not None
    child = psutil.Process(int(leader.stdout.readline()))
    try:
        assert strays(leader.pid, since) == []
    finally:
        child.kill()
        leader.kill()
        leader.wait()


def test_what_a_dead_raylet_left_to_init_is_killed_with_its_coordinator() -> None:
    coordinator = subprocess.Popen(
        [sys.executable, "-c", KILLED_COORDINATOR],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        start_new_session=True,  # a process group of its own, as `autotune tune` in a shell
    )
    assert coordinator.stdout is not None
    helper_pid, agent_pid = map(int, coordinator.stdout.readline().split())
    helper, agent = psutil.Process(helper_pid), psutil.Process(agent_pid)
    try:
        assert coordinator.wait(timeout=60) == -9
        agent.wait(timeout=10)  # the bound: gone within 10 s of the coordinator
        assert helper.is_running()  # older than the reaper: not Ray's
    finally:
        for process in (helper, agent):
            if process.is_running():
                process.kill()


def test_what_the_reaper_was_told_of_is_killed_with_its_coordinator() -> None:
    coordinator = subprocess.Popen(
        [sys.executable, "-c", KILLED_AFTER_FOLLOW],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        start_new_session=True,
    )
    assert coordinator.stdout is not None
    raylet, agent = (psutil.Process(int(pid)) for pid in coordinator.stdout.readline().split())
    try:
        assert coordinator.wait(timeout=60) == -9
        raylet.wait(timeout=10)
        agent.wait(timeout=10)
    finally:
        for process in (raylet, agent):
            if process.is_running():
                process.kill()


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize(
    "coordinator_script",
    [KILLED_AS_RAY_STARTS, KILLED_ONCE_RAY_IS_UP],
    ids=["as-ray-init-returns", "once-ray-is-up"],
)
def test_ray_started_here_ends_with_a_killed_coordinator(
    tmp_path: Path, coordinator_script: str
) -> None:
    """Killed as `ray.init` returns or later, the coordinator leaves a raylet that dies with
    it and agents that would outlive it by a minute or more: none is left 10 s later."""
    coordinator = subprocess.Popen(
        [sys.executable, "-c", coordinator_script],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # the session that holds its Ray's processes
    )
    try:
        assert coordinator.wait(timeout=300) == -9
        assert session_ends(coordinator.pid, within_s=10), live_processes_of(coordinator.pid)
    finally:
        for line in live_processes_of(coordinator.pid):
            with contextlib.suppress(psutil.NoSuchProcess):
                psutil.Process(int(line.split()[0])).kill()
