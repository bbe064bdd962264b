"""`autotune hardware` and `autotune space`: this machine's profile, and the search space
it leaves."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from autotune.cli.shared import _exit_codes, out


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


def space(
    space_file: Annotated[
        str | None, typer.Option("--space", help="space file (default: default.yaml)")
    ] = None,
    hardware_file: Annotated[
        Path | None, typer.Option("--hardware", help="a saved `autotune hardware --json` profile")
    ] = None,
    request_file: Annotated[
        Path | None,
        typer.Option(
            "--request",
            help="a request file: its model is inspected (what applies to it) and its space "
            "is the default",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print as JSON")] = False,
) -> None:
    """Print the effective search space for this machine (or a saved profile), and for a
    request's model when one is given."""
    from autotune.hardware import load_profile, probe
    from autotune.space import effective_space, load_space, resolve_space_path

    with _exit_codes():
        profile = load_profile(hardware_file) if hardware_file else probe()
        model = None
        if request_file is not None:
            space_file, model = _request_model(request_file, space_file)
        path = resolve_space_path(space_file)
        effective = effective_space(load_space(path), profile, str(path), model)
    if as_json:
        print(effective.model_dump_json(indent=2))
        return
    out.print(
        f"space {effective.name} ({effective.source}), hardware {effective.hardware_fingerprint}"
    )
    excluded: dict[str, list[str]] = {}
    for ex in effective.excluded:
        what = "all" if ex.value is None else str(ex.value)
        when = "".join(f" with {k}={v}" for k, v in ex.when.items())
        excluded.setdefault(ex.dimension, []).append(f"{what}{when}: {ex.reason}")
    for dim in effective.dimensions:
        values = dim.values if dim.values is not None else dim.range
        line = f"  {dim.name}: {values}"
        if dim.baseline is not None:
            line += f"  baseline {dim.baseline}"
        if dim.when:
            line += f"  when {dim.when}"
        if dim.contexts is not None:
            line += "  where " + " or ".join(_shown(c) for c in dim.contexts)
        out.print(line, highlight=False)
    for name, reasons in excluded.items():
        out.print(f"  [dim]{name}: excluded[/dim]", highlight=False)
        for reason in reasons:
            out.print(f"    [dim]{reason}[/dim]", highlight=False)


def _request_model(request_file: Path, space_file: str | None) -> tuple[str | None, Any]:
    """The request's space (unless one is named) and its model as a trial would see it."""
    from autotune.executors import InProcessExecutor
    from autotune.request import load_request

    request = load_request(request_file)
    workload = request.workload(request_file.resolve().parent)
    return space_file or request.search_space, InProcessExecutor().inspect(workload)


def _shown(context: dict[str, Any]) -> str:
    """The choices that are set (an unset one is another engine's option)."""
    return ", ".join(f"{k}={v}" for k, v in context.items() if v is not None)
