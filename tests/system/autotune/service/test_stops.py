"""Stops drain, always, and a job keeps its kind of node (markers: integration, slow), with
real processes on real local Ray clusters: `autotune serve` whose API surveyed the cluster
still drains on SIGTERM and exits 0; a SIGKILLed serve leaves no runner behind (nor the Ray
its runner started); a runner stopped before its baseline gives its job back, and the job
finishes later; a job accepted for one kind of node is retried on that kind only, after a
node of another kind joined."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from autotune.core.errors import RequestError
from autotune.results.leases import study_lock
from autotune.service.db import Database, Job
from autotune.service.jobs import JobStore
from autotune.service.settings import ServiceSettings
from autotune.service.submission import prepare_job
from autotune.service.tokens import create_token
from tests.conftest import REPO, postgres_databases, stored_trials
from tests.ray_nodes import LocalRayCluster, head_only
from tests.serve_process import alive, health, serving, tail
from tests.service_support import (
    FAST,
    principal,
    runner_processes,
    service_request,
    settings_for,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KIND_A = {"autotune.test/kind": "a"}
KIND_B = {"autotune.test/kind": "b"}
# How long after its serve was killed a runner may still be alive.
ORPHAN_S = 5.0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalRayCluster]:
    """A head that runs no trials and one worker node (kind a), on core 0."""
    with head_only(tmp_path / "nodes") as started:
        started.add_node("a", [0], KIND_A)
        yield started


@pytest.fixture
def databases() -> Iterator[list[str]]:
    with postgres_databases(3, "autotune_stops") as urls:
        yield urls


def cluster_settings(
    tmp_path: Path, databases: list[str], cluster: LocalRayCluster | None
) -> ServiceSettings:
    """A lease that outlasts the tests' patience: a job comes back because its runner gave
    it back, not because its lease ran out."""
    address = cluster.address if cluster is not None else None
    return settings_for(tmp_path, *databases, lease_s=600.0, executor="ray", ray_address=address)


def submit_over_http(process: Any, db: Database, request: dict[str, Any]) -> str:
    """A job submitted to serve's API: the API surveys the trial nodes for its kind."""
    headers = {"Authorization": f"Bearer {create_token(db, 'alice')}"}
    response = httpx.post(f"{process.url}/v1/jobs", json=request, headers=headers, timeout=300)
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def job_of(store: JobStore, job_id: str) -> Job:
    job = store.get_any(job_id)
    assert job is not None, job_id
    return job


def group(pgid: int) -> list[int]:
    """The live processes of a process group (zombies are not alive)."""
    members = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == pgid and alive(process):
                members.append(process.pid)
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    return members


def test_sigterm_drains_after_the_api_surveyed_the_cluster(
    tmp_path: Path, cluster: LocalRayCluster, databases: list[str]
) -> None:
    """The API's survey started Ray in the API process (Ray's crash handler took SIGTERM,
    and its shutdown left SIGTERM at the default: serve died of it, exit 143, its runners
    left working the queue): serve still drains and exits 0, with nothing of it left."""
    settings = cluster_settings(tmp_path, databases, cluster)
    db = Database(settings.db)
    store, log = JobStore(db), tmp_path / "serve.log"
    with serving(settings, log, runners=1, env=cluster.env) as process:
        wait_for(lambda: (health(process, log) or {}).get("status") == "ok", 120, "serve")
        job_id = submit_over_http(process, db, service_request(trials=40))
        wait_for(lambda: job_of(store, job_id).trials_done >= 1, 300, "a trial")

        process.send_signal(signal.SIGTERM)
        returncode = process.wait(timeout=300)

        assert returncode == 0, tail(log)
        assert "stopping the job runners" in tail(log)
        wait_for(
            lambda: not group(process.pid),
            60,
            "every process of serve's group to end",
            lambda: group(process.pid),
        )
    given_back = job_of(store, job_id)
    assert given_back.state == "queued", tail(log)
    assert given_back.lease_owner is None and given_back.attempts == 1
    db.close()


def test_a_killed_serve_leaves_no_runner_nor_its_ray(tmp_path: Path, databases: list[str]) -> None:
    """SIGKILL of serve (a crash, the OOM killer): its runner gives its job back and ends
    within seconds, and the Ray the runner started on this machine ends with it."""
    settings = cluster_settings(tmp_path, databases, None)
    db = Database(settings.db)
    store, alice, log = JobStore(db), principal(db), tmp_path / "serve.log"
    job, _ = store.submit(prepare_job(service_request(trials=40), alice, settings))
    with serving(settings, log, runners=1) as process:
        wait_for(lambda: job_of(store, job.id).trials_done >= 1, 300, "a trial", lambda: tail(log))
        owner = job_of(store, job.id).lease_owner
        assert owner is not None
        runner = psutil.Process(int(owner.split(":")[1]))
        assert runner in psutil.Process(process.pid).children()
        its_ray = runner.children(recursive=True)
        assert any(p.name().startswith("raylet") for p in its_ray), its_ray

        process.kill()
        process.wait(timeout=30)

        wait_for(lambda: not alive(runner), ORPHAN_S, "the runner to end with its serve")
        wait_for(
            lambda: not any(alive(p) for p in its_ray),
            60,
            "the runner's Ray to end",
            lambda: [(p.pid, p.name()) for p in its_ray if alive(p)],
        )
    given_back = job_of(store, job.id)
    assert given_back.state == "queued", tail(log)
    assert "gives its job back and exits" in tail(log)
    db.close()


