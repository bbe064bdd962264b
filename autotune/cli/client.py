"""The commands that talk to an autotune server: submit, status, watch and watches."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from autotune.cli.shared import EXIT_INFEASIBLE, AsJson, Trials, _exit_codes, err, out
from autotune.cli.tables import _print_comparison, _shown
from autotune.cli.tune import head_to_head_line, mlflow_run_line
from autotune.core.errors import Interrupted
from autotune.service.changes import describe_change, mlflow_run

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
PollSeconds = Annotated[float, typer.Option(min=0.01, help="seconds between checks with --wait")]
WAIT_HELP = "follow the job to its end; exit 0 succeeded, 3 infeasible, 1 failed or cancelled"
# Ids are shown by a prefix of at least this many characters (`status` takes a prefix).
SHORT_ID = 8
# The checks of each watch that `watches` prints, the newest.
RECENT_CHECKS = 5
REQUEST_HELP = (
    "the request file; it is read here and sent to the server, where relative paths in it "
    "name files under the server's models root, entry points must be in modules the server "
    "trusts, and storage and tracking are the server's"
)


@contextmanager
def _service_client(server: str, token: str | None) -> Iterator[Any]:
    from autotune.service.client import ServiceClient, resolve_token

    with ServiceClient(server, resolve_token(token)) as client:
        yield client


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
    trials: Trials = None,
    wait: Annotated[bool, typer.Option("--wait", help=WAIT_HELP)] = False,
    poll_s: PollSeconds = 2.0,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Submit a tuning job to a server.

    An identical submission answers with its job. With --wait, the end shows the chosen
    configuration, why it was chosen and its MLflow run."""
    with _exit_codes(), _service_client(server, token) as client:
        submitted = client.submit(request_file, model, trials)
        if as_json and not wait:
            print(json.dumps(submitted, indent=2))
        elif not as_json:
            note = "queued" if submitted["created"] else f"existing job ({submitted['state']})"
            out.print(f"job {submitted['id']}: {note}", highlight=False)
        if wait:
            _follow(client, submitted["id"], poll_s, as_json)


def status(
    job_id: Annotated[
        str, typer.Argument(metavar="JOB_ID", help="the job's id or its first 4+ characters")
    ],
    server: Server,
    wait: Annotated[bool, typer.Option("--wait", help=WAIT_HELP)] = False,
    poll_s: PollSeconds = 2.0,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Show a job's state, progress and best configuration.

    The best is the best feasible configuration so far; a re-tune's first line says which
    job it re-tunes and what changed. With --wait --json the output is
    {"job": <status>, "result": <tuned config or null>}."""
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
    else:
        _print_retune(final)
    if result is not None and not as_json:
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


def _print_retune(current: dict[str, Any]) -> None:
    """'re-tune of JOB (watch W): what changed', for a job a watch submitted on a change."""
    retune = current["retune"]
    if retune is None:
        return
    of = f" of {retune['of'][:SHORT_ID]}" if retune["of"] else ""
    watch = current["watch_id"][:SHORT_ID]
    out.print(f"re-tune{of} (watch {watch}): {describe_change(retune)}", highlight=False)


def _print_status(current: dict[str, Any]) -> None:
    _print_retune(current)
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
    if "revalidation" in tuned:  # results of jobs tuned before head-to-heads have none
        out.print(escape(head_to_head_line(tuned["revalidation"])), highlight=False)
    out.print(f"Optimized model: {tuned['artifact']}", highlight=False)
    if final["registered_model"]:
        out.print(f"Registered as:   {final['registered_model']['uri']}", highlight=False)
    run = mlflow_run(tuned["mlflow"])
    out.print(mlflow_run_line(run), highlight=False)
    if run["link"] is not None:
        out.print(f"Open the run:    {run['link']}", highlight=False, soft_wrap=True)
    if "headline" in tuned:  # results of jobs tuned before headlines existed have none
        out.print(f"Against the baseline: {tuned['headline']['text']}", highlight=False)
    if "previous" in tuned:  # a re-tune's: its choice against the previous one, paired
        out.print(f"Against the previous choice: {tuned['previous']['text']}", highlight=False)


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
    notify: Annotated[
        str | None,
        typer.Option(metavar="URL", help="post each of its jobs' ends here as JSON"),
    ] = None,
    trials: Trials = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Re-tune on a schedule when the model or hardware changed.

    Give exactly one of --every and --cron. The request names a model file under the
    server's models root or a registered model (models:/NAME@ALIAS); the first check, and
    so the first tuning, is due at once."""
    with _exit_codes(), _service_client(server, token) as client:
        created = client.create_watch(request_file, every, cron, retune_trials, notify, trials)
    if as_json:
        print(json.dumps(created, indent=2))
        return
    schedule = f"cron '{created['cron']}'" if created["cron"] else f"every {every}"
    out.print(f"watch {created['id']}: {schedule}, first check now", highlight=False)


def watches(server: Server, token: Token = None, as_json: AsJson = False) -> None:
    """List the watches and their latest checks.

    The watches are those this token can see. Ids are shown by their first characters,
    enough to tell them apart; `autotune status` takes such a prefix of a job's id, and
    --json shows the whole ids."""
    with _exit_codes(), _service_client(server, token) as client:
        listed = client.list_watches()
    if as_json:
        print(json.dumps(listed, indent=2))
        return
    checks = [c for w in listed for c in w["checks"]]
    short = _prefixes(
        [w["id"] for w in listed]
        + [w["last_job_id"] for w in listed]
        + [c["job_id"] for c in checks]
    )
    table = Table(title=f"{len(listed)} watches")
    for column in ("id", "request", "schedule", "next check (UTC)", "last job"):
        table.add_column(column, no_wrap=column in ("id", "last job"))
    for w in listed:
        schedule = f"cron {w['cron']}" if w["cron"] else f"every {w['every_s']:g}s"
        name = str(w["request"].get("name", ""))
        next_check = _when(w["next_run_at"])
        table.add_row(short(w["id"]), name, schedule, next_check, short(w["last_job_id"]))
    out.print(table)
    for w in listed:
        if w["checks"]:
            out.print(f"watch {short(w['id'])}, latest checks:", highlight=False)
        for check in w["checks"][:RECENT_CHECKS]:
            line = f"  {_when(check['checked_at'])}  {_check_text(check, short)}"
            out.print(line, highlight=False)


def _prefixes(ids: Iterable[str | None]) -> Callable[[str | None], str]:
    """Each id's shortest prefix, of SHORT_ID characters or more, that no other id shares."""
    distinct = {i for i in ids if i}
    length = next(
        (n for n in range(SHORT_ID, 33) if len({i[:n] for i in distinct}) == len(distinct)), 32
    )
    return lambda i: i[:length] if i else ""


def _when(iso: str) -> str:
    return datetime.fromisoformat(iso).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _check_text(check: dict[str, Any], short: Callable[[str | None], str]) -> str:
    if check["outcome"] == "unchanged":
        return "unchanged"
    if check["outcome"] == "error":
        return f"could not check: {check['note']}"
    return f"{describe_change(check['change'])}; job {short(check['job_id'])}"
