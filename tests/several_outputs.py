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


class WithClassPrior(ThreeOutputs):
    """Per-sample logits, and beside them a tensor without a batch axis (the classes' prior)."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[override]
        return self.model(x), self.model.classifier[-1].bias.softmax(dim=0)


class SequenceOfOne(ThreeOutputs):
    """Of one sample alone (its batch is hard-coded at one): logits [1, 10] and its feature map
    as a sequence with the batch on its second axis, [T, 1, C] (T = 16 positions, C = 32)."""

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:  # type: ignore[override]
        features = self.model.features(x)
        logits = self.model.classifier(features.reshape(1, -1))
        return {"logits": logits, "sequence": features.reshape(1, 32, 16).permute(2, 0, 1)}


def with_class_prior() -> nn.Module:
    return WithClassPrior().eval()


def sequence_of_one() -> nn.Module:
    return SequenceOfOne().eval()


def class_prior_alone() -> nn.Module:
    """Only the classes' prior: an output without a batch axis, and nothing else."""

    class PriorAlone(ThreeOutputs):
        def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
            return self.model.classifier[-1].bias.softmax(dim=0)

    return PriorAlone().eval()
