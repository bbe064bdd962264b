"""The `autotune` command line."""

from __future__ import annotations

import json
import re
import shlex
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Literal, cast

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

from autotune.errors import (
    AutotuneError,
    Interrupted,
    NoFeasibleConfiguration,
    RequestError,
    Unauthorized,
)
from autotune.metrics import latency_per_sample_ms

EXIT_BAD_INPUT = 2
EXIT_INFEASIBLE = 3
EXIT_INTERRUPTED = 130

app = typer.Typer(
    help="Hardware-aware tuning of ML models.", no_args_is_help=True, add_completion=False
)
# Tables stay whole when the output is piped (rich would otherwise assume 80 columns).
_PIPED_WIDTH = 160
err = Console(stderr=True)
out = Console(width=None if Console().is_terminal else _PIPED_WIDTH)


def _error(label: str, exc: Exception) -> None:
    """One line, however long (the terminal may fold it): the label and the message, whose
    values are printed as they are, never read as markup."""
    err.print(f"{label} {escape(str(exc))}", highlight=False, soft_wrap=True)


@contextmanager
def _exit_codes() -> Iterator[None]:
    try:
        yield
    except RequestError as exc:
        _error("[red]error:[/red]", exc)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    except Unauthorized as exc:
        _error("[red]unauthorized:[/red]", exc)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    except Interrupted as exc:
        _error("[yellow]interrupted:[/yellow]", exc)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except NoFeasibleConfiguration as exc:
        _error("[yellow]no tuned configuration:[/yellow]", exc)
        raise typer.Exit(EXIT_INFEASIBLE) from None
    except AutotuneError as exc:
        _error("[red]failed:[/red]", exc)
        raise typer.Exit(1) from None


@app.command()
def tune(
    request_file: Annotated[Path, typer.Argument(metavar="REQUEST.yaml")],
    trials: Annotated[int | None, typer.Option(min=1, help="trials in the study")] = None,
    timeout: Annotated[float | None, typer.Option(min=0.001, help="seconds of search")] = None,
    storage: Annotated[str | None, typer.Option(help="SQLAlchemy URL of the study")] = None,
    study: Annotated[str | None, typer.Option(help="study name (resumes if it exists)")] = None,
    tracking_uri: Annotated[str | None, typer.Option(help="MLflow tracking URI")] = None,
    experiment: Annotated[str | None, typer.Option(help="MLflow experiment")] = None,
    ray_address: Annotated[str | None, typer.Option(help="join this Ray cluster")] = None,
    workers: Annotated[int, typer.Option(min=1, help="trial slots (one trial each)")] = 1,
    executor: Annotated[
        str, typer.Option(help="'ray' (default) or 'inprocess' (no Ray; debugging)")
    ] = "ray",
    seed: Annotated[int | None, typer.Option(help="sampler seed")] = None,
    sampler: Annotated[
        Literal["autotune", "tpe", "random", "nsga2", "gp"],
        typer.Option(
            help="autotune's structure-aware strategy (default: a designed start, then a "
            "local search around the front; repeats and known-infeasible variants are not "
            "measured), or one of Optuna's samplers as they come (tpe is multivariate)"
        ),
    ] = "autotune",
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
    as_json: Annotated[bool, typer.Option("--json", help="print the tuned config as JSON")] = False,
) -> None:
    """Tune a model: search, measure, and write the tuned configuration. With --replay,
    the same search runs against a recorded table, each slot of --workers on a simulated
    clock."""
    from autotune.tuning import TuneOptions, run_tune

    display = _TuneProgress()
    options = TuneOptions(
        trials=trials,
        timeout_s=timeout,
        storage=storage,
        study=study,
        tracking_uri=tracking_uri,
        experiment=experiment,
        ray_address=ray_address,
        workers=workers,
        executor=executor,
        seed=seed,
        out=out_file,
        replay=replay,
        space=space_file,
        sampler=sampler,
        on_note=display.note,
        on_phase=display.phase,
    )
    with _exit_codes():
        outcome, written = run_tune(request_file, options, progress=display.trials)
    if as_json:
        assert outcome.tuned is not None
        print(json.dumps(outcome.tuned.model_dump(mode="json"), indent=2))
        return
    from autotune.pareto import Candidate

    front: list[Candidate] = outcome.front
    _print_front(front, outcome.tuned.study["trial_number"] if outcome.tuned else None)
    assert outcome.tuned is not None
    tuned = outcome.tuned
    out.print(f"\n[bold]Chosen configuration[/bold] (trial {tuned.study['trial_number']}):")
    for key, value in tuned.config.items():
        out.print(f"  {key}: {_shown(value)}")
    _print_comparison(tuned.baseline, tuned.metrics)
    revalidation = tuned.revalidation
    finalists = [f["trial"] for comparison in revalidation["comparisons"] for f in comparison]
    out.print(
        f"Head to head: the baseline and finalists {finalists} in {revalidation['rounds']} "
        f"interleaved rounds; chosen #{revalidation['chosen']}: {revalidation['chosen_because']}"
    )
    for note in outcome.notes:
        out.print(f"[yellow]note:[/yellow] {note}")
    out.print(f"\nTuned config:    {written}")
    out.print(f"Optimized model: {tuned.artifact}")
    out.print(
        f"MLflow run:      {tuned.mlflow['run_id']} (experiment {tuned.mlflow['experiment_id']})"
    )
    ui = _ui_command(tuned.mlflow["tracking_uri"])
    out.print(f"Open the UI:     {escape(ui)}", highlight=False)
    colour = "green" if tuned.headline.conditions == "quiet" else "yellow"
    out.print(f"\n[bold {colour}]Against the baseline:[/bold {colour}] {tuned.headline.text}")


