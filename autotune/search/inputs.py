"""What a coordinator is given besides its parts: what is tuned, and where."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from autotune.core.contract import HardwareProfile, ModelInfo, Workload
from autotune.requests.request import TuningRequest
from autotune.space.search_space import EffectiveSpace


@dataclass(frozen=True)
class Tuning:
    """What is tuned, and where: the request and what was learnt before the search."""

    request: TuningRequest
    workload: Workload
    model_info: ModelInfo
    space: EffectiveSpace
    profile: HardwareProfile
    artifact_dir: Path
