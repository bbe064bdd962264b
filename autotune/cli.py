"""The `autotune` command line."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from autotune.errors import AutotuneError, Interrupted, NoFeasibleConfiguration, RequestError

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


@contextmanager
def _exit_codes() -> Iterator[None]:
    try:
        yield
    except RequestError as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    except Interrupted as exc:
        err.print(f"[yellow]interrupted:[/yellow] {exc}", highlight=False)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except NoFeasibleConfiguration as exc:
        err.print(f"[yellow]no tuned configuration:[/yellow] {exc}", highlight=False)
        raise typer.Exit(EXIT_INFEASIBLE) from None
    except AutotuneError as exc:
        err.print(f"[red]failed:[/red] {exc}", highlight=False)
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
    out_file: Annotated[Path | None, typer.Option("--out", help="tuned-config file")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the tuned config as JSON")] = False,
) -> None:
    """Tune a model: search, measure, and write the tuned configuration."""
    from autotune.tuning import TuneOptions, run_tune

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
    )
    with _exit_codes():
        outcome, written = run_tune(request_file, options, progress=_progress_bar)
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
    finalists = [f["trial"] for rnd in revalidation["rounds"] for f in rnd]
    out.print(
        f"Re-measured with {revalidation['factor']:g}x the iterations: baseline and finalists "
        f"{finalists}; order changed: {revalidation['order_changed']}"
    )
    if revalidation["tied_with"]:
        out.print(
            f"[yellow]tied[/yellow] (p95 intervals overlap) with trials {revalidation['tied_with']}"
        )
    for note in outcome.notes:
        out.print(f"[yellow]note:[/yellow] {note}")
    out.print(f"\nTuned config:    {written}")
    out.print(f"Optimized model: {tuned.artifact}")
    out.print(
        f"MLflow run:      {tuned.mlflow['run_id']} (experiment {tuned.mlflow['experiment_id']})"
    )
    out.print(f"Open the UI:     mlflow ui --backend-store-uri {tuned.mlflow['tracking_uri']}")


@contextmanager
def _progress_bar(total: int | None) -> Iterator[Callable[[int, Any], None]]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = [
        TextColumn("tuning"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
    ]
    with Progress(*columns, console=err, transient=False) as progress:
        task = progress.add_task("", total=total)

        def update(done: int, result: Any) -> None:
            last = f"trial {result.trial_number}: {result.status}"
            if result.metrics is not None:
                last += f", p95 {result.metrics.latency_p95_ms:.3f} ms"
            progress.update(task, completed=done, description=last)

        yield update


def _print_front(front: list[Any], chosen: int | None) -> None:
    if not front:
        return
    keys = sorted({k for c in front for k in c.config})
    varying = [k for k in keys if len({str(c.config.get(k, "")) for c in front}) > 1]
    shared = {k: front[0].config.get(k) for k in keys if k not in varying}
    table = Table(title=f"Pareto front: {len(front)} feasible, non-dominated trials")
    table.add_column("trial", justify="right")
    for key in varying:
        table.add_column(key)
    for header in ("accuracy", "p95 ms", "samples/s", "J/sample"):
        table.add_column(header, justify="right")
    for c in sorted(front, key=lambda c: c.metrics["latency_p95_ms"]):
        mark = "*" if c.trial_number == chosen else ""
        table.add_row(
            f"{c.trial_number}{mark}",
            *(_shown(c.config.get(k, "")) for k in varying),
            f"{c.metrics['accuracy']:.4f}",
            f"{c.metrics['latency_p95_ms']:.3f}",
            f"{c.metrics['throughput_per_s']:.0f}",
            f"{c.metrics['energy_per_sample_j']:.2e}",
        )
    out.print(table)
    if shared:
        out.print("common to all: " + ", ".join(f"{k}={v}" for k, v in shared.items()))


def _shown(value: Any) -> str:
    """Floats from stepped ranges (0.30000000000000004) read as what they mean."""
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _print_comparison(baseline: dict[str, Any], tuned: dict[str, Any]) -> None:
    table = Table(title="Baseline vs tuned (re-measured)")
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
    """Print the feasible Pareto front of a stored study."""
    from autotune.tuning import study_front

    with _exit_codes():
        front = study_front(study_name, storage)
    if as_json:
        rows = [{"trial": c.trial_number, "config": c.config, "metrics": c.metrics} for c in front]
        print(json.dumps(rows, indent=2))
        return
    if not front:
        err.print("no feasible completed trials in this study")
        raise typer.Exit(EXIT_INFEASIBLE)
    _print_front(front, None)
