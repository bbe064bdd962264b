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
    file lists several kinds of node, the one this machine is (its fingerprint) is loaded."""
    from autotune.errors import RequestError
    from autotune.tuned import is_index, read_tuned, tuned_for_kind
    from workers.predictor import load_predictor

    path = Path(tuned_file)
    if is_index(path):
        from workers.probe import probe

        path = tuned_for_kind(path, probe().fingerprint)
    tuned = read_tuned(path)
    artifact = Path(tuned.artifact)
    if not artifact.is_absolute():
        artifact = path.parent / artifact
    if artifact.suffix == ".json":
        rule = "must be a model (a replayed study exports none)"
        raise RequestError("artifact", rule, str(artifact))
    return load_predictor(str(artifact.parent), python_path)
