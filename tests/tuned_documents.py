"""A tuned file's document as the model registry's tests give it to `register_tuned`."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def tuned_document(
    artifact_dir: Path, run_id: str, experiment_id: str = "1", **fields: Any
) -> dict[str, Any]:
    """What `register_tuned` reads of a tuned file: the artifact, the run, the headline,
    the configuration, its figures, the hardware and the study."""
    return {
        "artifact": str(artifact_dir / "model.onnx"),
        "mlflow": {"tracking_uri": "", "experiment_id": experiment_id, "run_id": run_id},
        "headline": {"text": "2.00× throughput (95% CI 1.90–2.10×); 6 paired rounds, quiet"},
        "config": {"runtime.engine": "onnxruntime", "batch.size": 8},
        "metrics": {"accuracy": 0.984444444, "latency_p95_ms": 0.0601321, "status": "ok"},
        "hardware": {"fingerprint": "cpu-abc", "cpu_model": "Xeon", "cpu_cores": 2, "gpus": []},
        "study": {"name": "digits", "trial_number": 7, "n_trials": 16},
        **fields,
    }
