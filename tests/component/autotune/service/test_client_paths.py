"""What a client sees of the server's files: a job's status, error, result and front, and
the 422 of a submission, name files relative to the models root, an upload by its id, and
the service's own files relative to its data directory; the job rows (and the server's log)
keep the absolute paths the runner needs."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
import yaml
from fastapi.testclient import TestClient

from autotune.core.errors import RequestError
from autotune.service import Database, ServiceSettings, create_app
from autotune.service.changes import mlflow_run
from autotune.service.client_paths import ClientPaths
from autotune.service.jobs import JobStore
from autotune.service.runner import JobRunner
from autotune.service.tokens import create_token
from tests.onnx_models import tiny_onnx
from tests.service_fixtures import bearer
from tests.service_support import service_request, sqlite_settings

SHA = "ab" * 32


STORES = ("http://mlflow.internal:5000", "s3://autotune-artifacts", "ray://head.internal:10001")


@pytest.fixture
def paths(tmp_path: Path) -> ClientPaths:
    models, data = tmp_path / "models", tmp_path / "data"
    return ClientPaths(models, data / "models", data, stores=STORES)


@pytest.mark.parametrize(
    ("server", "shown"),
    [
        ("{root}/models/sub/tiny.onnx", "sub/tiny.onnx"),
        (f"{{root}}/data/models/{SHA}/model.onnx", f"upload:{SHA}"),
        (f"{{root}}/data/models/{SHA}/weights.safetensors", f"upload:{SHA}"),
        (f"{{root}}/data/models/{SHA}/weights.bin", f"upload:{SHA}/weights.bin"),
        ("{root}/data/jobs/j1/model/model.onnx", "jobs/j1/model/model.onnx"),
        ("file://{root}/data/mlflow-artifacts/1/r/artifacts", "mlflow-artifacts/1/r/artifacts"),
        ("sqlite:///{root}/studies.db", "sqlite:///…/studies.db"),
        ("{root}/models-old/tiny.onnx", "…/tiny.onnx"),  # a sibling of the root is not in it
        ("/srv/autotune/search_spaces/quick-cpu.yaml", "…/quick-cpu.yaml"),
        ("postgresql+psycopg://svc:s3cret@db:5432/mlflow", "postgresql+psycopg://…"),
        ("postgresql+psycopg://svc:***@db:5432/mlflow", "postgresql+psycopg://…"),
        ("postgresql://db.internal/mlflow?sslmode=require", "postgresql://…"),
        ("mysql+pymysql://root@10.0.0.7/jobs", "mysql+pymysql://…"),
        ("redis://cache:6379/0", "redis://…"),
        ("https://svc:token@hub.example.com/model", "https://…"),
        ("http://mlflow.internal:5000/#/experiments/1", "http://…"),  # the service's own
        ("s3://autotune-artifacts/1/r", "s3://…"),  # the service's own
        ("ray://head.internal:10001", "ray://…"),  # the service's own
        ("https://huggingface.co/bert-base-uncased", "https://huggingface.co/bert-base-uncased"),
        ("p50/p95 per call, 1,000/s", "p50/p95 per call, 1,000/s"),
        ("models:/digits@tuned", "models:/digits@tuned"),
    ],
)
def test_a_server_path_is_shown_as_the_client_names_it(
    paths: ClientPaths, tmp_path: Path, server: str, shown: str
) -> None:
    message = f"model.onnx: file must exist (got '{server.format(root=tmp_path)}')"
    assert paths.text(message) == f"model.onnx: file must exist (got '{shown}')"


@pytest.mark.parametrize(
    "tracking", ["postgresql+psycopg://svc:s3cret@db:5432/mlflow", "http://mlflow.internal:5000"]
)
def test_a_public_mlflow_ui_is_shown_for_the_tracking_store_and_links_the_run(
    tmp_path: Path, tracking: str
) -> None:
    """Where the operator says where people open the MLflow UI, a job's MLflow block shows
    that address for its store, whole, and its run gets a link there; the store's own
    address appears nowhere."""
    models, data = tmp_path / "models", tmp_path / "data"
    public = "https://mlflow.example.com/"
    paths = ClientPaths(models, data / "models", data, (*STORES, tracking), (tracking, public))
    block = {"tracking_uri": tracking, "experiment_id": "3", "run_id": "r1"}
    shown = paths.value({"mlflow": block, "error": f"MLflow at {tracking} did not answer"})
    assert shown["mlflow"]["tracking_uri"] == "https://mlflow.example.com/"
    assert shown["error"] == "MLflow at https://mlflow.example.com/ did not answer"
    link = mlflow_run(shown["mlflow"])["link"]
    assert link is not None and link.startswith(
        "https://mlflow.example.com/#/experiments/3/runs/r1"
    )
    without = ClientPaths(models, data / "models", data, (*STORES, tracking))
    assert mlflow_run(without.value({"mlflow": block})["mlflow"])["link"] is None


def test_a_bad_input_error_shows_what_the_client_wrote_as_written(
    paths: ClientPaths, tmp_path: Path
) -> None:
    written = paths.error(RequestError("model.onnx", "must be a relative path", "/etc/passwd"))
    assert (written.field, written.rule, written.value) == (
        "model.onnx",
        "must be a relative path",
        "/etc/passwd",
    )
    link = tmp_path / "models" / "encoder" / "vocab.txt"
    resolved = paths.error(RequestError("model.hf", "must hold no link", str(link)))
    assert resolved.value == "encoder/vocab.txt" and isinstance(resolved, RequestError)


@pytest.fixture
def service(tmp_path: Path) -> tuple[ServiceSettings, Database, TestClient, dict[str, str]]:
    settings = sqlite_settings(tmp_path)
    db = Database(settings.db)
    return settings, db, TestClient(create_app(settings, db)), bearer(create_token(db, "alice"))


def _no_server_path(answer: str, settings: ServiceSettings) -> None:
    assert settings.models_root is not None
    for directory in (settings.models_root, settings.data_dir, settings.data_dir.parent):
        assert str(directory.resolve()) not in answer, answer


def test_a_job_that_fails_on_a_file_names_it_relative_to_the_models_root(
    service: tuple[ServiceSettings, Database, TestClient, dict[str, str]],
) -> None:
    """The model file went away after the job was queued: the runner's check names it by its
    absolute path (kept in the job row, for the log); the client reads it as it wrote it."""
    settings, db, client, alice = service
    assert settings.models_root is not None
    model = settings.models_root / "nets" / "tiny.onnx"
    model.parent.mkdir()
    onnx.save_model(tiny_onnx(), str(model))
    submitted = client.post(
        "/v1/jobs", json=service_request(model={"onnx": "nets/tiny.onnx"}), headers=alice
    )
    assert submitted.status_code == 202, submitted.text
    job_id = submitted.json()["id"]
    model.unlink()

    assert JobRunner(db, settings).run_once() == job_id
    row = JobStore(db).get_any(job_id)
    assert row is not None and row.state == "failed"
    assert str(model) in (row.error or "")  # the row keeps what the runner saw

    status = client.get(f"/v1/jobs/{job_id}", headers=alice)
    assert status.json()["error"] == "model.onnx: file must exist (got 'nets/tiny.onnx')"
    assert status.json()["model"]["source"] == {"kind": "path", "onnx": "nets/tiny.onnx"}
    result = client.get(f"/v1/jobs/{job_id}/result", headers=alice)
    assert result.status_code == 409 and "(got 'nets/tiny.onnx')" in result.json()["detail"]
    for answer in (status, result, client.get(f"/v1/jobs/{job_id}/pareto", headers=alice)):
        _no_server_path(answer.text, settings)
    db.close()


def test_a_refused_submission_names_the_file_relative_to_the_models_root(
    service: tuple[ServiceSettings, Database, TestClient, dict[str, str]], tmp_path: Path
) -> None:
    settings, db, client, alice = service
    assert settings.models_root is not None
    encoder = settings.models_root / "encoder"
    encoder.mkdir()
    (encoder / "config.json").write_text("{}")
    (tmp_path / "secret.txt").write_text("not for the server")
    (encoder / "vocab.txt").symlink_to(tmp_path / "secret.txt")
    request = service_request(model={"hf": "encoder", "task": "feature-extraction"})
    refused = client.post("/v1/jobs", content=yaml.safe_dump(request), headers={
        **alice, "content-type": "application/yaml"
    })  # fmt: skip
    assert refused.status_code == 422, refused.text
    assert refused.json()["detail"] == {
        "field": "model.hf",
        "rule": "must hold no link that leads outside it",
        "value": "encoder/vocab.txt",
    }
    db.close()


@pytest.mark.slow
def test_a_tuned_jobs_status_result_and_front_show_no_server_path(
    service: tuple[ServiceSettings, Database, TestClient, dict[str, str]],
) -> None:
    from experiments.digits.model import export_weights

    settings, db, client, alice = service
    assert settings.models_root is not None
    export_weights(settings.models_root / "digits.safetensors")  # the cached trained weights
    model = {
        "entry_point": "experiments.digits.model:architecture",
        "weights": "digits.safetensors",
    }
    submitted = client.post("/v1/jobs", json=service_request(model=model), headers=alice)
    assert submitted.status_code == 202, submitted.text
    job_id = submitted.json()["id"]
    assert JobRunner(db, settings).run_once() == job_id

    row = JobStore(db).get_any(job_id)
    assert row is not None and row.state == "succeeded", row and row.error
    assert row.result is not None and Path(row.result["artifact"]).is_absolute()
    status = client.get(f"/v1/jobs/{job_id}", headers=alice)
    assert status.json()["model"]["source"] == {"kind": "path", "weights": "digits.safetensors"}
    result = client.get(f"/v1/jobs/{job_id}/result", headers=alice).json()
    artifact = Path(row.result["artifact"]).relative_to(settings.data_dir.resolve())
    assert result["artifact"] == artifact.as_posix()
    assert result["artifact"].startswith(f"jobs/{job_id}/model/")
    assert result["study"]["storage"] == "sqlite:///…/studies.db"
    front = client.get(f"/v1/jobs/{job_id}/pareto", headers=alice)
    assert front.json()["trials"]
    for answer in (status.text, json.dumps(result), front.text):
        _no_server_path(answer, settings)
    db.close()
