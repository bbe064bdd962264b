"""What a coordinator is given besides its parts: what is tuned, and the callbacks it
reports through."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.core.contract import HardwareProfile, ModelInfo, TrialResult, Workload
from autotune.requests.request import TuningRequest
from autotune.space.search_space import EffectiveSpace

# (trials counted, budget, the trial just told; None for the trials a resumed study found)
ProgressCallback = Callable[[int, int | None, TrialResult | None], None]
# A line for the user (a resumed study), or the phase the study is in after its search.
NoteCallback = Callable[[str], None]


def _ignore(*args: Any) -> None:
    return None


@dataclass(frozen=True)
class Tuning:
    """What is tuned, and where: the request and what was learnt before the search."""

    request: TuningRequest
    workload: Workload
    model_info: ModelInfo
    space: EffectiveSpace
    profile: HardwareProfile
    artifact_dir: Path


@dataclass
class Events:
    on_progress: ProgressCallback = _ignore
    on_note: NoteCallback = _ignore
    on_phase: NoteCallback = _ignore
