"""The Optuna private API `autotune.optuna_api` writes through, pinned as the installed Optuna
(5.1.0) defines it: the RDB models of the tables it reads and inserts rows into, the columns
its rows and queries use, and the storage's schema version. An Optuna upgrade that moves any
of them fails here, naming what moved.

That the trials it writes read back through `optuna.load_study` as `Study.tell` writes them
is `tests/component/autotune/results/test_result_store_conformance.py`
(`test_a_stored_trial_reads_back_through_optuna_as_optuna_writes_it`,
`test_an_infinite_value_is_kept_and_nan_fails_the_trial`)."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
import sqlalchemy as sa

from autotune import optuna_api
from tests.private_schema import PinnedTable, drift

REVISIT = "autotune/optuna_api.py"
INSTALLED = f"Optuna {optuna.__version__}"
# The storage schema the rows of optuna_api were written against: Optuna's own version
# number of it, and the head of its alembic migrations.
SCHEMA_VERSION = 12
SCHEMA_REVISION = "v3.2.0.a"

TRIAL_STATE = "Enum('RUNNING', 'COMPLETE', 'PRUNED', 'FAIL', 'WAITING', name='trialstate')"
ATTRIBUTE = {"trial_id": "Integer()", "key": "String(length=512)", "value_json": "Text()"}
PINNED = [
    PinnedTable("StudyModel", "studies", {"study_id": "Integer()"}, inserted=False),
    PinnedTable(
        "TrialModel",
        "trials",
        {
            "trial_id": "Integer()",
            "study_id": "Integer()",
            "number": "Integer()",
            "state": TRIAL_STATE,
            "datetime_start": "DateTime()",
            "datetime_complete": "DateTime()",
        },
    ),
    PinnedTable(
        "TrialParamModel",
        "trial_params",
        {
            "trial_id": "Integer()",
            "param_name": "String(length=512)",
            "param_value": "Float(precision=53)",
            "distribution_json": "Text()",
        },
    ),
    PinnedTable(
        "TrialValueModel",
        "trial_values",
        {
            "trial_id": "Integer()",
            "objective": "Integer()",
            "value": "Float(precision=53)",
            "value_type": "Enum('FINITE', 'INF_POS', 'INF_NEG', name='trialvaluetype')",
        },
    ),
    PinnedTable("TrialUserAttributeModel", "trial_user_attributes", ATTRIBUTE),
    PinnedTable("TrialSystemAttributeModel", "trial_system_attributes", ATTRIBUTE),
]


@pytest.mark.parametrize("pinned", PINNED, ids=lambda p: p.table)
def test_each_table_optuna_api_uses_has_the_columns_its_rows_use(pinned: PinnedTable) -> None:
    from optuna.storages._rdb import models

    model = getattr(models, pinned.model, None)
    assert model is not None, f"{INSTALLED} has no {pinned.model}: revisit {REVISIT}"
    moved = drift(pinned, model.__table__, REVISIT)
    assert not moved, f"{INSTALLED} moved:\n" + "\n".join(moved)


def test_trial_values_are_stored_as_optuna_api_stores_them() -> None:
    from optuna.storages._rdb import models

    stored = {v: models.TrialValueModel.value_to_stored_repr(v) for v in (1.5, float("inf"))}
    assert {v: (value, kind.name) for v, (value, kind) in stored.items()} == {
        1.5: (1.5, "FINITE"),
        float("inf"): (None, "INF_POS"),
    }, f"{INSTALLED} stores a trial's value otherwise: revisit {REVISIT} (_update_finished_trial)"


def test_a_new_storage_is_at_the_schema_optuna_api_was_written_against(tmp_path: Path) -> None:
    from optuna.storages._rdb import models

    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'optuna.db'}")
    found = (models.SCHEMA_VERSION, storage.get_current_version())
    assert found == (SCHEMA_VERSION, SCHEMA_REVISION), (
        f"{INSTALLED} creates storage schema {found}; optuna_api was written against "
        f"{(SCHEMA_VERSION, SCHEMA_REVISION)}: read the migrations between them for "
        f"{', '.join(p.table for p in PINNED)}, revisit {REVISIT}, then pin the new schema"
    )


def test_a_study_in_a_database_is_written_through_its_rdb_storage(tmp_path: Path) -> None:
    """Else `optuna_api` takes the slower path of Optuna's public storage API, silently."""
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    backend = optuna_api._rdb_backend(study)
    assert isinstance(backend, optuna.storages.RDBStorage), (
        f"{INSTALLED} wraps a database's storage otherwise: revisit {REVISIT} (_rdb_backend)"
    )
    assert isinstance(backend.engine, sa.engine.Engine)
