"""A tuned model run in this process, as its trial measured it (`autotune.load`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from autotune.conclusion.tuned_file import is_index, read_tuned, tuned_for_kind
from autotune.core.errors import RequestError

if TYPE_CHECKING:
    from workers.predictor import Predictor


def load_tuned(tuned_file: str | Path, python_path: Sequence[str] = ()) -> Predictor:
    """The predictor of a tuned file's artifact; of an index of several kinds of node, the one
    this machine is (its fingerprint)."""
    from workers.predictor import load_predictor

    path = Path(tuned_file)
    if is_index(path):
        from workers.building.probe import probe

        path = tuned_for_kind(path, probe().fingerprint)
    tuned = read_tuned(path)
    artifact = Path(tuned.artifact)
    if not artifact.is_absolute():
        artifact = path.parent / artifact
    if artifact.suffix == ".json":
        rule = "must be a model (a replayed study exports none)"
        raise RequestError("artifact", rule, str(artifact))
    return load_predictor(str(artifact.parent), python_path)
