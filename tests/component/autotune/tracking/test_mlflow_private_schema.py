"""The MLflow private API `autotune.tracking.runs.BulkRuns` writes through, pinned as the
installed MLflow (3.17.2) defines it: the SQL models of the five tables it inserts rows into,
the columns those rows fill, the store's schema revision, and the store's functions it calls.
An MLflow upgrade that moves any of them fails here, naming what moved.

That the rows read back through MLflow's client as its own calls write them is
`tests/component/autotune/tracking/test_tracking_runs.py`
(`test_runs_written_in_bulk_read_back_as_mlflows_own_calls_write_them`)."""

from __future__ import annotations

import sqlite3
from contextlib import closing

import mlflow
import pytest

from autotune.tracking.runs import sql_store
from tests.private_schema import PinnedTable, drift

REVISIT = "autotune/tracking/runs.py (BulkRuns)"
INSTALLED = f"MLflow {mlflow.__version__}"
# The head of MLflow's tracking-store migrations that BulkRuns's rows were written against.
SCHEMA_REVISION = "dc11669786a5"

RUN_KEY = "String(length=32)"
KEY = "String(length=250)"
VALUE = "String(length=8000)"
METRIC = {
    "run_uuid": RUN_KEY,
    "key": KEY,
    "value": "Float(precision=53)",
    "timestamp": "BigInteger()",
    "step": "BigInteger()",
    "is_nan": "Boolean(create_constraint=True)",
}
PINNED = [
    PinnedTable(
        "SqlRun",
        "runs",
        {
            "run_uuid": RUN_KEY,
            "name": "String(length=250)",
            "artifact_uri": "String(length=200)",
            "experiment_id": "Integer()",
            "source_type": "String(length=20)",
            "source_name": "String(length=500)",
            "entry_point_name": "String(length=50)",
            "user_id": "String(length=256)",
            "status": "String(length=20)",
            "start_time": "BigInteger()",
            "end_time": "BigInteger()",
            "deleted_time": "BigInteger()",
            "source_version": "String(length=50)",
            "lifecycle_stage": "String(length=20)",
        },
    ),
    PinnedTable("SqlTag", "tags", {"run_uuid": RUN_KEY, "key": KEY, "value": VALUE}),
    PinnedTable("SqlParam", "params", {"run_uuid": RUN_KEY, "key": KEY, "value": VALUE}),
    PinnedTable("SqlMetric", "metrics", METRIC),
    PinnedTable("SqlLatestMetric", "latest_metrics", METRIC),
]


@pytest.mark.parametrize("pinned", PINNED, ids=lambda p: p.table)
def test_each_table_bulk_runs_writes_has_the_columns_its_rows_fill(pinned: PinnedTable) -> None:
    from mlflow.store.tracking.dbmodels import models

    model = getattr(models, pinned.model, None)
    assert model is not None, f"{INSTALLED} has no {pinned.model}: revisit {REVISIT}"
    moved = drift(pinned, model.__table__, REVISIT)
    assert not moved, f"{INSTALLED} moved:\n" + "\n".join(moved)


def test_a_new_store_is_at_the_schema_revision_bulk_runs_was_written_against(
    mlflow_uri: str,
) -> None:
    with closing(sqlite3.connect(mlflow_uri.removeprefix("sqlite:///"))) as connection:
        [(revision,)] = connection.execute("SELECT version_num FROM alembic_version").fetchall()
    assert revision == SCHEMA_REVISION, (
        f"{INSTALLED} migrates its tracking store to {revision}; BulkRuns was "
        f"written against {SCHEMA_REVISION}: read the migrations between them for "
        f"{', '.join(p.table for p in PINNED)}, revisit {REVISIT}, then pin the new revision"
    )


def test_the_store_functions_bulk_runs_calls_are_there(mlflow_uri: str) -> None:
    from mlflow.tracking import MlflowClient
    from mlflow.utils import validation

    store = sql_store(MlflowClient(mlflow_uri))
    assert store is not None, f"a sqlite URI is no SQL store to MLflow now: revisit {REVISIT}"
    called = {
        f"SqlAlchemyStore.{name}": getattr(store, name, None)
        for name in (
            "ManagedSessionMaker",
            "get_experiment",
            "_check_experiment_is_active",
            "sanitize_metric_value",
        )
    }
    called["mlflow.utils.validation._validate_batch_log_data"] = getattr(
        validation, "_validate_batch_log_data", None
    )
    gone = sorted(name for name, found in called.items() if not callable(found))
    assert not gone, f"{INSTALLED} has no {', '.join(gone)}: revisit {REVISIT}"
