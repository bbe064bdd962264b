"""`tests.private_schema.drift`: each way a pinned private table can move is named
with its table, its column and the module to revisit."""

from __future__ import annotations

import sqlalchemy as sa

from tests.private_schema import PinnedTable, drift

PINNED = PinnedTable(
    "TrialModel", "trials", {"trial_id": "Integer()", "state": "String(length=20)"}
)


def table(name: str, *columns: sa.Column[object]) -> sa.Table:
    return sa.Table(name, sa.MetaData(), *columns)


def test_the_table_as_pinned_has_moved_nothing() -> None:
    pinned = table(
        "trials",
        sa.Column("trial_id", sa.Integer(), primary_key=True),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("note", sa.Text()),  # nullable: autotune's rows may leave it out
        sa.Column("tries", sa.Integer(), nullable=False, server_default="0"),
    )
    assert drift(PINNED, pinned, "autotune/optuna_api.py") == []


def test_a_renamed_table_a_moved_column_and_a_changed_type_are_named() -> None:
    moved = table(
        "trial",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("state", sa.String(32), nullable=False),
    )
    assert drift(PINNED, moved, "autotune/optuna_api.py") == [
        "TrialModel is the table 'trial' now, not 'trials': revisit autotune/optuna_api.py",
        "trials.trial_id is gone: revisit autotune/optuna_api.py",
        "trials.state is String(length=32) now, not String(length=20): "
        "revisit autotune/optuna_api.py",
    ]


def test_a_new_column_an_insert_must_fill_is_named_unless_only_read() -> None:
    grown = table(
        "trials",
        sa.Column("trial_id", sa.Integer(), primary_key=True),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("owner", sa.String(64), nullable=False),
    )
    assert drift(PINNED, grown, "autotune/optuna_api.py") == [
        "trials.owner is new and needs a value autotune's rows do not give: "
        "revisit autotune/optuna_api.py"
    ]
    read_only = PinnedTable(PINNED.model, PINNED.table, PINNED.columns, inserted=False)
    assert drift(read_only, grown, "autotune/optuna_api.py") == []
