"""Trackers a user adds by name beside the study's MLflow record (`autotune tune --tracker
NAME`): each is an observer (`autotune.search.observers.Observer`) made for one study, told its
trials, its running front, its phases and its notes as the study runs. MLflow stays the
study's record (its runs, the tuned model's registration, the review); a tracker sends the same
events elsewhere.

A tracker is a factory registered by name (`register_tracker`) that takes the study's
`TrackerContext` and returns the observer. autotune's own (`jsonl`) and installed plugins'
are the `autotune.trackers` entry points (`autotune.core.plugins`), loaded at the end of this
module: autotune's first, so a plugin cannot take its name."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from autotune.core.errors import RequestError
from autotune.core.plugins import TRACKERS_GROUP, load_plugins
from autotune.core.registry import Registry
from autotune.search.observers import Observer


@dataclass(frozen=True)
class TrackerContext:
    """What a tracker knows of its study when it is made: the study's name and the directory
    its outputs go to (the tuned file's)."""

    study: str
    out_dir: Path


TrackerFactory = Callable[[TrackerContext], Observer]
TRACKERS: Registry[TrackerFactory] = Registry("tracker")


def register_tracker(name: str) -> Callable[[TrackerFactory], TrackerFactory]:
    """Register a tracker factory under `name`; a name already taken raises."""
    return TRACKERS.registers(name)


def tracker_names() -> list[str]:
    return list(TRACKERS)


def check_trackers(names: Iterable[str]) -> None:
    """Refuse a tracker name that is not registered, naming it and the registered ones."""
    for name in names:
        if name not in TRACKERS:
            raise RequestError("tracker", f"must be one of {tracker_names()}", name)


def make_trackers(names: Iterable[str], context: TrackerContext) -> list[Observer]:
    """One observer per named tracker, in the order named."""
    names = list(names)
    check_trackers(names)
    return [TRACKERS[name](context) for name in names]


load_plugins(TRACKERS_GROUP)
