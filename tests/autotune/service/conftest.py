"""A service over SQLite files in a temporary directory, tokens for two teams, and the
digits request as a client sends it (no storage or tracking: those are the service's)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from onnx import TensorProto, helper, numpy_helper

from autotune.service import Database, ServiceSettings, create_app
from autotune.service.tokens import create_token

# Just enough measurement to finish a study in seconds.
QUICK_MEASUREMENT: dict[str, Any] = {
    "warmup_iters": 2,
    "min_iters": 10,
    "max_iters": 50,
    "min_seconds": 0.0,
    "max_seconds": 0.3,
    "settle_tolerance": None,
    "energy_window_s": 0.05,
}


def service_settings(root: Path, **overrides: Any) -> ServiceSettings:
    models = root / "models"
    models.mkdir(parents=True, exist_ok=True)
    values: dict[str, Any] = {
        "db": f"sqlite:///{root / 'service.db'}",
        "storage": f"sqlite:///{root / 'studies.db'}",
        "tracking_uri": f"sqlite:///{root / 'mlflow.db'}",
        "experiment": "service-tests",
        "data_dir": root / "data",
        "models_root": models,
        "trusted_modules": ("experiments.digits",),
        "executor": "inprocess",
        "poll_s": 0.05,
    }
    values.update(overrides)
    return ServiceSettings(**values)


def client_request(**overrides: Any) -> dict[str, Any]:
    """The digits example with a tiny budget, as a client submits it."""
    request: dict[str, Any] = {
        "name": "digits-service",
        "model": {"entry_point": "experiments.digits.model:build_model"},
        "data": {"entry_point": "experiments.digits.model:eval_data"},
        "constraints": {"max_accuracy_drop": 0.05},
        "search_space": "cpu.yaml",
        "budget": {"trials": 3},
        "measurement": QUICK_MEASUREMENT,
        "validation": {"neighbours": 0, "factor": 1},
    }
    request.update(overrides)
    return request


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def tiny_onnx_bytes() -> bytes:
    """Y = X + W, four floats: a valid ONNX model of a few hundred bytes."""
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
    return bytes(model.SerializeToString())


@pytest.fixture
def settings(tmp_path: Path) -> ServiceSettings:
    return service_settings(tmp_path)


@pytest.fixture
def db(settings: ServiceSettings) -> Iterator[Database]:
    database = Database(settings.db)
    yield database
    database.close()


@pytest.fixture
def client(settings: ServiceSettings, db: Database) -> Iterator[TestClient]:
    with TestClient(create_app(settings, db)) as test_client:
        yield test_client


@pytest.fixture
def alice(db: Database) -> dict[str, str]:
    """Team a."""
    return bearer(create_token(db, "alice", team="a"))


@pytest.fixture
def bob(db: Database) -> dict[str, str]:
    """Also team a: sees alice's jobs."""
    return bearer(create_token(db, "bob", team="a"))


@pytest.fixture
def carol(db: Database) -> dict[str, str]:
    """Team b: sees none of team a's jobs."""
    return bearer(create_token(db, "carol", team="b"))
