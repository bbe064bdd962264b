"""How a Ray cluster's nodes become kinds and trial slots (no Ray started: the planning is
plain data; the cluster itself is tested in test_heterogeneous_cluster.py), and what starting
Ray leaves of the process's signal handlers."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from autotune.core.contract import HardwareProfile, NodeInfo
from autotune.core.errors import RequestError
from autotune.execution.ray_cluster import CPU_NODE_SLOTS, group_kinds, parse_workers, plan_slots
from autotune.space.hardware import load_profile
from autotune.space.search_space import SPACES_DIR
from tests.conftest import REPO

PROFILES = SPACES_DIR / "profiles"


def node(name: str, cpus: int, gpus: int = 0) -> NodeInfo:
    return NodeInfo(node_id=name, hostname=name, cpus=cpus, gpus=gpus, slots=0)


def slots(nodes: list[NodeInfo]) -> dict[str, int]:
    return {n.node_id: n.slots for n in nodes}


def test_auto_gives_a_slot_to_each_gpu_and_a_set_number_to_each_cpu_node() -> None:
    planned = plan_slots([node("g8", 64, 8), node("g2", 16, 2), node("c", 32)], "auto")
    assert slots(planned) == {"g8": 8, "g2": 2, "c": CPU_NODE_SLOTS}


def test_a_number_of_slots_is_dealt_over_the_nodes_none_past_its_capacity() -> None:
    assert slots(plan_slots([node("a", 4), node("b", 4)], 3)) == {"a": 2, "b": 1}
    assert slots(plan_slots([node("a", 1), node("b", 4)], 4)) == {"a": 1, "b": 3}
    # A GPU node holds at most a slot a GPU, however many are asked for.
    assert slots(plan_slots([node("g", 16, 2)], 5)) == {"g": 2}


def test_a_slot_asks_for_its_nodes_share_and_the_space_for_the_smallest_slot() -> None:
    profile = load_profile(PROFILES / "a100.json")
    nodes = plan_slots([node("a", 8, 1), node("b", 8, 1)], "auto")
    (kind,) = group_kinds(nodes, [profile, profile], "auto")
    assert kind.slots == 2
    assert kind.cpus_per_slot == min(8, profile.cpu_cores)
    two = plan_slots([node("c", 4)], 2)
    (shared,) = group_kinds(two, [profile], 2)
    assert shared.cpus_per_slot == min(4, profile.cpu_cores) // 2


def test_nodes_of_one_fingerprint_pool_their_slots_and_unlike_ones_are_kinds_apart() -> None:
    a100, h200 = load_profile(PROFILES / "a100.json"), load_profile(PROFILES / "h200x8.json")
    renamed = a100.model_copy(update={"hostname": "other"})
    nodes = [node("a1", 16, 1), node("h", 128, 8), node("a2", 16, 1)]
    kinds = group_kinds(nodes, [a100, h200, renamed], "auto")
    assert [k.fingerprint for k in kinds] == [a100.fingerprint, h200.fingerprint]
    assert [n.node_id for n in kinds[0].nodes] == ["a1", "a2"] and kinds[0].slots == 2
    assert kinds[1].slots == 8


def test_a_node_that_lacks_an_engine_is_another_kind() -> None:
    profile: HardwareProfile = load_profile(PROFILES / "a100.json")
    without = profile.model_copy(update={"engines": []})
    with_openvino = profile.model_copy(update={"engines": ["openvino"]})
    assert without.fingerprint != with_openvino.fingerprint


def test_workers_is_a_positive_number_or_auto() -> None:
    assert parse_workers("auto") == "auto" and parse_workers("3") == 3
    for bad in ("0", "-1", "two", ""):
        with pytest.raises(RequestError) as info:
            parse_workers(bad)
        assert info.value.field == "workers"


KEEPS_HANDLERS = """
import signal
from autotune.execution.ray_cluster import RayCluster

def ours(signum, frame):
    pass

signal.signal(signal.SIGTERM, ours)
cluster = RayCluster(workers=1)
cluster.acquire()
try:
    print("kept" if signal.getsignal(signal.SIGTERM) is ours else "replaced")
finally:
    cluster.release()
"""


@pytest.mark.slow
def test_starting_ray_keeps_the_process_sigterm_handler() -> None:
    """`ray.init` installs a SIGTERM handler that kills the process's Ray, running trials
    and all, and aborts it: the process's own is put back."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-c", KEEPS_HANDLERS]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-1] == "kept"
