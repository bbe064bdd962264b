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
    artifact imports its model's entry point from `python_path` and `sys.path`."""
    from autotune.errors import RequestError
    from autotune.tuned import read_tuned
    from workers.predictor import load_predictor

    path = Path(tuned_file)
    tuned = read_tuned(path)
    artifact = Path(tuned.artifact)
    if not artifact.is_absolute():
        artifact = path.parent / artifact
    if artifact.suffix == ".json":
        rule = "must be a model (a replayed study exports none)"
        raise RequestError("artifact", rule, str(artifact))
    return load_predictor(str(artifact.parent), python_path)
