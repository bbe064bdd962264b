"""A Ray cluster of several nodes on this machine, for the tests of heterogeneous clusters:
a head that runs no trials, and worker nodes each pinned to its own cores (`taskset`), with
its own labels and its own packages (a `sitecustomize.py` that hides a package).

Every node is a `ray start --block` child in a process group of its own, stopped by its
process group: never `ray stop`, which would stop every Ray process on the machine."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import psutil
import pytest

from tests.conftest import REPO
from tests.ports import free_port
from tests.process_groups import end_group, end_groups

RAY = Path(sys.executable).with_name("ray")

# Put first on a node's PYTHONPATH, it makes these packages unimportable there.
HIDE_PACKAGES = """
import sys


class _Hidden:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {hidden!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}} on this node", name=name)
        return None


sys.meta_path.insert(0, _Hidden())
"""


class LocalRayCluster:
    def __init__(self, workdir: Path, token_auth: bool = True) -> None:
        self.workdir = workdir
        # Ray's socket paths must stay short: under /tmp, not pytest's deep tmp_path.
        self.temp_dir = Path(tempfile.mkdtemp(prefix="at-ray-", dir="/tmp"))
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_TMPDIR": str(self.temp_dir)}
        # Token authentication on, with this cluster's own token: the driver must present it.
        # Off for a test that joins from its own process, whose Ray read its settings (with no
        # token) when an earlier test imported it.
        if token_auth:
            self.env["RAY_AUTH_MODE"] = "token"
            self.env["RAY_AUTH_TOKEN"] = uuid.uuid4().hex + uuid.uuid4().hex
        else:
            self.env["RAY_AUTH_MODE"] = "disabled"
        self._processes: list[subprocess.Popen[bytes]] = []
        self._named: dict[str, subprocess.Popen[bytes]] = {}

    def start_head(self, num_cpus: int = 0) -> None:
        """The head: it schedules the driver's tasks; by default it offers no CPU to trials."""
        self._start(
            "head",
            [
                "--head",
                f"--port={self.port}",
                f"--temp-dir={self.temp_dir}",
                f"--num-cpus={num_cpus}",
                "--include-dashboard=false",
            ],
            self.env,
        )
        self._wait_healthy()

    def add_node(
        self,
        name: str,
        cores: list[int],
        labels: dict[str, str] | None = None,
        hide: tuple[str, ...] = (),
    ) -> None:
        """A worker node pinned to `cores`, offering one CPU a core, with `labels`, and with
        the packages in `hide` unimportable in its processes."""
        env = dict(self.env)
        if hide:
            site = self.workdir / f"site-{name}"
            site.mkdir()
            (site / "sitecustomize.py").write_text(HIDE_PACKAGES.format(hidden=set(hide)))
            env["PYTHONPATH"] = f"{site}{os.pathsep}{REPO}"
        args = [f"--address={self.address}", f"--num-cpus={len(cores)}"]
        if labels:
            args.append("--labels=" + ",".join(f"{k}={v}" for k, v in labels.items()))
        taskset = ["taskset", "-c", ",".join(str(c) for c in cores)]
        before = self._alive_nodes()
        self._start(name, args, env, taskset)
        self._wait_for_nodes(before + 1)

    def _start(
        self, name: str, args: list[str], env: dict[str, str], prefix: list[str] | None = None
    ) -> None:
        log = (self.workdir / f"ray-{name}.log").open("wb")
        command = [
            *(prefix or []),
            str(RAY),
            "start",
            "--block",
            "--disable-usage-stats",
            "--node-ip-address=127.0.0.1",  # the cluster stays on the loopback
            *args,
        ]
        process = subprocess.Popen(
            command,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, which stop() kills
        )
        log.close()
        self._processes.append(process)
        self._named[name] = process

    def kill_node(self, name: str) -> None:
        """The node gone at once, as a machine that is switched off or preempted: SIGKILL to
        every process it started. Ray puts each worker in a process group of its own, so the
        node's group (its raylet, its object store) is not enough: a worker outside it would
        go on, and could finish its task and answer the driver after its node was "gone"."""
        process = self._named.pop(name)
        self._processes.remove(process)
        _kill(self._processes_of(process))
        end_group(process)

    def runs_task(self, name: str, task: str) -> bool:
        """Whether one of the node's workers is inside `task` (`"TrialWorker.run"`): Ray titles
        a worker `ray::<class>.<method>` while it runs that method, `ray::<class>` between."""
        titles = []
        for worker in self._processes_of(self._named[name]):
            with suppress(psutil.NoSuchProcess):
                titles.append((worker.cmdline() or [""])[0])
        return f"ray::{task}" in titles

    @staticmethod
    def _processes_of(process: subprocess.Popen[bytes]) -> list[psutil.Process]:
        try:
            return psutil.Process(process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def _check(self, code: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", code],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def _alive_nodes(self) -> int:
        code = (
            f"import ray; ray.init(address={self.address!r}, logging_level='ERROR', "
            "log_to_driver=False); print(sum(n['Alive'] for n in ray.nodes()))"
        )
        done = self._check(code)
        return int(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else -1

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + 120
        check = [str(RAY), "health-check", "--address", self.address]
        while subprocess.run(check, env=self.env, capture_output=True, timeout=60).returncode:
            self._fail_if_exited()
            if time.monotonic() > deadline:
                pytest.fail(f"the Ray head is not healthy after 120 s: {self._logs()}")
            time.sleep(1)

    def _wait_for_nodes(self, count: int) -> None:
        deadline = time.monotonic() + 120
        while self._alive_nodes() < count:
            self._fail_if_exited()
            if time.monotonic() > deadline:
                pytest.fail(f"{count} Ray nodes are not alive after 120 s: {self._logs()}")
            time.sleep(1)

    def _fail_if_exited(self) -> None:
        for process in self._processes:
            if process.poll() is not None:
                pytest.fail(f"ray start exited with {process.returncode}: {self._logs()}")

    def _logs(self) -> str:
        return "\n".join(p.read_text()[-1500:] for p in sorted(self.workdir.glob("ray-*.log")))

    def stop(self) -> None:
        """The nodes' process groups: SIGTERM, then SIGKILL to what is left, workers (in
        groups of their own) included."""
        started = [p for process in self._processes for p in self._processes_of(process)]
        end_groups(reversed(self._processes), grace_s=3.0)
        _kill(started)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def _kill(processes: list[psutil.Process]) -> None:
    """SIGKILL to each of `processes` that is still there."""
    for process in processes:
        with suppress(psutil.NoSuchProcess):
            process.kill()


@contextmanager
def head_only(workdir: Path, token_auth: bool = True) -> Iterator[LocalRayCluster]:
    """A cluster whose head runs no trials, its logs under `workdir` (made here), stopped
    afterwards whatever happened: the caller adds its nodes."""
    workdir.mkdir(parents=True, exist_ok=True)
    cluster = LocalRayCluster(workdir, token_auth)
    try:
        cluster.start_head()
        yield cluster
    finally:
        cluster.stop()


def autotune(cluster: LocalRayCluster, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m autotune` with these arguments, from `cwd`, in the cluster's environment."""
    return subprocess.run(
        [sys.executable, "-m", "autotune", *args],
        cwd=cwd,
        env={**cluster.env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=900,
    )