def its_ray_starting(runner: int, settings: ServiceSettings, study: str) -> bool:
    """The runner is in `ray.init`: its Ray's GCS runs, and the rest starts."""
    try:
        return any(p.name() == "gcs_server" for p in psutil.Process(runner).children(True))
    except psutil.NoSuchProcess:
        return False


def its_study_opened(runner: int, settings: ServiceSettings, study: str) -> bool:
    """The study exists and holds no trial: the runner waits for the study's lock, to check
    what the study tunes, before it enqueues the baseline."""
    return study_trials(settings, study) == []


def study_trials(settings: ServiceSettings, study: str) -> list[Any] | None:
    """The study's trial records; None where the study (or its storage) was never made."""
    try:
        return stored_trials(settings.storage, study)
    except RequestError:
        return None


@pytest.mark.parametrize(
    ("executor", "moment"), [("ray", its_ray_starting), ("inprocess", its_study_opened)]
)
def test_a_runner_stopped_before_its_baseline_gives_its_job_back(
    tmp_path: Path, databases: list[str], executor: str, moment: Any
) -> None:
    """SIGTERM while the runner starts its Ray (Ray's own handler ended the runner, exit
    15, with the job held), or once its study is open but before the baseline (the job
    failed: 'the baseline (unmodified model) was never measured'): the job goes back to the
    queue, and the next runner resumes and finishes it."""
    settings = cluster_settings(tmp_path, databases, None)
    settings.executor = executor
    db = Database(settings.db)
    store, alice = JobStore(db), principal(db)
    job, _ = store.submit(prepare_job(service_request(trials=3), alice, settings))
    with runner_processes(settings, 1) as (first,):
        # Held by the test, the study's lock keeps the runner between opening its study and
        # enqueuing the baseline until the signal is sent.
        with study_lock(settings.storage, job.study_name):
            wait_for(
                lambda: moment(first.pid, settings, job.study_name) or not first.is_alive(),
                300,
                f"the moment to stop ({moment.__name__})",
            )
            os.kill(first.pid, signal.SIGTERM)
        first.join(300)
        assert first.exitcode == 0
    given_back = job_of(store, job.id)
    assert (given_back.state, given_back.error) == ("queued", None)
    assert given_back.trials_done == 0 and given_back.attempts == 1
    assert not any(t.state == "complete" for t in study_trials(settings, job.study_name) or [])

    with runner_processes(settings, 1):
        wait_for(
            lambda: job_of(store, job.id).state not in ("queued", "running"), 600, "the job to end"
        )
    done = job_of(store, job.id)
    assert done.state == "succeeded", done.error
    assert done.attempts == 2
    assert len([t for t in stored_trials(settings.storage, job.study_name) if t.counted]) == 3
    db.close()


def test_a_job_is_retried_on_the_kind_it_was_accepted_for(
    tmp_path: Path,
    cluster: LocalRayCluster,
    databases: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Accepted without a target while only kind a was up, the job is given back after a
    trial; a node of kind b joins; the retry tunes kind a only (it used to fail: 'target:
    must choose one kind')."""
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_TMPDIR"):
        monkeypatch.setenv(name, cluster.env[name])  # the runner processes join the cluster
    settings = cluster_settings(tmp_path, databases, cluster)
    db = Database(settings.db)
    store, log = JobStore(db), tmp_path / "serve.log"
    slow = {**FAST, "min_seconds": 0.3, "max_seconds": 0.5}
    with serving(settings, log, runners=0, env=cluster.env) as process:
        wait_for(lambda: (health(process, log) or {}).get("status") == "ok", 120, "serve")
        job_id = submit_over_http(process, db, service_request(trials=4, measurement=slow))
    accepted = job_of(store, job_id)
    assert "target" not in accepted.request
    kind_a = accepted.hardware_fingerprint

    with runner_processes(settings, 1) as (first,):
        wait_for(lambda: job_of(store, job_id).trials_done >= 1, 300, "a trial")
        first.terminate()
        first.join(300)
    assert job_of(store, job_id).state == "queued"

    cluster.add_node("b", [1], KIND_B, hide=("openvino",))
    assert set(cluster_kinds(cluster, tmp_path)) - {kind_a}, "kind b is a kind of its own"
    with runner_processes(settings, 1):
        wait_for(
            lambda: job_of(store, job_id).state not in ("queued", "running"),
            600,
            "the retry to end",
        )
    done = job_of(store, job_id)
    assert done.state == "succeeded", done.error
    assert done.attempts == 2
    assert done.result is not None and done.result["hardware"]["fingerprint"] == kind_a
    measured = [t.provenance for t in stored_trials(settings.storage, done.study_name)]
    assert {p.hardware_fingerprint for p in measured if p is not None} == {kind_a}
    db.close()


def cluster_kinds(cluster: LocalRayCluster, cwd: Path) -> list[str]:
    """The fingerprints of the cluster's kinds of node, as `autotune space` lists them."""
    space = cwd / "space.yaml"
    space.write_text((REPO / "search_spaces" / "quick-cpu.yaml").read_text())
    done = subprocess.run(
        [sys.executable, "-m", "autotune", "space", "--space", str(space)]
        + ["--ray-address", cluster.address, "--json"],
        cwd=cwd,
        env={**cluster.env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [kind["fingerprint"] for kind in json.loads(done.stdout)]
