"""What the Ray executor keeps of each slot and each running trial, and the small rules about
them: where a slot's cores lie, when a trial is overdue, how many GPUs a trial spans."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from autotune.core.contract import TrialResult, TrialSpec


@dataclass(frozen=True)
class Slot:
    """Where a slot's actor lives and what it asks of its node."""

    node_id: str
    cpus: int
    gpus: int


@dataclass
class Running:
    actor: Any
    spec: TrialSpec
    started: float
    borrowed_slots: list[int] | None = None  # a gang trial's slots, given back when it ends

    def overdue(self, now: float) -> bool:
        return self.spec.timeout_s is not None and now - self.started > self.spec.timeout_s

    def seconds_left(self, now: float) -> float | None:
        if self.spec.timeout_s is None:
            return None
        return max(0.0, self.started + self.spec.timeout_s - now)


def split_cores(slots: int) -> list[list[int] | None]:
    """Disjoint, contiguous core sets, one per slot (shared when there are fewer cores)."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < slots:
        return [None] * slots
    size = len(cores) // slots
    return [cores[i * size : (i + 1) * size] for i in range(slots)]


def timed_out(spec: TrialSpec) -> TrialResult:
    reason = f"still running after {spec.timeout_s:g} s; its worker was stopped"
    return TrialResult.for_spec(spec, "timeout", reason, float(spec.timeout_s or 0.0))


def marked(result: TrialResult, interrupted: str | None) -> TrialResult:
    if interrupted is None:
        return result
    return result.model_copy(update={"interrupted": interrupted})


def shard_degree(spec: TrialSpec) -> int:
    return max(
        int(spec.config.get("shard.tensor_parallel", 1)),
        int(spec.config.get("shard.data_parallel", 1)),
    )
