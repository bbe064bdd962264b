"""The digits model with slightly changed weights: the same architecture, another model."""

from __future__ import annotations

import torch

from experiments.digits.model import build_model as build_digits_model


def build_model() -> torch.nn.Module:
    model = build_digits_model()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(1e-3 * torch.randn(parameter.shape, generator=generator))
    return model
