"""A study whose trials keep an ONNX model's most int8-sensitive nodes in float
(precision.fallback): the ranking they were built by is kept in the study, logged as a table
on the study's MLflow run, counted in the search's time note and shown by `autotune space
--request`; the tuned file names the nodes its int8 model keeps in float, and
`autotune.load` runs that very model."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

import autotune
from autotune.cli import app
from autotune.tuning import TuneOptions, run_tune
from tests.conftest import FAST_MEASUREMENT, FAST_VALIDATION
from tests.hostile_onnx import hostile_model, inputs
from workers.building.ort_session import OnnxRuntimeSession
from workers.building.quantization import float_nodes_of

STUDY = "hostile-int8"
SUMMARY = "int8 sensitivity (int8_static): 1 of 3 operations carry 80% of the drop: hostile"


def int8_space(path: Path) -> Path:
    """Every trial int8 static with one or two nodes in float: the choice is one of them."""
    dimensions = [
        {"name": "runtime.engine", "values": ["onnxruntime"], "baseline": "onnxruntime"},
        {"name": "runtime.threads", "values": [1], "baseline": 1},
        {"name": "batch.size", "values": [8], "baseline": 8},
        {"name": "precision.mode", "values": ["int8_static"], "baseline": "int8_static"},
        {"name": "precision.fallback", "values": [1, 2], "baseline": 1},
    ]
    path.write_text(yaml.safe_dump({"name": "int8-fallback", "dimensions": dimensions}))
    return path


@pytest.fixture
def hostile_request(tmp_path: Path, mlflow_uri: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hostile.onnx").write_bytes(hostile_model())
    np.savez(tmp_path / "data.npz", inputs=inputs())
    request: dict[str, Any] = {
        "name": STUDY,
        "model": {"onnx": str(tmp_path / "hostile.onnx")},
        "data": {"npz": str(tmp_path / "data.npz")},
        "metric": {"kind": "fidelity"},
        "search_space": str(int8_space(tmp_path / "int8.yaml")),
        "budget": {"trials": 2},
        "measurement": FAST_MEASUREMENT,
        "validation": FAST_VALIDATION,
        "tracking": {"uri": mlflow_uri, "experiment": "tests"},
        "storage": f"sqlite:///{tmp_path / 'study.db'}",
    }
    path = tmp_path / "request.yaml"
    path.write_text(yaml.safe_dump(request))
    return path


def space_output(request: Path) -> str:
    printed = CliRunner().invoke(app, ["space", "--request", str(request)])
    assert printed.exit_code == 0, printed.output
    return " ".join(printed.output.split())


def parent_run_files(uri: str, run_id: str) -> dict[str, str]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    names = [f.path for f in client.list_artifacts(run_id, "sensitivity")]
    return {Path(n).name: client.download_artifacts(run_id, n) for n in names}


@pytest.mark.slow
def test_a_fallback_study_keeps_logs_and_shows_its_sensitivity(
    hostile_request: Path, mlflow_uri: str
) -> None:
    assert "not measured for this model yet" in space_output(hostile_request)
    notes: list[str] = []
    _, written = run_tune(
        hostile_request, TuneOptions(executor="inprocess", seed=0, on_note=notes.append)
    )
    tuned = yaml.safe_load(written.read_text())

    time_note = next(n for n in notes if n.startswith("int8 sensitivity measured in"))
    assert "of the trials' build time" in time_note and SUMMARY in time_note

    files = parent_run_files(mlflow_uri, tuned["mlflow"]["run_id"])
    assert sorted(files) == ["int8_sensitivity_int8_static.csv", "int8_sensitivity_int8_static.md"]
    rows = list(
        csv.DictReader(io.StringIO(Path(files["int8_sensitivity_int8_static.csv"]).read_text()))
    )
    assert [r["node"] for r in rows][0] == "hostile" and [r["rank"] for r in rows] == [
        "1",
        "2",
        "3",
    ]
    assert SUMMARY in Path(files["int8_sensitivity_int8_static.md"]).read_text()

    assert SUMMARY in space_output(hostile_request)
    assert f"by study {STUDY}" in space_output(hostile_request)

    precision = tuned["precision"]
    fallback = tuned["config"]["precision.fallback"]
    assert precision["settings"] == {
        "precision.mode": "int8_static",
        "precision.fallback": fallback,
    }
    assert len(precision["float_nodes"]) == fallback and precision["float_nodes"][0] == "hostile"
    session = autotune.load(written).session
    assert isinstance(session, OnnxRuntimeSession)
    assert float_nodes_of(session._model_bytes) == precision["float_nodes"]
    chosen_run_tags(mlflow_uri, tuned, precision["float_nodes"])


def chosen_run_tags(uri: str, tuned: dict[str, Any], float_nodes: list[str]) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    experiment = tuned["mlflow"]["experiment_id"]
    (run,) = client.search_runs([experiment], filter_string="tags.chosen = 'true'")
    assert run.data.tags["float_nodes"] == ", ".join(float_nodes)
