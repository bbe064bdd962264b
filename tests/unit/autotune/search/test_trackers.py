"""Trackers added by name: the registry refuses an unknown or taken name, and autotune's
`jsonl` tracker writes each event of a real search loop as one line of JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.core.errors import RequestError
from autotune.search.jsonl_tracker import EVENTS_FILE, JsonLinesTracker
from autotune.search.observers import Observer, Observers
from autotune.search.trackers import (
    TRACKERS,
    TrackerContext,
    check_trackers,
    make_trackers,
    register_tracker,
    tracker_names,
)
from autotune.tune_options import TuneOptions
from tests.coordinator_support import make_rig


def test_autotune_s_own_jsonl_tracker_is_registered_through_its_entry_point() -> None:
    assert "jsonl" in tracker_names()


def test_an_unknown_tracker_is_a_request_error_naming_the_field_and_the_registered_ones() -> None:
    with pytest.raises(RequestError) as refused:
        check_trackers(["jsonl", "wandb-typo"])
    assert refused.value.field == "tracker"
    assert "jsonl" in str(refused.value) and "wandb-typo" in str(refused.value)
    with pytest.raises(RequestError):
        TuneOptions(trackers=("wandb-typo",))


def test_a_taken_name_is_refused() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_tracker("jsonl")(lambda context: Observer())
    assert TRACKERS["jsonl"] is not None


def test_trackers_are_made_in_the_order_named_for_their_study(tmp_path: Path) -> None:
    made = make_trackers(["jsonl"], TrackerContext("digits", tmp_path))
    assert len(made) == 1 and isinstance(made[0], JsonLinesTracker)
    assert made[0].study == "digits" and made[0].path == tmp_path / EVENTS_FILE


def test_the_jsonl_tracker_writes_each_event_of_a_search_as_a_line(tmp_path: Path) -> None:
    (tracker,) = make_trackers(["jsonl"], TrackerContext("s", tmp_path / "out"))
    rig = make_rig(trials=3)
    rig.coordinator.told_to.observers.append(tracker)
    rig.search()
    Observers([tracker]).on_phase("head-to-head: the finalists")
    Observers([tracker]).on_note("done")

    lines = [json.loads(line) for line in (tmp_path / "out" / EVENTS_FILE).read_text().splitlines()]
    events = [line["event"] for line in lines]
    assert events[0] == "start" and events[-2:] == ["phase", "note"]
    trials = [line for line in lines if line["event"] == "trial"]
    assert [line["number"] for line in trials] == [0, 1, 2]
    assert [line["done"] for line in trials] == [1, 2, 3]
    assert all(line["study"] == "s" and line["status"] == "ok" for line in trials)
    assert all(line["config"] and "latency_p95_ms" in line["metrics"] for line in trials)
    fronts = [line for line in lines if line["event"] == "front"]
    assert fronts and set(fronts[-1]["trials"]) <= {0, 1, 2}
    assert lines[-2]["phase"] == "head-to-head: the finalists"
