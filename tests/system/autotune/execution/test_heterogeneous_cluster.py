"""A Ray cluster whose nodes' hardware really differs from the coordinator's and from each
other's (marker: integration): the head runs the driver and no trials, each worker node is
pinned to its own cores, and one lacks OpenVINO. The space, the placement and the tuned
file must come from the worker nodes, never from the coordinator's machine."""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import digits_request, stored_trials
from tests.ray_nodes import LocalRayCluster, autotune, head_only

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SMALL = {"autotune.test/kind": "small"}
BIG = {"autotune.test/kind": "big"}
# Engines the coordinator's machine has and the small node lacks; thread counts it cannot use.
SPACE = {
    "name": "cluster-test",
    "dimensions": [
        {
            "name": "runtime.engine",
            "values": ["torch_eager", "onnxruntime", "openvino"],
            "baseline": "torch_eager",
        },
        {"name": "runtime.threads", "values": [1, 2], "at_most": "cpu_cores", "baseline": "max"},
        {"name": "batch.size", "values": [1, 8], "baseline": 1},
        {"name": "precision.mode", "values": ["fp32"], "baseline": "fp32"},
    ],
}


@pytest.fixture(autouse=True)
def _the_coordinator_has_what_the_small_node_lacks() -> None:
    assert importlib.util.find_spec("openvino") is not None, "the coordinator needs OpenVINO"
    assert len(os.sched_getaffinity(0)) >= 2, "the coordinator needs two cores"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalRayCluster]:
    with head_only(tmp_path / "nodes") as started:
        started.add_node("small", [1], SMALL, hide=("openvino",))
        yield started


def kinds(cluster: LocalRayCluster, cwd: Path) -> list[dict[str, Any]]:
    """`autotune space --ray-address --json`: each kind, its nodes and its space."""
    space = cwd / "space.yaml"
    done = autotune(
        cluster, cwd, "space", "--space", str(space), "--ray-address", cluster.address, "--json"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    shown: list[dict[str, Any]] = json.loads(done.stdout)
    return shown


def write_request(tmp_path: Path, trials: int) -> Path:
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(SPACE))
    path = tmp_path / "request.yaml"
    request = digits_request(tmp_path, search_space=str(space), budget={"trials": trials})
    path.write_text(yaml.safe_dump(request))
    return path


def values(kind: dict[str, Any], dimension: str) -> list[Any]:
    return next(d["values"] for d in kind["space"]["dimensions"] if d["name"] == dimension)


def node_ids(kind: dict[str, Any]) -> set[str]:
    return {node["node_id"] for node in kind["nodes"]}


def test_the_space_the_placement_and_the_tuned_file_are_the_worker_nodes(
    cluster: LocalRayCluster, tmp_path: Path
) -> None:
    path = write_request(tmp_path, trials=5)
    (small,) = kinds(cluster, tmp_path)
    assert small["profile"]["cpu_cores"] == 1
    assert "openvino" not in values(small, "runtime.engine")
    assert values(small, "runtime.threads") == [1]
    reasons = [e["reason"] for e in small["space"]["excluded"] if e["value"] == "openvino"]
    assert reasons, small["space"]["excluded"]

    done = autotune(
        cluster, tmp_path, "tune", str(path), "--ray-address", cluster.address, "--seed", "0"
    )
    assert done.returncode == 0, done.stderr[-3000:]

    tuned = yaml.safe_load((tmp_path / "autotune-out" / "digits-test" / "tuned.yaml").read_text())
    assert tuned["hardware"]["cpu_cores"] == 1
    assert tuned["hardware"]["fingerprint"] == small["fingerprint"]
    assert "openvino" not in tuned["hardware"]["engines"]
    trials = stored_trials(f"sqlite:///{tmp_path / 'study.db'}", "digits-test")
    assert len(trials) == 5
    for trial in trials:
        assert trial.config["runtime.engine"] != "openvino"
        assert trial.config["runtime.threads"] <= 1
        if trial.provenance is not None:  # measured, not answered without measuring
            assert trial.provenance.node_id in node_ids(small)
            assert trial.provenance.hardware_fingerprint == small["fingerprint"]
    assert any(t.provenance is not None for t in trials)


def test_each_kind_of_node_gets_its_own_study_and_a_target_keeps_one(
    cluster: LocalRayCluster, tmp_path: Path
) -> None:
    cluster.add_node("big", [0, 1], BIG)
    path = write_request(tmp_path, trials=3)
    shown = {kind["profile"]["cpu_cores"]: kind for kind in kinds(cluster, tmp_path)}
    assert set(shown) == {1, 2}
    small, big = shown[1], shown[2]
    assert "openvino" in values(big, "runtime.engine")
    assert "openvino" not in values(small, "runtime.engine")

    done = autotune(
        cluster, tmp_path, "tune", str(path), "--ray-address", cluster.address, "--seed", "0"
    )
    assert done.returncode == 0, done.stderr[-3000:]

    out = tmp_path / "autotune-out"
    index = yaml.safe_load((out / "digits-test" / "tuned.yaml").read_text())
    listed = {kind["fingerprint"]: kind for kind in index["kinds"]}
    assert set(listed) == {small["fingerprint"], big["fingerprint"]}
    for kind in (small, big):
        entry = listed[kind["fingerprint"]]
        assert entry["study"] == f"digits-test@{kind['fingerprint']}"
        tuned = yaml.safe_load((out / "digits-test" / entry["tuned"]).read_text())
        assert tuned["hardware"]["fingerprint"] == kind["fingerprint"]
        trials = stored_trials(f"sqlite:///{tmp_path / 'study.db'}", entry["study"])
        assert len(trials) == 3
        measured = [t.provenance for t in trials if t.provenance is not None]
        assert measured and {p.node_id for p in measured} <= node_ids(kind)
        assert {p.hardware_fingerprint for p in measured} == {kind["fingerprint"]}

    targeted = autotune(
        cluster,
        tmp_path,
        "tune",
        str(path),
        "--ray-address",
        cluster.address,
        "--target",
        "autotune.test/kind=small",
        "--study",
        "targeted",
        "--seed",
        "0",
    )
    assert targeted.returncode == 0, targeted.stderr[-3000:]
    trials = stored_trials(f"sqlite:///{tmp_path / 'study.db'}", "targeted")
    measured = [t.provenance for t in trials if t.provenance is not None]
    assert measured and {p.node_id for p in measured} <= node_ids(small)
    tuned = yaml.safe_load((out / "targeted" / "tuned.yaml").read_text())
    assert tuned["hardware"]["fingerprint"] == small["fingerprint"]
