"""What the Ray executor keeps of each slot and each running trial, and the small rules about
them: where a slot's cores lie, when a trial is overdue, how many GPUs a trial spans, what a
trial whose task failed reports."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from autotune.core.contract import TrialResult, TrialSpec, TrialStatus
from autotune.core.tracebacks import traceback_tail

# Ray colours the first line of a remote traceback for a terminal.
_TERMINAL_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


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


def failed_task(
    spec: TrialSpec, status: TrialStatus, what: str, error: BaseException, message: str
) -> TrialResult:
    """A trial whose Ray task failed outside the worker's own handling. The reason is one line
    (`what: Type: the message's first line`); the traceback is Ray's text of the error, its
    tail: for a task that raised, the remote traceback."""
    first_line = (message.splitlines() or [""])[0]
    result = TrialResult.for_spec(spec, status, f"{what}: {type(error).__name__}: {first_line}")
    text = _TERMINAL_ESCAPE.sub("", str(error)).strip()
    return result.model_copy(update={"traceback": traceback_tail(text) if text else None})


def marked(result: TrialResult, interrupted: str | None) -> TrialResult:
    if interrupted is None:
        return result
    return result.model_copy(update={"interrupted": interrupted})


def shard_degree(spec: TrialSpec) -> int:
    return max(
        int(spec.config.get("shard.tensor_parallel", 1)),
        int(spec.config.get("shard.data_parallel", 1)),
    )
