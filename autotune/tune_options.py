"""What a tuning is told besides its request: the command line's overrides, where its
outputs go, and what it tells while it runs."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.execution import registry
from autotune.execution.config import BaseExecutorConfig
from autotune.execution.ray_cluster import Workers
from autotune.kinds_at_once import KindDisplay
from autotune.search.trackers import check_trackers
from autotune.search.warm_start import WarmStart
from autotune.strategies import DEFAULT_STRATEGY


@dataclass
class TuneOptions:
    trials: int | None = None
    timeout_s: float | None = None
    storage: str | None = None
    study: str | None = None
    tracking_uri: str | None = None
    experiment: str | None = None
    ray_address: str | None = None
    # Trial slots on each kind of node, or 'auto': every slot the nodes hold.
    workers: Workers = 1
    # 'ray', 'inprocess' or an installed plugin's executor type (`executor_config` is what
    # they and `replay` configure)
    executor: str = "ray"
    # The kind of node to tune for where the slots span several (`select_kinds`); replaces
    # the request's `target`.
    target: str | None = None
    seed: int | None = None
    # The tuned file (default: `tuned.yaml` in `out_dir`).
    out: Path | None = None
    # Where the optimized model (`model/`) goes, and, on a database MLflow store, a new
    # experiment's artifacts (`mlruns/`) unless `mlflow_artifacts` or a SQLite store's file
    # says otherwise; default: beside `out`, else autotune-out/<study>. With several kinds
    # of node, each kind's outputs go in a directory of its own (`output_dirs`).
    out_dir: Path | None = None
    # The artifact root of a new MLflow experiment on a database store (a directory or a
    # URI); the service's lies under its data directory.
    mlflow_artifacts: str | Path | None = None
    stop: threading.Event | None = None
    stale_after_s: float | None = None
    # A previous study to start from (`autotune.search.warm_start.load_warm_start`), and the tuned
    # document it gave: its configuration is measured head to head with the new choice, and
    # the paired ratios go into the tuned file's `previous` and MLflow's comparison.json.
    warm_start: WarmStart | None = None
    previous_tuned: dict[str, Any] | None = None
    # Trials answered from this recorded table (`autotune.execution.replay`) instead of measured.
    replay: Path | None = None
    space: str | None = None  # a space file in place of the request's search_space
    sampler: str = DEFAULT_STRATEGY
    # Trackers told the study's events beside MLflow, by name (`autotune.search.trackers`).
    trackers: tuple[str, ...] = ()
    # False: nothing is tracked in MLflow (benchmarks and tests that never read it)
    track: bool = True
    # Told a line for the user (a study is resumed), and each phase after the search (the
    # finalists' head-to-head, the export).
    on_note: Callable[[str], None] | None = None
    on_phase: Callable[[str], None] | None = None
    # Where several kinds of node are tuned at once: each kind's display, given the kind's
    # label; without it, a kind's notes and phases go to on_note and on_phase with its label
    # in front, and its trials to the progress given.
    kind_display: Callable[[str], KindDisplay] | None = None

    def __post_init__(self) -> None:
        self.executor_config()  # bad executor flags are refused before anything runs
        check_trackers(self.trackers)

    def executor_config(self) -> BaseExecutorConfig:
        """Where the trials run, as the executor flags configure it."""
        return registry.executor_config(self.executor, self.ray_address, self.workers, self.replay)

    def overrides(self) -> dict[str, Any]:
        pairs = {
            "budget.trials": self.trials,
            "budget.timeout_s": self.timeout_s,
            "storage": self.storage,
            "tracking.uri": self.tracking_uri,
            "tracking.experiment": self.experiment,
            "target": self.target,
        }
        return {k: v for k, v in pairs.items() if v is not None}
