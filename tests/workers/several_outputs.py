"""The digits model returning several outputs, as a detector returns boxes, landmarks and
probabilities: a tuple of three, and a dict of them."""

from __future__ import annotations

import torch
from torch import nn


class ThreeOutputs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        from experiments.digits.model import build_model

        self.model = build_model()

    def heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        logits = self.model(x)
        return logits, logits.softmax(dim=-1), logits.amax(dim=-1, keepdim=True)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.heads(x)


class NamedOutputs(ThreeOutputs):
    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:  # type: ignore[override]
        logits, probabilities, best = self.heads(x)
        return {"logits": logits, "probabilities": probabilities, "best": best}


def three_outputs() -> nn.Module:
    return ThreeOutputs().eval()


def named_outputs() -> nn.Module:
    return NamedOutputs().eval()