def _ui_command(tracking_uri: str, cwd: Path | None = None) -> str:
    """A command that opens the MLflow UI on the results and works from here: `make
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
        if target and re.search(store, target[1]):
            return "make mlflow-ui"
    mlflow = Path(sys.executable).parent / "mlflow"
    program = shlex.quote(str(mlflow))
    if not mlflow.is_file():
        program = f"{shlex.quote(sys.executable)} -m mlflow"
    return f"{program} ui --backend-store-uri {shlex.quote(tracking_uri)}"


class _TuneProgress:
    """The tune command's progress on stderr: a bar of the trials; then, for each phase
    after the search (the finalists' head-to-head, the export), its line with an
    elapsed-time bar, since one blocking call does its work; and notes above them."""

    def __init__(self) -> None:
        self._progress: Any = None
        self._trials: Any = None
        self._phase: Any = None

    @contextmanager
    def trials(self, total: int | None) -> Iterator[Callable[[int, Any], None]]:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        columns = [
            TextColumn("{task.fields[label]}"),
            BarColumn(bar_width=20),
            TextColumn("{task.fields[count]}"),
            TimeElapsedColumn(),
            TextColumn("{task.description}"),
        ]
        with Progress(*columns, console=err, transient=False) as progress:
            task = progress.add_task("", total=total, label="tuning", count=_count(0, total))
            self._progress, self._trials = progress, task

            def update(done: int, result: Any) -> None:
                last = f"trial {result.trial_number}: {result.status}"
                if result.metrics is not None:
                    last += f", p95 {result.metrics.latency_p95_ms:.3f} ms"
                progress.update(task, completed=done, description=last, count=_count(done, total))

            try:
                yield update
            finally:
                self._end_phase()
                self._progress = None

    def phase(self, text: str) -> None:
        """A phase told as "name: what it does" (the name in the label column)."""
        if self._progress is None:
            err.print(escape(text), highlight=False)
            return
        self._end_phase()
        self._progress.stop_task(self._trials)
        name, told, detail = text.partition(": ")
        if not told:
            name, detail = "phase", text
        self._phase = self._progress.add_task(
            escape(detail), total=None, label=escape(name), count=""
        )

    def _end_phase(self) -> None:
        if self._phase is not None:
            self._progress.update(self._phase, total=1, completed=1)
            self._progress.stop_task(self._phase)
            self._phase = None

    def note(self, text: str) -> None:
        err.print(escape(text), highlight=False)


def _count(done: int, total: int | None) -> str:
    return f"{done}/{total}" if total is not None else str(done)


# The front's metric columns: header, figure. The one marked False is left out where the
# table would not fit the terminal otherwise.
_FRONT_METRICS: list[tuple[str, Callable[[dict[str, Any]], str], bool]] = [
    ("accuracy", lambda m: f"{m['accuracy']:.4f}", True),
    ("p95 ms\nper call", lambda m: f"{m['latency_p95_ms']:.3f}", True),
    (
        "ms per\nsample",
        lambda m: f"{latency_per_sample_ms(float(m['throughput_per_s'])):.4g}",
        False,
    ),
    ("samples\nper s", lambda m: f"{m['throughput_per_s']:.0f}", True),
    ("J per\nsample", lambda m: f"{m['energy_per_sample_j']:.2e}", True),
]


def _print_front(front: list[Any], chosen: int | None) -> None:
    """The front, whole at any width of 80 columns or more: a column per varying dimension
    where that fits, else one column listing them (and no ms-per-sample column)."""
    if not front:
        return
    keys = sorted({k for c in front for k in c.config})
    varying = [k for k in keys if len({str(c.config.get(k, "")) for c in front}) > 1]
    shared = {k: front[0].config.get(k) for k in keys if k not in varying}
    table = _front_table(front, chosen, varying, compact=False)
    unbounded = out.options.update_width(1 << 20)  # the table's own minimum, not clamped
    if Measurement.get(out, unbounded, table).minimum > out.width:
        table = _front_table(front, chosen, varying, compact=True)
    out.print(table)
    if shared:
        out.print("common to all: " + ", ".join(f"{k}={_shown(v)}" for k, v in shared.items()))


def _front_table(front: list[Any], chosen: int | None, varying: list[str], compact: bool) -> Table:
    title = f"Pareto front: {len(front)} feasible, non-dominated trials"
    # Rows of several lines (compact) are set apart by a blank line.
    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", show_lines=compact)
    table.add_column("trial", justify="right", no_wrap=True)
    headers = _dimension_headers(varying)
    if compact:
        table.add_column("configuration")
    for key in [] if compact else varying:
        table.add_column(_two_lines(headers[key]))
    metrics = [(h, figure) for h, figure, always in _FRONT_METRICS if always or not compact]
    for header, _ in metrics:
        table.add_column(header, justify="right")
    for c in sorted(front, key=lambda c: c.metrics["latency_p95_ms"]):
        values = [_shown(c.config.get(k, "")) for k in varying]
        if compact:
            values = ["\n".join(f"{headers[k]} {v}" for k, v in zip(varying, values, strict=True))]
        mark = "*" if c.trial_number == chosen else ""
        table.add_row(
            f"{c.trial_number}{mark}", *values, *(figure(c.metrics) for _, figure in metrics)
        )
    return table


def _dimension_headers(keys: list[str]) -> dict[str, str]:
    """Short headers: a dimension's name without its group where no other shown dimension
    has that name and the name says what it is alone ('threads'), else group and name
    ('batch size', 'prune ratio'); words split at '_' and '.' so a narrow column wraps."""
    leaves = [key.rsplit(".", 1)[-1] for key in keys]
    headers = {}
    for key, leaf in zip(keys, leaves, strict=True):
        alone = leaves.count(leaf) == 1 and leaf not in _VAGUE_NAMES
        headers[key] = (leaf if alone else key).replace("_", " ").replace(".", " ")
    return headers


def _two_lines(header: str) -> str:
    """A header of several words on two lines of about equal length (a column is as wide
    as its header's longest line)."""
    spaces = [i for i, char in enumerate(header) if char == " "]
    if not spaces:
        return header
    split = min(spaces, key=lambda i: max(i, len(header) - i - 1))
    return f"{header[:split]}\n{header[split + 1 :]}"


# Dimension names that need their group to mean something ('size' of what?).
_VAGUE_NAMES = frozenset({"size", "mode", "method", "ratio", "device", "graphs"})


def _shown(value: Any) -> str:
    """Floats from stepped ranges (0.30000000000000004) read as what they mean."""
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _print_comparison(baseline: dict[str, Any], tuned: dict[str, Any]) -> None:
    table = Table(title="Baseline vs tuned (measured head to head)")
    for column in ("metric", "baseline", "tuned"):
        table.add_column(column)
    for key, value in tuned.items():
        base = baseline.get(key, "")
        fmt = (lambda v: f"{v:.4g}") if isinstance(value, float) else str
        table.add_row(key, fmt(base) if base != "" else "", fmt(value))
    out.print(table)


@app.command()
def hardware(
    as_json: Annotated[bool, typer.Option("--json", help="print the profile as JSON")] = False,
) -> None:
    """Probe and print this machine's hardware profile."""
    from autotune.hardware import probe

    profile = probe()
    if as_json:
        print(profile.model_dump_json(indent=2))
        return
    out.print(f"fingerprint:  {profile.fingerprint}")
    out.print(f"cpu:          {profile.cpu_model} ({profile.cpu_cores} cores)")
    out.print(f"cpu flags:    {' '.join(profile.cpu_flags) or '-'}")
    out.print(f"memory:       {profile.memory_mb} MiB")
    gpus = ", ".join(
        f"{g.name} (cc {g.compute_capability[0]}.{g.compute_capability[1]})" for g in profile.gpus
    )
    out.print(f"gpus:         {gpus or 'none'}")
    out.print(f"ort providers: {', '.join(profile.onnxruntime_providers) or '-'}")
    out.print(f"capabilities: {', '.join(sorted(profile.capabilities()))}")
    for note in profile.notes:
        out.print(f"note:         {note}")


@app.command()
def space(
    space_file: Annotated[
        str | None, typer.Option("--space", help="space file (default: default.yaml)")
    ] = None,
    hardware_file: Annotated[
        Path | None, typer.Option("--hardware", help="a saved `autotune hardware --json` profile")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print as JSON")] = False,
) -> None:
    """Print the effective search space for this machine (or a saved profile)."""
    from autotune.hardware import load_profile, probe
    from autotune.space import effective_space, load_space, resolve_space_path

    with _exit_codes():
        profile = load_profile(hardware_file) if hardware_file else probe()
        path = resolve_space_path(space_file)
        effective = effective_space(load_space(path), profile, str(path))
    if as_json:
        print(effective.model_dump_json(indent=2))
        return
    out.print(
        f"space {effective.name} ({effective.source}), hardware {effective.hardware_fingerprint}"
    )
    excluded: dict[str, list[str]] = {}
    for ex in effective.excluded:
        what = "all" if ex.value is None else str(ex.value)
        excluded.setdefault(ex.dimension, []).append(f"{what} ({ex.reason})")
    for dim in effective.dimensions:
        values = dim.values if dim.values is not None else dim.range
        line = f"  {dim.name}: {values}"
        if dim.baseline is not None:
            line += f"  baseline {dim.baseline}"
        if dim.when:
            line += f"  when {dim.when}"
        out.print(line, highlight=False)
        if dim.name in excluded:
            out.print(f"    [dim]excluded: {', '.join(excluded.pop(dim.name))}[/dim]")
    for name, reasons in excluded.items():
        out.print(f"  [dim]{name}: excluded {', '.join(reasons)}[/dim]")


@app.command()
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


# -- the service ---------------------------------------------------------------------------

token_app = typer.Typer(
    help="Manage the service's API tokens (run where the service database is reachable).",
    no_args_is_help=True,
)
app.add_typer(token_app, name="token")

Server = Annotated[
    str,
    typer.Option(
        "--server", envvar="AUTOTUNE_SERVER", help="URL of the autotune server (http://host:8000)"
    ),
]
Token = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="AUTOTUNE_TOKEN",
        show_default=False,
        help="API token (default: the file $XDG_CONFIG_HOME/autotune/token, "
        "~/.config/autotune/token)",
    ),
]
ServiceDb = Annotated[
    str | None,
    typer.Option(
        "--db",
        envvar="AUTOTUNE_DB",
        show_default=False,
        help="SQLAlchemy URL of the service database (default: autotune-service.db here)",
    ),
]
AsJson = Annotated[bool, typer.Option("--json", help="print as JSON")]
PollSeconds = Annotated[float, typer.Option(min=0.01, help="seconds between checks with --wait")]
WAIT_HELP = "follow the job to its end; exit 0 succeeded, 3 infeasible, 1 failed or cancelled"
REQUEST_HELP = (
    "the request file; it is read here and sent to the server, where relative paths in it "
    "name files under the server's models root, entry points must be in modules the server "
    "trusts, and storage and tracking are the server's"
)


@app.command(name="serve")
def serve_command(
    host: Annotated[str, typer.Option(help="address the API listens on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="port the API listens on")] = 8000,
    db: ServiceDb = None,
    storage: Annotated[
        str | None,
        typer.Option(envvar="AUTOTUNE_STORAGE", help="SQLAlchemy URL of the studies"),
    ] = None,
    tracking_uri: Annotated[
        str | None, typer.Option(envvar="AUTOTUNE_TRACKING_URI", help="MLflow tracking URI")
    ] = None,
    experiment: Annotated[
        str | None, typer.Option(envvar="AUTOTUNE_EXPERIMENT", help="MLflow experiment")
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(envvar="AUTOTUNE_DATA_DIR", help="where uploads and job outputs are kept"),
    ] = None,
    models_root: Annotated[
        Path | None,
        typer.Option(
            envvar="AUTOTUNE_MODELS_ROOT",
            help="requests may name model and data files under this directory "
            "(without it: uploads, registered models and entry points only)",
        ),
    ] = None,
    trust: Annotated[
        list[str] | None,
        typer.Option(
            "--trust",
            envvar="AUTOTUNE_TRUST",
            help="a module prefix whose entry points requests may name; repeatable "
            "(the variable is comma-separated)",
        ),
    ] = None,
    max_upload_mb: Annotated[
        int | None, typer.Option(min=1, help="largest model upload, MiB (default 1024)")
    ] = None,
    api: Annotated[bool, typer.Option("--api/--no-api", help="serve the REST API")] = True,
    runners: Annotated[int, typer.Option(min=0, help="job runner processes (0: none here)")] = 1,
    scheduler: Annotated[
        bool, typer.Option("--scheduler/--no-scheduler", help="run the watch scheduler")
    ] = True,
    executor: Annotated[
        str | None, typer.Option(help="where trials run: 'ray' (default) or 'inprocess'")
    ] = None,
    ray_address: Annotated[
        str | None, typer.Option(envvar="AUTOTUNE_RAY_ADDRESS", help="join this Ray cluster")
    ] = None,
    workers: Annotated[int | None, typer.Option(min=1, help="trial slots of each job")] = None,
    lease_s: Annotated[
        float | None, typer.Option(min=0.1, help="seconds a runner's claim on a job lasts")
    ] = None,
    poll_s: Annotated[
        float | None, typer.Option(min=0.01, help="seconds between queue and schedule checks")
    ] = None,
    min_watch_every: Annotated[
        float | None,
        typer.Option(min=1.0, help="shortest interval, seconds, a watch may check at (default 60)"),
    ] = None,
    public_docs: Annotated[
        bool,
        typer.Option(
            "--public-docs",
            help="serve /docs, /redoc and /openapi.json without a token (a browser sends none)",
        ),
    ] = False,
) -> None:
    """Run the service: REST API, job runners and watch scheduler (each can be left out)."""
    from autotune.service.server import serve
    from autotune.service.settings import ServiceSettings

    given: dict[str, Any] = {
        "db": db,
        "storage": storage,
        "tracking_uri": tracking_uri,
        "experiment": experiment,
        "data_dir": data_dir,
        "models_root": models_root,
        "executor": executor,
        "ray_address": ray_address,
        "workers": workers,
        "lease_s": lease_s,
        "poll_s": poll_s,
        "max_upload_bytes": None if max_upload_mb is None else max_upload_mb << 20,
        "min_watch_every_s": min_watch_every,
        "public_docs": public_docs,
    }
    trusted = tuple(p.strip() for item in trust or [] for p in item.split(",") if p.strip())
    with _exit_codes():
        if executor not in (None, "ray", "inprocess"):
            raise RequestError("executor", "must be 'ray' or 'inprocess'", executor)
        if not (api or runners or scheduler):
            raise RequestError("serve", "must run the API, a job runner or the scheduler", None)
        settings = ServiceSettings(
            **{k: v for k, v in given.items() if v is not None}, trusted_modules=trusted
        )
        serve(settings, host, port, api=api, runners=runners, scheduler=scheduler)


@contextmanager
def _service_database(url: str | None, read_only: bool = False) -> Iterator[Any]:
    """The service database; `read_only` for a command that only reads: it must exist, and
    it is neither created nor migrated."""
    from autotune.service.db import Database
    from autotune.service.settings import ServiceSettings

    database = Database(url or ServiceSettings().db, read_only=read_only, field="--db")
    try:
        yield database
    finally:
        database.close()


@token_app.command("create")
def token_create(
    name: Annotated[str, typer.Argument(metavar="NAME", help="who the token is for")],
    team: Annotated[
        str | None, typer.Option(help="tokens of one team see each other's jobs")
    ] = None,
    db: ServiceDb = None,
) -> None:
    """Create a token and print it; it is shown this once (only its hash is stored)."""
    from autotune.service.tokens import create_token

    with _exit_codes(), _service_database(db) as database:
        secret = create_token(database, name, team)
    print(secret)
    err.print(
        "Shown once. A client passes it with --token, the AUTOTUNE_TOKEN variable "
        "(export AUTOTUNE_TOKEN=<token>) or the file ~/.config/autotune/token.",
        highlight=False,
    )


@token_app.command("revoke")
def token_revoke(
    name: Annotated[str, typer.Argument(metavar="NAME")],
    db: ServiceDb = None,
) -> None:
    """Revoke a token: the server refuses it from now on."""
    from autotune.service.tokens import revoke_token

    with _exit_codes(), _service_database(db) as database:
        revoke_token(database, name)
    err.print(f"token {name!r} revoked", highlight=False)


@token_app.command("list")
def token_list(db: ServiceDb = None, as_json: AsJson = False) -> None:
    """List the tokens (names, teams, whether revoked; never the secrets)."""
    from autotune.service.tokens import list_tokens

    with _exit_codes(), _service_database(db, read_only=True) as database:
        tokens = list_tokens(database)
    if as_json:
        print(json.dumps(tokens, indent=2))
        return
    table = Table(title=f"{len(tokens)} tokens")
    for column in ("name", "team", "created", "revoked"):
        table.add_column(column)
    for t in tokens:
        created = _iso(cast(float, t["created_at"]))
        table.add_row(str(t["name"]), str(t["team"] or ""), created, "yes" if t["revoked"] else "")
    out.print(table)


def _iso(epoch: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(epoch, tz=UTC).isoformat(timespec="seconds")


@contextmanager
def _service_client(server: str, token: str | None) -> Iterator[Any]:
    from autotune.service.client import ServiceClient, resolve_token

    with ServiceClient(server, resolve_token(token)) as client:
        yield client


@app.command()
def submit(
    request_file: Annotated[Path, typer.Argument(metavar="REQUEST.yaml", help=REQUEST_HELP)],
    server: Server,
    model: Annotated[
        Path | None,
        typer.Option(
            help="upload this model: ONNX, a zip of an ONNX model with its external data, "
            "or safetensors weights for the request's model.entry_point"
        ),
    ] = None,
    wait: Annotated[bool, typer.Option("--wait", help=WAIT_HELP)] = False,
    poll_s: PollSeconds = 2.0,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Submit a tuning job to a server; an identical submission answers with its job."""
    with _exit_codes(), _service_client(server, token) as client:
        submitted = client.submit(request_file, model)
        if as_json and not wait:
            print(json.dumps(submitted, indent=2))
        elif not as_json:
            note = "queued" if submitted["created"] else f"existing job ({submitted['state']})"
            out.print(f"job {submitted['id']}: {note}", highlight=False)
        if wait:
            _follow(client, submitted["id"], poll_s, as_json)


@app.command()
def status(
    job_id: Annotated[str, typer.Argument(metavar="JOB_ID")],
    server: Server,
    wait: Annotated[bool, typer.Option("--wait", help=WAIT_HELP)] = False,
    poll_s: PollSeconds = 2.0,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Show a job: state, progress and the best feasible configuration so far.

    With --wait --json the output is {"job": <status>, "result": <tuned config or null>}."""
    with _exit_codes(), _service_client(server, token) as client:
        if wait:
            _follow(client, job_id, poll_s, as_json)
            return
        current = client.status(job_id)
    if as_json:
        print(json.dumps(current, indent=2))
        return
    _print_status(current)


def _follow(client: Any, job_id: str, poll_s: float, as_json: bool) -> None:
    """Wait for the job's end, print its outcome, exit with its code."""
    try:
        if as_json:
            final = client.wait(job_id, poll_s)
        else:
            with _job_progress() as update:
                final = client.wait(job_id, poll_s, update)
    except KeyboardInterrupt:
        raise Interrupted(
            f"stopped following; job {job_id} goes on (autotune status {job_id} --wait)"
        ) from None
    result = client.result(job_id) if final["state"] == "succeeded" else None
    if as_json:
        print(json.dumps({"job": final, "result": result}, indent=2))
    elif result is not None:
        _print_tuned(result, final)
    code = {"succeeded": 0, "infeasible": EXIT_INFEASIBLE}.get(final["state"], 1)
    if code:
        if not as_json:
            reason = final["error"] or "no reason recorded"
            if final["state"] == "infeasible":
                reason = f"no configuration met the constraints ({reason})"
            err.print(f"[yellow]job {job_id} {final['state']}:[/yellow] {reason}", highlight=False)
        raise typer.Exit(code)


@contextmanager
def _job_progress() -> Iterator[Callable[[dict[str, Any]], None]]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = [
        TextColumn("job"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
    ]
    with Progress(*columns, console=err, transient=False) as progress:
        task = progress.add_task("", total=None)

        def update(current: dict[str, Any]) -> None:
            best = current["best"]
            text = current["state"]
            if best is not None:
                text += f", best p95 {best['metrics']['latency_p95_ms']:.3f} ms"
                text += f" (trial {best['trial']})"
            done = current["progress"]
            progress.update(
                task, total=done["budget"], completed=done["trials_done"], description=text
            )

        yield update


def _print_status(current: dict[str, Any]) -> None:
    done = current["progress"]
    budget = done["budget"] if done["budget"] is not None else "?"
    out.print(f"job {current['id']}: {current['state']}", highlight=False)
    out.print(f"  trials:  {done['trials_done']}/{budget}", highlight=False)
    best = current["best"]
    if best is not None:
        metrics = best["metrics"]
        out.print(
            f"  best so far: trial {best['trial']}, p95 {metrics['latency_p95_ms']:.3f} ms, "
            f"accuracy {metrics['accuracy']:.4f}",
            highlight=False,
        )
        for key, value in best["config"].items():
            out.print(f"    {key}: {_shown(value)}", highlight=False)
    times = [(k, current[f"{k}_at"]) for k in ("created", "started", "finished")]
    out.print("  " + ", ".join(f"{k} {v}" for k, v in times if v), highlight=False)
    out.print(f"  study:   {current['study']}", highlight=False)
    out.print(f"  model:   {current['model']['source']}", highlight=False)
    if current["registered_model"]:
        out.print(f"  registered: {current['registered_model']['uri']}", highlight=False)
    if current["cancel_requested"] and current["state"] == "running":
        out.print("  cancel requested: stops after the running trials", highlight=False)
    if current["error"]:
        out.print(f"  error:   {current['error']}", highlight=False)


def _print_tuned(tuned: dict[str, Any], final: dict[str, Any]) -> None:
    out.print(f"\n[bold]Chosen configuration[/bold] (trial {tuned['study']['trial_number']}):")
    for key, value in tuned["config"].items():
        out.print(f"  {key}: {_shown(value)}", highlight=False)
    _print_comparison(tuned["baseline"], tuned["metrics"])
    out.print(f"Optimized model: {tuned['artifact']}", highlight=False)
    if final["registered_model"]:
        out.print(f"Registered as:   {final['registered_model']['uri']}", highlight=False)
    if "headline" in tuned:  # results of jobs tuned before headlines existed have none
        out.print(f"Against the baseline: {tuned['headline']['text']}", highlight=False)


@app.command()
def watch(
    request_file: Annotated[Path, typer.Argument(metavar="REQUEST.yaml", help=REQUEST_HELP)],
    server: Server,
    every: Annotated[
        str | None,
        typer.Option(help="check this often: '90s', '30m', '6h' or '1d' (at least 60s by default)"),
    ] = None,
    cron: Annotated[
        str | None, typer.Option(help="check on this crontab schedule (UTC): '0 3 * * *'")
    ] = None,
    retune_trials: Annotated[
        int | None,
        typer.Option(min=1, help="trials of a re-tune (default: the previous front and a few)"),
    ] = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Re-tune on a schedule whenever the model or the hardware changed.

    Give exactly one of --every and --cron. The request names a model file under the
    server's models root or a registered model (models:/NAME@ALIAS); the first check, and
    so the first tuning, is due at once."""
    with _exit_codes(), _service_client(server, token) as client:
        created = client.create_watch(request_file, every, cron, retune_trials)
    if as_json:
        print(json.dumps(created, indent=2))
        return
    schedule = f"cron '{created['cron']}'" if created["cron"] else f"every {every}"
    out.print(f"watch {created['id']}: {schedule}, first check now", highlight=False)


@app.command()
def watches(server: Server, token: Token = None, as_json: AsJson = False) -> None:
    """List the watches this token can see."""
    with _exit_codes(), _service_client(server, token) as client:
        listed = client.list_watches()
    if as_json:
        print(json.dumps(listed, indent=2))
        return
    table = Table(title=f"{len(listed)} watches")
    for column in ("id", "request", "schedule", "next check", "last job"):
        table.add_column(column)
    for w in listed:
        schedule = f"cron {w['cron']}" if w["cron"] else f"every {w['every_s']:g}s"
        name = str(w["request"].get("name", ""))
        table.add_row(w["id"], name, schedule, w["next_run_at"], w["last_job_id"] or "")
    out.print(table)
