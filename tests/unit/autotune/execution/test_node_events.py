"""How a node that leaves or joins is told, in autotune's words."""

from __future__ import annotations

import pytest

from autotune.execution.base import NodeEvent, describe_wait

NODE = "4a63f0c2e1d94b7a"
KIND = "0f27aa9c31b0e4d2"


def event(**changes: object) -> NodeEvent:
    fields: dict[str, object] = {
        "change": "left",
        "node_id": NODE,
        "kind": KIND,
        "cpus": 1,
        "gpus": 0,
        "nodes_alive": 1,
        "nodes_before": 2,
        "wait_s": 600.0,
    }
    return NodeEvent(**{**fields, **changes})  # type: ignore[arg-type]


def test_a_node_that_left_during_a_trial_names_it_and_where_it_runs_again() -> None:
    assert event(trial=7).describe() == (
        "node 4a63… (kind 0f27…, 1 core) left during trial 7: re-running it elsewhere; "
        "1 of 2 nodes of this kind remain"
    )


def test_the_last_node_of_a_kind_says_how_long_the_study_waits() -> None:
    told = event(nodes_alive=0, nodes_before=1, trial=3, cpus=8, gpus=2).describe()
    assert told == (
        "node 4a63… (kind 0f27…, 8 cores, 2 GPUs) left during trial 3; 0 of 1 nodes of this "
        "kind remain; waiting up to 10 min for one; its trial runs again there"
    )


def test_a_node_that_left_between_trials_and_one_that_joined() -> None:
    assert event().describe() == (
        "node 4a63… (kind 0f27…, 1 core) left; 1 of 2 nodes of this kind remain"
    )
    joined = event(change="joined", nodes_alive=2, nodes_before=1).describe()
    assert joined == "node 4a63… (kind 0f27…, 1 core) joined; 2 node(s) of this kind now run trials"


@pytest.mark.parametrize(
    ("seconds", "said"), [(5, "5 s"), (90, "1.5 min"), (600, "10 min"), (7200, "2 h")]
)
def test_waits_are_said_in_a_person_s_unit(seconds: float, said: str) -> None:
    assert describe_wait(seconds) == said
