"""A study on a Ray cluster whose nodes leave and join: real `ray start` nodes on this machine,
each pinned to its own core, killed as a preempted machine is (SIGKILL to its processes), and
the real CLI (marker: integration)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from autotune.core.errors import RequestError
from tests.conftest import REPO, SLOW_MEASUREMENT, digits_request, stored_trials
from tests.process_groups import end_group
from tests.process_output import ProcessOutput
from tests.ray_nodes import LocalRayCluster, head_only

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EXIT_NODES_GONE = 4


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalRayCluster]:
    with head_only(tmp_path / "nodes") as started:
        yield started


class Tuning:
    """`autotune tune` against the cluster, in a process group of its own, its output read
    as it comes."""

    def __init__(self, cluster: LocalRayCluster, tmp_path: Path, *args: str) -> None:
        self.storage = f"sqlite:///{tmp_path / 'study.db'}"
        command = [sys.executable, "-m", "autotune", "tune", str(tmp_path / "request.yaml")]
        command += ["--seed", "0", "--ray-address", cluster.address, *args]
        self.process = subprocess.Popen(
            command,
            cwd=tmp_path,
            env={**cluster.env, "PYTHONPATH": str(REPO)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.said = ProcessOutput(self.process)

    @property
    def output(self) -> str:
        return self.said.text

    def wait_inside_a_trial(
        self, counted_at_least: int, running_at_least: int = 1, nodes_at_least: int = 1
    ) -> None:
        """Until that many trials count and run (and so are measuring), measured on that many
        nodes: with as many running as there are slots, each node is inside a trial."""
        deadline = time.monotonic() + 300
        while not (
            counted(self.storage) >= counted_at_least
            and running(self.storage) >= running_at_least
            and len(measuring_nodes(self.storage)) >= nodes_at_least
        ):
            if time.monotonic() > deadline or self.process.poll() is not None:
                pytest.fail(f"no trial running after {counted_at_least}: {self.output[-3000:]}")
            time.sleep(0.2)

    def kill_inside_a_trial(self, cluster: LocalRayCluster, node: str) -> None:
        """Kill `node` while its worker runs a trial. A trial the study still shows running
        may have ended on its worker already (it is told afterwards), leaving the node idle."""
        deadline = time.monotonic() + 300
        while not cluster.runs_task(node, "TrialWorker.run"):
            if time.monotonic() > deadline or self.process.poll() is not None:
                pytest.fail(f"node {node} ran no trial: {self.output[-3000:]}")
            time.sleep(0.05)
        cluster.kill_node(node)

    def finish(self, within_s: float = 900) -> int:
        try:
            return self.said.finished(within_s)
        finally:
            end_group(self.process)


def write_request(tmp_path: Path, trials: int, node_wait_s: float) -> None:
    request = digits_request(tmp_path, budget={"trials": trials}, measurement=SLOW_MEASUREMENT)
    request["cluster"] = {"node_wait_s": node_wait_s}
    (tmp_path / "request.yaml").write_text(yaml.safe_dump(request))


def trials(storage: str) -> list[object]:
    try:
        return stored_trials(storage, "digits-test")
    except RequestError:  # the study is not there yet
        return []


def counted(storage: str) -> int:
    return sum(t.counted for t in trials(storage))  # type: ignore[attr-defined]


def running(storage: str) -> int:
    return sum(t.state == "running" for t in trials(storage))  # type: ignore[attr-defined]


def measuring_nodes(storage: str) -> set[str]:
    """The nodes that have measured a trial so far."""
    return {t.provenance.node_id for t in trials(storage) if t.measured and t.provenance}  # type: ignore[attr-defined]


def test_a_node_lost_mid_trial_is_rerun_on_the_other_node(
    cluster: LocalRayCluster, tmp_path: Path
) -> None:
    cluster.add_node("a", [0])
    cluster.add_node("b", [1])
    write_request(tmp_path, trials=10, node_wait_s=60)
    tuning = Tuning(cluster, tmp_path, "--workers", "2")
    # Both nodes have measured (the baseline may run alone first) and both are inside a trial.
    tuning.wait_inside_a_trial(counted_at_least=2, running_at_least=2, nodes_at_least=2)
    tuning.kill_inside_a_trial(cluster, "b")
    assert tuning.finish() == 0, tuning.output[-3000:]

    stored = trials(tuning.storage)
    states = [t.state for t in stored]  # type: ignore[attr-defined]
    assert sum(t.counted for t in stored) == 10  # type: ignore[attr-defined]
    assert "failed" not in states and "running" not in states, states
    interrupted = [t for t in stored if t.interrupted]  # type: ignore[attr-defined]
    assert len(interrupted) <= 1
    assert "left during trial" in tuning.output and "re-running it elsewhere" in tuning.output
    assert "1 of 2 nodes of this kind remain" in tuning.output
    # The trials that ended after the loss ran on the node that stayed (a repeat answered
    # from an earlier measurement carries that measurement's node: not counted here).
    ran = sorted((t for t in stored if t.measured and t.provenance), key=lambda t: t.ended_at)  # type: ignore[attr-defined]
    nodes = [t.provenance.node_id for t in ran]  # type: ignore[attr-defined]
    assert len(set(nodes)) == 2 and len(set(nodes[-3:])) == 1


def test_a_study_whose_only_node_left_waits_for_a_replacement(
    cluster: LocalRayCluster, tmp_path: Path
) -> None:
    cluster.add_node("a", [0])
    write_request(tmp_path, trials=6, node_wait_s=300)
    tuning = Tuning(cluster, tmp_path)
    tuning.wait_inside_a_trial(counted_at_least=2)
    tuning.kill_inside_a_trial(cluster, "a")
    tuning.said.wait_for("0 of 1 nodes of this kind remain; waiting up to 5 min", 120)
    cluster.add_node("replacement", [0])
    assert tuning.finish() == 0, tuning.output[-3000:]
    assert "joined" in tuning.output
    stored = trials(tuning.storage)
    assert sum(t.counted for t in stored) == 6  # type: ignore[attr-defined]
    assert sum(bool(t.interrupted) for t in stored) <= 1  # type: ignore[attr-defined]
    assert not [t for t in stored if t.state in ("failed", "running")]  # type: ignore[attr-defined]


def test_past_the_wait_the_study_stops_resumable(cluster: LocalRayCluster, tmp_path: Path) -> None:
    cluster.add_node("a", [0])
    write_request(tmp_path, trials=6, node_wait_s=5)
    tuning = Tuning(cluster, tmp_path)
    tuning.wait_inside_a_trial(counted_at_least=2)
    tuning.kill_inside_a_trial(cluster, "a")
    assert tuning.finish(within_s=300) == EXIT_NODES_GONE, tuning.output[-3000:]
    assert "came back within 5 s" in tuning.output and "resume" in tuning.output
    stored = trials(tuning.storage)
    done = sum(t.counted for t in stored)  # type: ignore[attr-defined]
    assert 2 <= done < 6
    assert not [t for t in stored if t.state == "running"]  # type: ignore[attr-defined]
    # The trial the node took with it is given back: the next run measures it first.
    assert [t for t in stored if t.state == "waiting"]  # type: ignore[attr-defined]

    cluster.add_node("replacement", [1])
    resumed = Tuning(cluster, tmp_path)
    assert resumed.finish() == 0, resumed.output[-3000:]
    assert counted(resumed.storage) == 6
