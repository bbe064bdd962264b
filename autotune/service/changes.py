"""What a watch's check found, in words (the server's log, `autotune status` and
`autotune watches` say it alike), and where a job's MLflow run is.

A change is `{"model": {"what", "old", "new"} | None, "hardware": {"old", "new"} | None}`;
`old` is None on a watch's first check, which only records what it found.
"""

from __future__ import annotations

import re
from typing import Any

# What a model reference names, by its field.
MODEL_KINDS = {
    "weights": "model weights",
    "onnx": "model file",
    "hf": "model directory",
    "registered": "registered model",
}
_HEX = re.compile(r"[0-9a-f]{16,}")
SHOWN_HEX = 8


def model_kind(model: Any) -> str:
    """'model weights', 'model file', ... for a request's `model` mapping."""
    fields = model if isinstance(model, dict) else {}
    return next((kind for field, kind in MODEL_KINDS.items() if field in fields), "model")


def short(value: str | None) -> str:
    """A sha256 or fingerprint cut to its first characters; a version ('name/3') whole."""
    if value is None:
        return "none"
    return value[:SHOWN_HEX] + "…" if _HEX.fullmatch(value) else value


def describe_change(change: dict[str, Any]) -> str:
    """'model weights changed (3f2a01bc… → 91c0d2e4…)', '… and hardware changed (…)'; for
    a first check, 'first check: model weights 3f2a01bc… and hardware 91c0d2e4… recorded'."""
    model, hardware = change.get("model"), change.get("hardware")
    if (model is None or model["old"] is None) and (hardware is None or hardware["old"] is None):
        found = [f"{model['what']} {short(model['new'])}"] if model else []
        found += [f"hardware {short(hardware['new'])}"] if hardware else []
        return f"first check: {' and '.join(found)} recorded"
    parts = []
    if model is not None:
        parts.append(f"{model['what']} changed ({short(model['old'])} → {short(model['new'])})")
    if hardware is not None:
        parts.append(f"hardware changed ({short(hardware['old'])} → {short(hardware['new'])})")
    return " and ".join(parts) or "unchanged"


def mlflow_run(mlflow: dict[str, Any]) -> dict[str, Any]:
    """The run's id and experiment, and its address where the tracking store is a server
    whose address is shown (the service shows its own stores' as their scheme only)."""
    from autotune.tracking.view import run_link

    uri = str(mlflow.get("tracking_uri", ""))
    link = None
    if uri.startswith(("http://", "https://")) and "…" not in uri:
        link = f"{uri.rstrip('/')}/{run_link(mlflow['experiment_id'], mlflow['run_id'])}"
    return {"run_id": mlflow["run_id"], "experiment_id": mlflow["experiment_id"], "link": link}
