"""Two kinds of node tuned at once on a real Ray cluster (marker: integration): a head that
runs no trials and two worker nodes, one core each, one without OpenVINO (so another kind).
Each kind's study runs on its own node at the same time as the other's; one kind that no
configuration can serve is listed as infeasible beside the other's tuned file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from autotune.results.leases import schema_lock
from tests.conftest import REPO, SLOW_MEASUREMENT, digits_request
from tests.ray_nodes import LocalRayCluster, autotune, head_only

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SMALL = {"autotune.test/kind": "small"}
BIG = {"autotune.test/kind": "big"}
SPACE = {
    "name": "kinds-at-once",
    "dimensions": [
        {
            "name": "runtime.engine",
            "values": ["torch_eager", "onnxruntime"],
            "baseline": "torch_eager",
        },
        {"name": "runtime.threads", "values": [1], "baseline": 1},
        {"name": "batch.size", "values": [1, 8, 32], "baseline": 8},
        {"name": "precision.mode", "values": ["fp32"], "baseline": "fp32"},
    ],
}
# Torch eager only: the model's sleep on the small kind is in its Python code, which an
# exported ONNX graph would leave out.
EAGER_SPACE = {
    "name": "kinds-at-once-eager",
    "dimensions": [
        {"name": "runtime.engine", "values": ["torch_eager"], "baseline": "torch_eager"},
        {"name": "runtime.threads", "values": [1], "baseline": 1},
        {"name": "batch.size", "values": [8, 16, 32], "baseline": 8},
        {"name": "precision.mode", "values": ["fp32"], "baseline": "fp32"},
    ],
}
# Above any call of the digits CNN at these batch sizes, below the small kind's sleep.
LATENCY_BOUND_MS = 40.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRayCluster]:
    assert len(os.sched_getaffinity(0)) >= 2, "the two nodes need a core each"
    with head_only(tmp_path_factory.mktemp("nodes")) as started:
        started.add_node("small", [1], SMALL, hide=("openvino",))
        started.add_node("big", [0], BIG)
        yield started


def tune(cluster: LocalRayCluster, tmp_path: Path, space: dict[str, Any], **request: Any) -> Any:
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(space))
    path = tmp_path / "request.yaml"
    written = digits_request(tmp_path, search_space=str(tmp_path / "space.yaml"), **request)
    path.write_text(yaml.safe_dump(written))
    return autotune(cluster, tmp_path, "tune", str(path), "--ray-address", cluster.address)


def listed_kinds(tmp_path: Path) -> list[dict[str, Any]]:
    index = yaml.safe_load((tmp_path / "autotune-out" / "digits-test" / "tuned.yaml").read_text())
    kinds: list[dict[str, Any]] = index["kinds"]
    return kinds


def trial_spans(tmp_path: Path, study: str) -> list[tuple[datetime, datetime]]:
    """When each ended trial of a study started and ended, as its storage holds them."""
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    trials = optuna.load_study(study_name=study, storage=storage).trials
    return [
        (t.datetime_start, t.datetime_complete)
        for t in trials
        if t.datetime_start is not None and t.datetime_complete is not None
    ]


def study_names(tmp_path: Path) -> list[str]:
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    # Under the lock the coordinators take to create the storage's tables: Optuna creates
    # them on first use, and a look while a coordinator does the same fails.
    with schema_lock(storage):
        return sorted(s.study_name for s in optuna.get_all_study_summaries(storage))


def test_two_kinds_are_tuned_at_once_each_on_its_own_node(
    cluster: LocalRayCluster, tmp_path: Path
) -> None:
    done = tune(cluster, tmp_path, SPACE, budget={"trials": 4})
    assert done.returncode == 0, done.stderr[-3000:]

    first, second = study_names(tmp_path)
    spans = {name: trial_spans(tmp_path, name) for name in (first, second)}
    assert all(len(s) == 4 for s in spans.values()), spans
    overlapping = [
        (a, b)
        for a in spans[first]
        for b in spans[second]
        if a[0] < b[1] and b[0] < a[1]  # a started before b ended, and b before a ended
    ]
    assert overlapping, f"one study's trials all ran outside the other's: {spans}"

    kinds = listed_kinds(tmp_path)
    assert sorted(k["study"] for k in kinds) == [first, second]
    assert [k["outcome"] for k in kinds] == ["tuned", "tuned"]
    last = done.stdout.strip().splitlines()[-2:]
    for kind, line in zip(kinds, last, strict=True):
        assert kind["fingerprint"] in line and ": tuned: " in line, last


def on_a_machine_like(
    cluster: LocalRayCluster, node: str, core: int, code: str
) -> subprocess.CompletedProcess[str]:
    """Python on `core` with the packages of the test node `node`: its kind of machine."""
    site = cluster.workdir / f"site-{node}"
    path = f"{site}{os.pathsep}{REPO}" if site.is_dir() else str(REPO)
    return subprocess.run(
        ["taskset", "-c", str(core), sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=300,
    )


LOAD = """
import autotune, numpy
from experiments.digits.model import eval_data
try:
    with autotune.load({index!r}) as model:
        print("predicted", model.predict(eval_data()[0][:8]).shape)
