"""`autotune report`: the front of a stored study."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

import typer

from autotune.cli.shared import EXIT_INFEASIBLE, _exit_codes, err, out
from autotune.cli.tables import _print_front

if TYPE_CHECKING:
    from autotune.results import ResultStore
    from autotune.results.records import Candidate


def report(
    study_name: Annotated[str, typer.Argument(metavar="STUDY")],
    storage: Annotated[str, typer.Option(help="SQLAlchemy URL")] = "sqlite:///autotune.db",
    as_json: Annotated[bool, typer.Option("--json", help="print as JSON")] = False,
) -> None:
    """Print the feasible Pareto front of a stored study.

    The chosen trial and the baseline are marked, each figure as the search measured it.
    Read only: a storage that does not exist is an error, never created."""
    with _exit_codes():
        stored = _read_study(study_name, storage)
    if as_json:
        rows = [
            {"trial": c.trial_number, "config": c.config, "metrics": c.metrics}
            for c in stored.front
        ]
        print(json.dumps(rows, indent=2))
        return
    if not stored.front:
        err.print("no feasible completed trials in this study")
        raise typer.Exit(EXIT_INFEASIBLE)
    _print_front(stored.front, stored.chosen, stored.baseline)
    if stored.chosen is None:
        out.print("no trial is marked chosen: no head-to-head of the study's trials chose one")


@dataclass(frozen=True)
class StoredStudy:
    front: list[Candidate]
    chosen: int | None
    baseline: Candidate | None


def _read_study(study_name: str, storage: str) -> StoredStudy:
    from autotune.conclusion.front import front_of
    from autotune.results import opened_store

    with opened_store(study_name, storage, "study", "--storage") as store:
        baseline = next(
            (r.candidate() for r in store.completed() if r.marks.baseline and r.has_metrics),
            None,
        )
        return StoredStudy(front_of(store), _chosen(store), baseline)


def _chosen(store: ResultStore) -> int | None:
    """The trial the stored head-to-head chose, where it was decided on the trials the study
    holds now (a study continued since has not been decided again)."""
    stored = store.revalidation()
    if stored is None or stored.basis.get("n_trials") != store.counted():
        return None
    chosen: int = stored.report["chosen"]
    return chosen
