"""`autotune report`: the front of a stored study, or one of its trials."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

import typer

from autotune.cli.shared import EXIT_INFEASIBLE, _exit_codes, err, out
from autotune.cli.tables import _print_front

if TYPE_CHECKING:
    from autotune.results import ResultStore
    from autotune.results.records import Candidate, TrialRecord


def report(
    study_name: Annotated[str, typer.Argument(metavar="STUDY")],
    storage: Annotated[str, typer.Option(help="SQLAlchemy URL")] = "sqlite:///autotune.db",
    as_json: Annotated[bool, typer.Option("--json", help="print as JSON")] = False,
    trial: Annotated[
        int | None,
        typer.Option(
            "--trial",
            metavar="N",
            help="print trial N instead: its configuration, status, reason and traceback",
        ),
    ] = None,
) -> None:
    """Print the feasible Pareto front of a stored study.

    The chosen trial and the baseline are marked, each figure as the search measured it.
    With --trial, one trial instead: its configuration, status, reason and, where it ended
    in an error, the traceback its worker sent. Read only: a storage that does not exist is
    an error, never created."""
    if trial is not None:
        _report_trial(study_name, storage, trial, as_json)
        return
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


def _report_trial(study_name: str, storage: str, number: int, as_json: bool) -> None:
    """One trial as the study holds it; a failed one with where it raised (an `error`
    trial's traceback, as much of it as the study keeps)."""
    with _exit_codes():
        record = _read_trial(study_name, storage, number)
    if as_json:
        fields = {"state", "status", "reason", "config", "attempt", "traceback"}
        print(json.dumps({"trial": number, **record.model_dump(mode="json", include=fields)}))
        return
    lines = [
        f"trial {record.number} (attempt {record.attempt})",
        f"status: {record.status or record.state}",
        f"reason: {record.reason or '-'}",
        "configuration:",
        *(f"  {key} = {value}" for key, value in sorted(record.config.items())),
    ]
    if record.traceback:
        lines += ["traceback:", record.traceback.rstrip()]
    out.print("\n".join(lines), markup=False, highlight=False, soft_wrap=True)


def _read_trial(study_name: str, storage: str, number: int) -> TrialRecord:
    from autotune.core.errors import RequestError
    from autotune.results import opened_store

    with opened_store(study_name, storage, "study", "--storage") as store:
        records = {record.number: record for record in store.records()}
    if number not in records:
        held = f"numbers {min(records)} to {max(records)}" if records else "none"
        rule = f"study {study_name!r} holds no such trial (its trials: {held})"
        raise RequestError("--trial", rule, number)
    return records[number]


@dataclass(frozen=True)
class StoredStudy:
    front: list[Candidate]
    chosen: int | None
    baseline: Candidate | None


def _read_study(study_name: str, storage: str) -> StoredStudy:
    from autotune.results import opened_store
    from autotune.search.front import front_of

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
