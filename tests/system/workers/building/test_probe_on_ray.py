"""The probe on a real Ray node whose processes cannot import OpenVINO, which the machine has
installed (marker: integration): the node's space offers neither OpenVINO nor its options,
and the software versions its results record name no OpenVINO."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.ray_nodes import LocalRayCluster, head_only

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# The software versions a task placed on the node records (a result's provenance).
VERSIONS_ON_THE_NODE = """
import json, sys
import ray
from autotune.core.artifacts import software_versions
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
print(json.dumps(ray.get(ray.remote(num_cpus=1)(software_versions).remote())))
"""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalRayCluster]:
    if importlib.util.find_spec("openvino") is None:
        pytest.skip("OpenVINO is not installed: a node without it would hide nothing")
    with head_only(tmp_path / "nodes") as started:  # the node below runs every task
        started.add_node("without-openvino", [0], hide=("openvino",))
        yield started


def run(cluster: LocalRayCluster, cwd: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env={**cluster.env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_a_node_that_cannot_import_openvino_lists_and_records_none_of_it(
    cluster: LocalRayCluster, tmp_path: Path
) -> None:
    shown = run(cluster, tmp_path, "-m", "autotune", "space", "--ray-address", cluster.address,
                "--json")  # fmt: skip
    (kind,) = json.loads(shown)
    assert "openvino" not in kind["profile"]["engines"]
    names = {d["name"] for d in kind["space"]["dimensions"]}
    assert not {name for name in names if name.startswith("runtime.ov_")}, names
    engines = {v for d in kind["space"]["dimensions"] if d["name"] == "runtime.engine"
               for v in d["values"]}  # fmt: skip
    assert engines and "openvino" not in engines

    versions = json.loads(run(cluster, tmp_path, "-c", VERSIONS_ON_THE_NODE, cluster.address))
    assert "numpy" in versions and "openvino" not in versions
