"""autotune: hardware-aware tuning of ML models.

This package is the control plane. Importing it stays cheap: torch, onnxruntime, Ray and
MLflow are imported only where they are used.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from workers.predictor import Predictor

__version__ = "0.1.0"
__all__ = ["load"]


def load(tuned_file: str | Path, python_path: Sequence[str] = ()) -> Predictor:
    """The tuned model of a tuned file, ready to call, run as it was measured: its engine,
    precision, threads, engine options and batch size (`predictor.predict(inputs)`). A torch
    artifact imports its model's entry point from `python_path` and `sys.path`. Where the
    file lists several kinds of node, the one this machine is (its fingerprint) is loaded;
    where that kind's study gave no tuned configuration, the error says how it ended
    (`NoFeasibleConfiguration` where it was infeasible, `Interrupted` where it was stopped,
    else `AutotuneError`, each with the study's reason)."""
    from autotune.execution.local import load_tuned

    return load_tuned(tuned_file, python_path)
