"""`make gpu-check` without a GPU: a dry run on the data plane and a short in-process study,
with none of the packages a bare GPU machine lacks (Ray, MLflow, the service's)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from experiments.gpu_check import DIGITS_PATHS, ENCODER_PATHS, integrate, not_run_on_hardware
from tests.conftest import REPO

SCRIPT = REPO / "experiments" / "gpu_check.py"
# What the GPU machine does not have: a module of these imported anywhere fails the run.
ABSENT = [
    "ray",
    "mlflow",
    "fastapi",
    "uvicorn",
    "starlette",
    "apscheduler",
    "psycopg",
    "codecarbon",
    "openvino",
]

BLOCKER = textwrap.dedent(
    """
    import importlib.abc, sys

    class Absent(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {absent!r}:
                raise ImportError(f"{{name}} is not installed on this machine")
            return None

    sys.meta_path.insert(0, Absent())
    """
)


def test_power_is_integrated_over_the_window_only() -> None:
    samples = [(float(t), 100.0 if t < 5 else 300.0) for t in range(11)]  # a step at t=5
    assert integrate(samples, 1.0, 4.0) == pytest.approx(300.0)
    # 4..5 ramps 100 -> 300 between the samples, then 300 W from 5 to 6
    assert integrate(samples, 4.0, 6.0) == pytest.approx(200.0 + 300.0)
    assert integrate(samples, 2.5, 3.5) == pytest.approx(100.0)


def test_what_a_single_gpu_without_extra_packages_cannot_run_is_listed() -> None:
    bare = {
        "gpus": ["NVIDIA H200"],
        "onnxruntime_providers": ["CPUExecutionProvider"],
        "packages": {"torch": "2.11.0"},
    }
    names = [name for name, _ in not_run_on_hardware(bare)]
    assert names == [
        "tensor- and data-parallel sharding",
        "ONNX Runtime's CUDA provider",
        "ONNX Runtime's TensorRT provider",
        "fp8",
    ]
    full = {
        "gpus": ["a", "b"],
        "onnxruntime_providers": ["CUDAExecutionProvider", "TensorrtExecutionProvider"],
        "packages": {"torchao": "0.14"},
    }
    assert not_run_on_hardware(full) == []


@pytest.mark.slow
def test_the_dry_run_needs_neither_ray_nor_mlflow(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER.format(absent=ABSENT))
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(site), "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out)],
        cwd=tmp_path,  # the script finds the repository itself; nothing is written there
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "dry run" in done.stdout
    results = json.loads((out / "gpu-check.json").read_text())
    assert results["dry_run"] is True
    rows = {(r["section"], r["name"]): r for r in results["rows"]}
    tests = rows[("tests", "pytest -m gpu tests/*/workers")]
    assert tests["outcome"] == "ok" and "collected" in tests["detail"]
    for model, configs in (("digits", DIGITS_PATHS), ("encoder", ENCODER_PATHS)):
        for name, _ in configs:
            assert rows[(f"paths: {model}", name)]["outcome"] == "builds on an H200", name
    study = next(r for r in results["rows"] if r["section"] == "studies")
    assert study["outcome"] == "ok", study["detail"]
    # Three trials measured: in full, or screened out by their short window (on a busy
    # machine a trial's short window can already show it off the front).
    trials = study["figures"]["trials"]
    assert set(trials) <= {"ok", "screened"} and sum(trials.values()) == 3, trials
    report = (out / "gpu-check.md").read_text()
    assert report.startswith("# GPU check: dry run (no CUDA device)")
    assert "## Not run on hardware" in report
