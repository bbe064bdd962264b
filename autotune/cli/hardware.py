"""`autotune hardware` and `autotune space`: the profile of the hardware that runs the trials
(this machine, or each kind of node of a Ray cluster), and the search space it leaves."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from autotune.cli.shared import _exit_codes, out
from autotune.core.contract import HardwareProfile, NodeKind
from autotune.space.hardware import load_profile

if TYPE_CHECKING:
    from autotune.space.search_space import EffectiveSpace


RayAddress = Annotated[
    str | None,
    typer.Option(help="a Ray cluster: its trial nodes, each probed on itself, by kind"),
]


def hardware(
    ray_address: RayAddress = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the profile as JSON")] = False,
) -> None:
    """Print the hardware profile of the machine that would run the trials (this one), or of
    each kind of node in a Ray cluster. The profile is probed by the data plane, on the node."""
    from autotune.execution.ray_executor import survey_kinds

    with _exit_codes():
        kinds = survey_kinds(ray_address, "auto")
    if as_json:
        if ray_address is None:
            print(kinds[0].profile.model_dump_json(indent=2))  # what --hardware reads back
        else:
            print(json.dumps([_kind_json(kind) for kind in kinds], indent=2))
        return
    for kind in kinds:
        if ray_address is not None:
            _print_nodes(kind)
        _print_profile(kind.profile)


def _kind_json(kind: NodeKind) -> dict[str, Any]:
    return {
        "fingerprint": kind.fingerprint,
        "cpus_per_slot": kind.cpus_per_slot,
        "nodes": [node.model_dump(mode="json") for node in kind.nodes],
        "profile": kind.profile.model_dump(mode="json"),
    }


def _print_nodes(kind: NodeKind) -> None:
    out.print(
        f"\n[bold]kind {kind.fingerprint}[/bold]: {len(kind.nodes)} node(s), {kind.slots} slot(s)"
    )
    for node in kind.nodes:
        labels = ", ".join(f"{k}={v}" for k, v in node.labels.items())
        out.print(
            f"  node {node.node_id[:12]} {node.hostname}: {node.cpus} CPUs, {node.gpus} GPUs, "
            f"{node.slots} slot(s){f'; {labels}' if labels else ''}",
            highlight=False,
        )


def _print_profile(profile: HardwareProfile) -> None:
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
    ray_address: RayAddress = None,
    workers: Annotated[
        str, typer.Option(help="with --ray-address: trial slots on each kind, or 'auto'")
    ] = "auto",
    as_json: Annotated[bool, typer.Option("--json", help="print as JSON")] = False,
) -> None:
    """Print the effective search space for the machine that would run the trials (this one,
    each kind of node of a Ray cluster, or a saved profile), and for a request's model when
    one is given."""
    from autotune.execution.ray_cluster import parse_workers
    from autotune.execution.ray_executor import survey_kinds
    from autotune.space.search_space import effective_space, load_space, resolve_space_path

    with _exit_codes():
        if hardware_file is not None:
            kinds = [NodeKind.one_node(load_profile(hardware_file), "saved")]
        else:
            kinds = survey_kinds(ray_address, parse_workers(workers))
        model = None
        if request_file is not None:
            space_file, model = _request_model(request_file, space_file)
        path = resolve_space_path(space_file)
        spaces = [
            effective_space(
                load_space(path), kind.profile, str(path), model, cores_per_slot=kind.cpus_per_slot
            )
            for kind in kinds
        ]
    if as_json:
        if ray_address is None:
            print(spaces[0].model_dump_json(indent=2))
        else:
            shown = [
                {**_kind_json(kind), "space": space.model_dump(mode="json")}
                for kind, space in zip(kinds, spaces, strict=True)
            ]
            print(json.dumps(shown, indent=2))
        return
    for kind, effective in zip(kinds, spaces, strict=True):
        if ray_address is not None:
            _print_nodes(kind)
        _print_space(effective)


def _print_space(effective: EffectiveSpace) -> None:
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
    from autotune.execution.in_process import InProcessExecutor
    from autotune.requests.request import load_request

    request = load_request(request_file)
    workload = request.workload(request_file.resolve().parent)
    return space_file or request.search_space, InProcessExecutor().inspect(workload).model


def _shown(context: dict[str, Any]) -> str:
    """The choices that are set (an unset one is another engine's option)."""
    return ", ".join(f"{k}={v}" for k, v in context.items() if v is not None)
