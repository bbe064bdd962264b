"""One registration of a tuned model, for the command line and the service: its name, its
alias (per kind where several are tuned at once), its namespace and its tags."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from mlflow.tracking import MlflowClient
from onnx import TensorProto, helper, numpy_helper

from autotune.tracking.registry import TunedRegistration, register_tuned_model

FINGERPRINT = "cpu-abc"


def tuned_document(root: Path, client: MlflowClient, study: str = "digits") -> dict[str, Any]:
    """A tuned file's document whose artifact is a small ONNX model, with a run of its own."""
    artifact_dir = root / study
    artifact_dir.mkdir(parents=True)
    weight = numpy_helper.from_array(np.ones(4, np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("Add", ["X", "W"], ["Y"])],
        "tiny",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [4])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save_model(model, str(artifact_dir / "model.onnx"))
    experiment = client.get_experiment_by_name("t")
    experiment_id = (
        experiment.experiment_id
        if experiment is not None
        else client.create_experiment("t", artifact_location=str(root / "artifacts"))
    )
    run_id = client.create_run(experiment_id).info.run_id
    return {
        "artifact": str(artifact_dir / "model.onnx"),
        "mlflow": {
            "tracking_uri": client.tracking_uri,
            "experiment_id": experiment_id,
            "run_id": run_id,
        },
        "headline": {"text": "2.00× throughput"},
        "config": {"runtime.engine": "onnxruntime", "batch.size": 8},
        "metrics": {"accuracy": 0.98},
        "hardware": {"fingerprint": FINGERPRINT, "cpu_model": "Xeon", "cpu_cores": 2, "gpus": []},
        "study": {"name": study, "trial_number": 3, "n_trials": 8},
    }


def test_one_kind_is_registered_under_the_name_and_the_alias(
    mlflow_uri: str, tmp_path: Path
) -> None:
    client = MlflowClient(mlflow_uri, registry_uri=mlflow_uri)
    tuned = tuned_document(tmp_path, client)

    registered = register_tuned_model(tuned, "digits")

    assert registered == TunedRegistration("digits", "tuned", "1", "digits")
    assert registered.uri == "models:/digits@tuned"
    version = client.get_model_version_by_alias("digits", "tuned")
    assert version.tags["autotune.study"] == "digits"
    assert version.tags["autotune.hardware_fingerprint"] == FINGERPRINT


def test_each_kind_of_several_has_its_own_alias(mlflow_uri: str, tmp_path: Path) -> None:
    client = MlflowClient(mlflow_uri, registry_uri=mlflow_uri)
    tuned = tuned_document(tmp_path, client, study=f"digits@{FINGERPRINT}")

    registered = register_tuned_model(tuned, "digits", of_several_kinds=True)

    assert registered is not None and registered.uri == f"models:/digits@tuned-{FINGERPRINT}"
    version = client.get_model_version_by_alias("digits", f"tuned-{FINGERPRINT}")
    assert version.tags["autotune.study"] == f"digits@{FINGERPRINT}"


def test_a_namespace_and_the_service_s_alias_and_tags(mlflow_uri: str, tmp_path: Path) -> None:
    client = MlflowClient(mlflow_uri, registry_uri=mlflow_uri)
    tuned = tuned_document(tmp_path, client, study="digits (job 38d0a1b2)")

    registered = register_tuned_model(
        tuned, "digits", alias="champion", namespace="team~x", tags={"autotune.job": "38d0a1b2"}
    )

    assert registered is not None
    assert registered.document() == {
        "name": "digits",
        "version": "1",
        "alias": "champion",
        "uri": "models:/digits@champion",
        "mlflow_name": "team~x~digits",
    }
    version = client.get_model_version_by_alias("team~x~digits", "champion")
    assert version.tags["autotune.job"] == "38d0a1b2"
    assert version.tags["autotune.study"] == "digits (job 38d0a1b2)"


def test_a_replayed_study_has_no_model_to_register(mlflow_uri: str, tmp_path: Path) -> None:
    client = MlflowClient(mlflow_uri, registry_uri=mlflow_uri)
    tuned = tuned_document(tmp_path, client)
    tuned["artifact"] = str(tmp_path / "replayed.json")

    assert register_tuned_model(tuned, "digits") is None
    assert client.search_registered_models() == []


@pytest.mark.parametrize("name", ["two words", "a@b"])
def test_a_name_mlflow_does_not_take_is_refused(mlflow_uri: str, tmp_path: Path, name: str) -> None:
    from autotune.core.errors import RequestError

    client = MlflowClient(mlflow_uri, registry_uri=mlflow_uri)
    with pytest.raises(RequestError):
        register_tuned_model(tuned_document(tmp_path, client), name)
