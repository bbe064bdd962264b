"""`autotune report`: the front of a stored study."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from autotune.cli.shared import EXIT_INFEASIBLE, _exit_codes, err
from autotune.cli.tables import _print_front


def report(
    study_name: Annotated[str, typer.Argument(metavar="STUDY")],
    storage: Annotated[str, typer.Option(help="SQLAlchemy URL")] = "sqlite:///autotune.db",
    as_json: Annotated[bool, typer.Option("--json", help="print as JSON")] = False,
) -> None:
    """Print the feasible Pareto front of a stored study (read only: a storage that does
    not exist is an error, never created)."""
    from autotune.tuning import study_front

    with _exit_codes():
        front = study_front(study_name, storage, storage_field="--storage")
    if as_json:
        rows = [{"trial": c.trial_number, "config": c.config, "metrics": c.metrics} for c in front]
        print(json.dumps(rows, indent=2))
        return
    if not front:
        err.print("no feasible completed trials in this study")
        raise typer.Exit(EXIT_INFEASIBLE)
    _print_front(front, None)