except Exception as error:
    print(type(error).__name__, error)
"""


def test_an_infeasible_kind_is_listed_beside_the_other_kinds_tuned_file(
    cluster: LocalRayCluster, tmp_path: Path
) -> None:
    done = tune(
        cluster,
        tmp_path,
        EAGER_SPACE,
        model={"entry_point": "tests.kind_models:slow_without_openvino"},
        constraints={"max_accuracy_drop": 0.01, "max_latency_p95_ms": LATENCY_BOUND_MS},
        budget={"trials": 3},
    )
    assert done.returncode == 3, done.stderr[-3000:]

    index = tmp_path / "autotune-out" / "digits-test" / "tuned.yaml"
    assert index.is_file(), "no list of the kinds was written"
    kinds = {k["outcome"]: k for k in listed_kinds(tmp_path)}
    assert set(kinds) == {"tuned", "infeasible"}
    tuned, infeasible = kinds["tuned"], kinds["infeasible"]
    tuned_file = yaml.safe_load((index.parent / tuned["tuned"]).read_text())
    assert tuned_file["hardware"]["fingerprint"] == tuned["fingerprint"]
    assert "openvino" in tuned_file["hardware"]["engines"]
    assert "max_latency_p95_ms" in infeasible["reason"]
    bound = infeasible["constraints"]["max_latency_p95_ms"]
    assert bound["bound"] == LATENCY_BOUND_MS and bound["met"] is False
    assert bound["value"] > LATENCY_BOUND_MS

    last = done.stdout.strip().splitlines()[-2:]
    assert tuned["fingerprint"] in last[0] or tuned["fingerprint"] in last[1], last
    told = {line.split(": ")[1]: line for line in last}
    assert tuned["fingerprint"] in told["tuned"] and tuned["tuned"].split("/")[1] in told["tuned"]
    assert infeasible["fingerprint"] in told["infeasible"]
    assert "max_latency_p95_ms" in told["infeasible"]

    on_small = on_a_machine_like(cluster, "small", 1, LOAD.format(index=str(index)))
    assert on_small.stdout.startswith("NoFeasibleConfiguration"), on_small.stderr[-3000:]
    assert infeasible["fingerprint"] in on_small.stdout and "infeasible" in on_small.stdout
    on_big = on_a_machine_like(cluster, "big", 0, LOAD.format(index=str(index)))
    assert on_big.stdout.startswith("predicted (8, 10)"), (on_big.stdout, on_big.stderr[-3000:])


def running_in_each(tmp_path: Path) -> bool:
    """Whether each kind's study has a trial running."""
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    if not (tmp_path / "study.db").exists():
        return False
    names = study_names(tmp_path)
    running = [
        any(t.state == optuna.trial.TrialState.RUNNING for t in trials)
        for trials in (optuna.load_study(study_name=n, storage=storage).trials for n in names)
    ]
    return len(running) == 2 and all(running)


def test_one_signal_stops_every_kinds_study_after_its_running_trials(
    cluster: LocalRayCluster, tmp_path: Path
) -> None:
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(SPACE))
    request = digits_request(
        tmp_path,
        search_space=str(tmp_path / "space.yaml"),
        budget={"trials": 8},
        measurement=SLOW_MEASUREMENT,
    )
    path = tmp_path / "request.yaml"
    path.write_text(yaml.safe_dump(request))
    process = subprocess.Popen(
        [sys.executable, "-m", "autotune", "tune", str(path), "--ray-address", cluster.address],
        cwd=tmp_path,
        env={**cluster.env, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 300
        while not running_in_each(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert running_in_each(tmp_path), "the two studies never ran a trial at the same time"
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=300)
    finally:
        process.kill()
    assert process.returncode == 130, stderr[-3000:]

    kinds = listed_kinds(tmp_path)
    assert [k["outcome"] for k in kinds] == ["interrupted", "interrupted"]
    assert all("stopped by SIGINT after the running trials" in k["reason"] for k in kinds)
    for name in study_names(tmp_path):
        states = {
            t.state
            for t in optuna.load_study(
                study_name=name, storage=f"sqlite:///{tmp_path / 'study.db'}"
            ).trials
        }
        assert optuna.trial.TrialState.RUNNING not in states, (name, states)
    last = stdout.strip().splitlines()[-2:]
    for kind, line in zip(kinds, last, strict=True):
        assert kind["fingerprint"] in line and ": interrupted: " in line, last
