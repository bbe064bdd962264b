"""Model entry points that fail in real ways, for the executor's failure-outcome tests."""

from __future__ import annotations

import time

import torch
from torch import nn

# Floats each sample allocates inside the forward pass of `MemoryHog` (1 MiB).
HOG_FLOATS_PER_SAMPLE = 2**18


class MemoryHog(nn.Module):
    """Allocates 1 MiB per sample: small batches fit a capped worker, large ones do not."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(1, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        wide = x.flatten(1).mean(1, keepdim=True).expand(-1, HOG_FLOATS_PER_SAMPLE).clone()
        return self.head(wide.mean(1, keepdim=True))


class Sleeper(nn.Module):
    """Takes a second per call: any trial of it outlives a short trial timeout."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(1.0)
        return self.head(x.flatten(1))


def memory_hog() -> nn.Module:
    return MemoryHog().eval()


def sleeper() -> nn.Module:
    return Sleeper().eval()
