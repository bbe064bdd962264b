"""Pins of the private SQL tables autotune writes rows into (MLflow's tracking store, Optuna's
RDB storage): each table's name and the name and type of every column autotune's rows fill or
its queries read, as the installed package defines them. `drift` says what an upgrade moved,
naming the table, the column and the autotune module to revisit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PinnedTable:
    """A private model as autotune uses it. `columns`: each column autotune writes or reads,
    with the `repr` of its SQLAlchemy type. `inserted`: whether autotune inserts rows, so that a
    new column it leaves out must be nullable or have a default."""

    model: str
    table: str
    columns: dict[str, str]
    inserted: bool = True


def drift(pinned: PinnedTable, table: Any, revisit: str) -> list[str]:
    """What differs between `pinned` and the installed `table` (a SQLAlchemy `Table`), one line
    each, every line naming `revisit`."""
    moved = []
    if table.name != pinned.table:
        moved.append(f"{pinned.model} is the table {table.name!r} now, not {pinned.table!r}")
    for name, kind in pinned.columns.items():
        column = table.columns.get(name)
        if column is None:
            moved.append(f"{pinned.table}.{name} is gone")
        elif repr(column.type) != kind:
            moved.append(f"{pinned.table}.{name} is {column.type!r} now, not {kind}")
    if pinned.inserted:
        for column in table.columns:
            if column.name not in pinned.columns and _required(table, column):
                moved.append(
                    f"{pinned.table}.{column.name} is new and needs a value autotune's rows "
                    "do not give"
                )
    return [f"{line}: revisit {revisit}" for line in moved]


def _required(table: Any, column: Any) -> bool:
    """Whether an insert that leaves `column` out fails."""
    has_default = column.default is not None or column.server_default is not None
    return not (column.nullable or has_default or column is table.autoincrement_column)
