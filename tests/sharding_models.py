"""The tensor-parallel tests' models, importable by the ranks that build them from their entry
points: a small MLP, the same with a second output that has no batch axis, and the inputs."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from tests.workers_support import REPO
from workers.building.sharding import ModelSource
from workers.building.variants import BuildContext
from workers.loading.workloads import torch_sha256

MLP_ENTRY_POINT = "tests.sharding_models:build_mlp"
INPUTS = np.random.default_rng(0).standard_normal((6, 12)).astype(np.float32)


def build_mlp() -> nn.Module:
    """The two-process tests' model (an entry point: the ranks build it themselves)."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(12, 32), nn.GELU(), nn.Linear(32, 5)).eval()


class TwoHeads(nn.Module):
    """The MLP's outputs, and beside them the batch's mean input (no batch axis)."""

    def __init__(self) -> None:
        super().__init__()
        self.mlp = build_mlp()

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"scores": self.mlp(x), "mean": x.mean(dim=0)}


def build_two_heads() -> nn.Module:
    return TwoHeads().eval()


def mlp_source(module: nn.Module, entry_point: str = MLP_ENTRY_POINT) -> ModelSource:
    return ModelSource(entry_point, (str(REPO),), torch_sha256(module), BuildContext(INPUTS[:2]))
