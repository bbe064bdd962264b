"""`autotune tune`: search, measure, and print the front and the tuned configuration."""

from __future__ import annotations

import json
import re
import shlex
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from autotune.cli.shared import (
    EXIT_INFEASIBLE,
    EXIT_INTERRUPTED,
    Trials,
    _exit_codes,
    err,
    out,
    sigterm_interrupts,
)
from autotune.cli.tables import _print_comparison, _print_front, _shown
from autotune.core.errors import AutotuneError
from autotune.execution.registry import executor_names
from autotune.search.report import trial_text
from autotune.search.trackers import tracker_names
from autotune.space.hardware import describe_kind
from autotune.strategies import DEFAULT_STRATEGY, strategy_names

if TYPE_CHECKING:
    from autotune.conclusion.conclude import TuneOutcome
    from autotune.kinds_at_once import KindEnd
    from autotune.results.records import Candidate
    from autotune.tuning import Tuned


def tune(
    request_file: Annotated[Path, typer.Argument(metavar="REQUEST.yaml")],
    trials: Trials = None,
    timeout: Annotated[float | None, typer.Option(min=0.001, help="seconds of search")] = None,
    storage: Annotated[str | None, typer.Option(help="SQLAlchemy URL of the study")] = None,
    study: Annotated[str | None, typer.Option(help="study name (resumes if it exists)")] = None,
    tracking_uri: Annotated[str | None, typer.Option(help="MLflow tracking URI")] = None,
    experiment: Annotated[str | None, typer.Option(help="MLflow experiment")] = None,
    ray_address: Annotated[str | None, typer.Option(help="join this Ray cluster")] = None,
    workers: Annotated[
        str,
        typer.Option(
            help="trial slots (one trial each) on each kind of node, or 'auto': one per GPU "
            "on a GPU node, one per CPU node"
        ),
    ] = "1",
    target: Annotated[
        str | None,
        typer.Option(
            help="the kind of node to tune for where the trials' nodes are of several: a "
            "fingerprint, a saved profile or a Ray node label key=value (default: each kind)"
        ),
    ] = None,
    executor: Annotated[
        str,
        typer.Option(
            help="'ray' (default), 'inprocess' (no Ray; debugging) or an installed plugin's "
            f"executor; one of: {', '.join(executor_names())}"
        ),
    ] = "ray",
    seed: Annotated[int | None, typer.Option(help="sampler seed")] = None,
    sampler: Annotated[
        str,
        typer.Option(
            help="the search strategy: autotune's own (default: a designed start, then a "
            "local search around the front; repeats and known-infeasible variants are not "
            "measured), or one of Optuna's samplers as they come (tpe is multivariate); "
            f"one of: {', '.join(strategy_names())}"
        ),
    ] = DEFAULT_STRATEGY,
    tracker: Annotated[
        list[str] | None,
        typer.Option(
            "--tracker",
            metavar="NAME",
            help="also tell the study's events to this tracker (repeat for several): 'jsonl' "
            "(events.jsonl beside the tuned file) or an installed plugin's; one of: "
            f"{', '.join(tracker_names())}",
        ),
    ] = None,
    space_file: Annotated[
        str | None, typer.Option("--space", help="space file in place of the request's")
    ] = None,
    replay: Annotated[
        Path | None,
        typer.Option(
            metavar="TABLE.csv",
            help="answer trials from recorded measurements (no model, data or device needed)",
        ),
    ] = None,
    out_file: Annotated[Path | None, typer.Option("--out", help="tuned-config file")] = None,
    artifacts: Annotated[
        Path | None,
        typer.Option(
            "--artifacts",
            metavar="DIR",
            help="where the optimized model (model/) goes, and a new MLflow experiment's "
            "artifacts (mlruns/) on a database store that is not a SQLite file (default: "
            "beside --out, else autotune-out/<study>)",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the tuned config as JSON")] = False,
) -> None:
    """Tune a model: search, measure, write the tuned configuration.

    With --replay, the same search runs against a recorded table, each slot of --workers on
    a simulated clock. Nodes of several kinds are tuned at once, a study each; the last
    lines say how each kind's ended, and the exit code is 0 where every kind was tuned, else
    1 where a kind's study failed, 130 where one was stopped, 3 where one was infeasible.
    A failed trial's line gives its reason; the search ends with a count of the trials by
    status, each with its most common reason; where more than half of the trials that ran
    failed (error, timeout, oom, unsupported, contended), a single kind's study exits 5."""
    from autotune.execution.ray_cluster import parse_workers
    from autotune.tuning import TuneOptions, run_tune_kinds

    display = _TuneProgress()
    with _exit_codes(), sigterm_interrupts():
        options = TuneOptions(
            trials=trials,
            timeout_s=timeout,
            storage=storage,
            study=study,
            tracking_uri=tracking_uri,
            experiment=experiment,
            ray_address=ray_address,
            workers=parse_workers(workers),
            executor=executor,
            target=target,
            seed=seed,
            out=out_file,
            out_dir=artifacts,
            replay=replay,
            space=space_file,
            sampler=sampler,
            trackers=tuple(tracker or ()),
            on_note=display.note,
            on_phase=display.phase,
            kind_display=display.for_kind,
        )
        tuned = run_tune_kinds(request_file, options, progress=display.trials)
    tuned_kinds = tuned.kinds
    several = len(tuned.ends) > 1
    if as_json:
        shown = [t.outcome.tuned.model_dump(mode="json") for t in tuned_kinds if t.outcome.tuned]
        for kind in tuned_kinds:
            _register(kind.outcome.tuned, tuned.name, several)
        print(json.dumps(shown if several else shown[0], indent=2))
    else:
        for kind in tuned_kinds:
            if several:
                header = f"\n[bold]Kind {escape(describe_kind(kind.kind))}[/bold]"
                out.print(header, soft_wrap=True)
            registered = _register(kind.outcome.tuned, tuned.name, several)
            _print_tuned(kind.outcome, kind.path, registered)
    if several:
        _print_kinds(tuned, err if as_json else out)
        code = kinds_exit_code(tuned.ends)
        if code:
            raise typer.Exit(code)


# Each outcome of a kind's study: its colour, and the exit code it gives where it is the
# gravest of the kinds' (in this order).
_OUTCOMES = {
    "failed": ("red", 1),
    "interrupted": ("yellow", EXIT_INTERRUPTED),
    "infeasible": ("yellow", EXIT_INFEASIBLE),
    "tuned": ("green", 0),
}


def kinds_exit_code(ends: list[KindEnd]) -> int:
    """Several kinds' exit code: 0 where every kind was tuned, else the gravest outcome's:
    1 where a study failed, 130 where one was stopped, 3 where one was infeasible."""
    from autotune.kinds_at_once import status

    statuses = {status(end) for end in ends}
    return next(code for outcome, (_, code) in _OUTCOMES.items() if outcome in statuses)


def _print_kinds(tuned: Tuned, console: Any) -> None:
    """The last lines: where the list of kinds is, and how each kind's study ended (its
    tuned file, or why it has none)."""
    from autotune.kinds_at_once import KindTuned, status

    statuses = [status(end) for end in tuned.ends]
    counts = ", ".join(f"{statuses.count(o)} {o}" for o in _OUTCOMES if o in statuses)
    console.print(
        f"\n[bold]Kinds of node:[/bold] {counts}; listed in {escape(str(tuned.path))}",
        soft_wrap=True,
    )
    for end, outcome in zip(tuned.ends, statuses, strict=True):
        detail = str(end.path) if isinstance(end, KindTuned) else end.reason
        colour = _OUTCOMES[outcome][0]
        console.print(
            f"  {escape(describe_kind(end.kind))}: [{colour}]{outcome}[/{colour}]: "
            f"{escape(detail)}",
            highlight=False,
            soft_wrap=True,
        )


def _print_tuned(outcome: TuneOutcome, written: Path, registered: str | None) -> None:
    front = outcome.front
    chosen = outcome.tuned.study["trial_number"] if outcome.tuned else None
    _print_front(front, chosen, searched_baseline(outcome))
    assert outcome.tuned is not None
    tuned = outcome.tuned
    out.print(f"\n[bold]Chosen configuration[/bold] (trial {tuned.study['trial_number']}):")
    for key, value in tuned.config.items():
        out.print(f"  {key}: {_shown(value)}")
    _print_comparison(tuned.baseline, tuned.metrics)
    out.print(head_to_head_line(tuned.revalidation))
    for note in outcome.notes:
        out.print(f"[yellow]note:[/yellow] {note}")
    # Paths and a command to copy: each on one line, however long (never folded at the width).
    out.print(f"\nTuned config:    {escape(str(written))}", soft_wrap=True)
    out.print(f"Optimized model: {escape(str(tuned.artifact))}", soft_wrap=True)
    if registered is not None:
        out.print(f"Registered as:   {registered}", highlight=False, soft_wrap=True)
    out.print(mlflow_run_line(tuned.mlflow))
    port = free_port()
    ui = _ui_command(tuned.mlflow["tracking_uri"], port)
    out.print(f"Open the UI:     {escape(ui)}", highlight=False, soft_wrap=True)
    review = _review_address(tuned.mlflow, tuned.study["name"], port)
    out.print(f"Then review:     {escape(review)}", highlight=False, soft_wrap=True)
    firm = tuned.headline.conditions == "quiet" and tuned.headline.resolved
    colour = "green" if firm else "yellow"
    out.print(f"\n[bold {colour}]Against the baseline:[/bold {colour}] {tuned.headline.text}")


def head_to_head_line(revalidation: dict[str, Any]) -> str:
    """Why the chosen configuration is the one: its head-to-head with the baseline."""
    finalists = [f["trial"] for comparison in revalidation["comparisons"] for f in comparison]
    return (
        f"Head to head: the baseline and finalists {finalists} in {revalidation['rounds']} "
        f"interleaved rounds; chosen #{revalidation['chosen']}: {revalidation['chosen_because']}"
    )


def mlflow_run_line(mlflow: dict[str, Any]) -> str:
    return f"MLflow run:      {mlflow['run_id']} (experiment {mlflow['experiment_id']})"


def searched_baseline(outcome: TuneOutcome) -> Candidate:
    """The baseline as the search measured it: the front's figures are the search's (the
    outcome's baseline is the head-to-head's, measured again beside the finalists)."""
    number = outcome.baseline.trial_number
    return next(c for c in outcome.candidates if c.trial_number == number)


def _register(tuned: Any, name: str, of_several_kinds: bool) -> str | None:
    """The tuned model registered (`autotune.tracking.registry.register_tuned_model`) and
    how to name it, or what went wrong where the store has no registry or the name is not one
    MLflow takes. A replayed study exports no model (None)."""
    from mlflow.exceptions import MlflowException

    from autotune.core.errors import RequestError
    from autotune.tracking.registry import register_tuned_model

    try:
        registered = register_tuned_model(
            tuned.model_dump(mode="json"), name, of_several_kinds=of_several_kinds
        )
    except (MlflowException, RequestError) as error:
        return f"not registered ({type(error).__name__}: {str(error).splitlines()[0]})"
    if registered is None:
        return None
    return f"{registered.uri} (version {registered.version})"


def _ui_command(tracking_uri: str, port: int, cwd: Path | None = None) -> str:
    """A command that opens the MLflow UI on the results at `port` and works from here: `make
    mlflow-ui` where this directory's Makefile has that target on the same store, else the
    mlflow executable beside the running Python (a virtualenv's is not on PATH unless the
    environment is activated), or `python -m mlflow` where there is none."""
    if tracking_uri.startswith(("http://", "https://")):
        return f"open {tracking_uri} in a browser"
    makefile = (cwd or Path.cwd()) / "Makefile"
    if makefile.is_file():
        text = makefile.read_text(errors="replace")
        target = re.search(r"^mlflow-ui:.*\n((?:\t.*\n?)+)", text, re.MULTILINE)
        store = rf"--backend-store-uri\s+{re.escape(tracking_uri)}(\s|$)"
        if target and re.search(store, target[1]) and "--port $(MLFLOW_PORT)" in target[1]:
            return f"make mlflow-ui MLFLOW_PORT={port}"
    mlflow = Path(sys.executable).parent / "mlflow"
    program = shlex.quote(str(mlflow))
    if not mlflow.is_file():
        program = f"{shlex.quote(sys.executable)} -m mlflow"
    return f"{program} ui --backend-store-uri {shlex.quote(tracking_uri)} --port {port}"


# Where the printed UI command listens: MLflow's own port where it is free, else the first
# free one after it.
UI_HOST, UI_PORTS = "127.0.0.1", range(5000, 5100)


def free_port() -> int:
    """A port of UI_PORTS nothing listens on now (another UI, of another store, may hold
    5000: `mlflow ui` would then log "Address already in use", exit 0, and a link to
    port 5000 would open that store); the system's choice where all are taken."""
    for port in [*UI_PORTS, 0]:
        try:
            with socket.create_server((UI_HOST, port)) as server:
                chosen: int = server.getsockname()[1]
                return chosen
        except OSError:
            continue
    raise AutotuneError("no free port for the MLflow UI")


def _review_address(mlflow: dict[str, str], study: str, port: int) -> str:
    """The address of the study's saved view of its trials: on the tracking server itself,
    or on the UI the command above starts at `port`. Its experiment is the one the store
    holds the study's run in; a store without that run is said to have none."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    from autotune.tracking.view import view_link

    uri = mlflow["tracking_uri"]
    try:
        experiment = MlflowClient(uri).get_run(mlflow["run_id"]).info.experiment_id
    except MlflowException as error:
        return f"the study's run is not in {uri} ({str(error).splitlines()[0]})"
    base = (
        uri.rstrip("/") if uri.startswith(("http://", "https://")) else f"http://{UI_HOST}:{port}"
    )
    return f"{base}/{view_link(experiment, study)}"


# Wide enough for the longest phase name ("head to head").
LABEL_WIDTH = 12


class _TuneProgress:
    """The tune command's progress on stderr: a line for each trial, each phase and each
    note. On a terminal the lines scroll above a bar of the trials, its count and the time
    elapsed; then, for each phase after the search (the finalists' head-to-head, the
    export), a bar of its elapsed time, since one blocking call does its work. The bars
    hold nothing of variable length, so they stay whole at 80 columns. Several kinds tuned
    at once share the display: each kind's bars are labelled with the kind, and each of its
    lines starts with it (`for_kind`)."""

    def __init__(self) -> None:
        self._progress: Any = None
        self._users = 0
        self._lock = threading.Lock()
        self._trials: dict[str, Any] = {}  # each kind's trials bar, by its label
        self._phases: dict[str, Any] = {}

    def for_kind(self, label: str) -> _KindProgress:
        return _KindProgress(self, label)

    @contextmanager
    def trials(self, total: int | None, label: str = "") -> Iterator[Callable[[int, Any], None]]:
        if not err.is_terminal:
            yield lambda done, result: self._trial_line(done, total, result, label)
            return
        progress = self._open()
        task = progress.add_task(
            "", total=total, label=_labelled(label, "tuning"), count=_count(0, total)
        )
        self._trials[label] = task

        def update(done: int, result: Any) -> None:
            progress.update(task, completed=done, count=_count(done, total), refresh=True)
            self._trial_line(done, total, result, label)

        try:
            yield update
        finally:
            self._end_phase(label)
            del self._trials[label]
            self._close()

    def _open(self) -> Any:
        """The one live display, started by the first kind's trials."""
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
        from rich.table import Column

        with self._lock:
            if self._progress is None:
                label = Column(min_width=LABEL_WIDTH, no_wrap=True)
                columns = [
                    TextColumn("{task.fields[label]}", table_column=label),
                    BarColumn(bar_width=20),
                    TextColumn("{task.fields[count]}"),
                    TimeElapsedColumn(),
                ]
                self._progress = Progress(*columns, console=err, transient=False)
                self._progress.start()
            self._users += 1
            return self._progress

    def _close(self) -> None:
        """Stopped when the last kind's trials end."""
        with self._lock:
            self._users -= 1
            if self._users == 0:
                self._progress.stop()
                self._progress = None

    def phase(self, text: str, label: str = "") -> None:
        """A phase told as "name: what it does": its line, and on a terminal its bar (the
        name in the label column)."""
        err.print(escape(_prefixed(label, text)), highlight=False, soft_wrap=True)
        trials = self._trials.get(label)
        if self._progress is None or trials is None:
            return
        self._end_phase(label)
        self._progress.stop_task(trials)
        name, told, _ = text.partition(": ")
        self._phases[label] = self._progress.add_task(
            "", total=None, label=escape(_labelled(label, name if told else "phase")), count=""
        )

    def _end_phase(self, label: str) -> None:
        phase = self._phases.pop(label, None)
        if phase is not None:
            self._progress.update(phase, total=1, completed=1)
            self._progress.stop_task(phase)

    def note(self, text: str) -> None:
        err.print(escape(text), highlight=False, soft_wrap=True)

    def _trial_line(self, done: int, total: int | None, result: Any, label: str) -> None:
        if result is not None:  # a resumed study's count is told by its note
            line = f"tuning {_count(done, total)}: {trial_text(result)}"
            err.print(escape(_prefixed(label, line)), highlight=False, soft_wrap=True)


@dataclass
class _KindProgress:
    """One kind's view of the display, where several kinds are tuned at once."""

    display: _TuneProgress
    label: str

    def trials(self, total: int | None) -> Any:
        return self.display.trials(total, self.label)

    def note(self, text: str) -> None:
        self.display.note(_prefixed(self.label, text))

    def phase(self, text: str) -> None:
        self.display.phase(text, self.label)


def _prefixed(label: str, line: str) -> str:
    """A kind's line, where several kinds are tuned at once: `[kind 0f27ab12] line`."""
    return f"[{label}] {line}" if label else line


def _labelled(label: str, name: str) -> str:
    return f"{label} {name}" if label else name


def _count(done: int, total: int | None) -> str:
    return f"{done}/{total}" if total is not None else str(done)
