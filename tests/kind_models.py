"""A model whose speed depends on the kind of node it runs on: each call sleeps where
OpenVINO cannot be imported, so that a latency bound only the other kind can meet makes
one kind of a test cluster infeasible."""

from __future__ import annotations

import importlib.util
import time

import torch
from torch import nn

# Well above the tests' latency bound, however fast or busy the machine.
SLOW_CALL_S = 0.06


class SleepsFirst(nn.Module):
    def __init__(self, model: nn.Module, sleep_s: float) -> None:
        super().__init__()
        self.model = model
        self.sleep_s = sleep_s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.sleep_s:
            time.sleep(self.sleep_s)
        return self.model(x)


def _has_openvino() -> bool:
    try:
        return importlib.util.find_spec("openvino") is not None
    except ModuleNotFoundError:  # hidden on a test node (tests.ray_nodes)
        return False


def slow_without_openvino() -> nn.Module:
    from experiments.digits.model import build_model

    return SleepsFirst(build_model(), 0.0 if _has_openvino() else SLOW_CALL_S).eval()
