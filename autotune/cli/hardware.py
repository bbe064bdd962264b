"""`autotune hardware` and `autotune space`: the profile of the hardware that runs the trials
(this machine, or each kind of node of a Ray cluster), and the search space it leaves."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from autotune.cli.sensitivity import sensitivity_lines
from autotune.cli.shared import _exit_codes, out
from autotune.cli.tables import _shown
from autotune.core.contract import HardwareProfile, NodeKind
from autotune.space.hardware import load_profile

if TYPE_CHECKING:
    from autotune.space.search_space import EffectiveDimension, EffectiveSpace, Exclusion, Range


# Earlier choices (key: value), and every value the space offers for each key.
Context = dict[str, Any]
Choices = dict[str, set[Any]]

RayAddress = Annotated[
    str | None,
    typer.Option(help="a Ray cluster: its trial nodes, each probed on itself, by kind"),
]


def hardware(
    ray_address: RayAddress = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the profile as JSON")] = False,
) -> None:
    """Print the hardware profile of the trial nodes.

    The machine that would run the trials (this one), or each kind of node in a Ray cluster;
    the profile is probed by the data plane, on the node."""
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
    for hint in install_hints(profile):
        out.print(f"missing:      {hint}", markup=False, highlight=False)
    for note in profile.notes:
        out.print(f"note:         {note}")


def install_hints(profile: HardwareProfile) -> list[str]:
    """For each knob whose package is not installed on the node, what would let it be
    searched there: 'install autotune[openvino] to search runtime.engine=openvino (openvino is
    not installed)'."""
    from autotune.core.knobs import all_knobs

    return [
        f"{knob.package.install_hint(f'{knob.key}={knob.name}')} "
        f"({knob.package.module} is not installed)"
        for knob in all_knobs()
        if knob.package is not None and knob.package.module in profile.missing_modules
    ]


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
    """Print the effective search space of the trial nodes.

    For the machine that would run the trials (this one, each kind of node of a Ray cluster,
    or a saved profile), and for a request's model when one is given."""
    from autotune.execution.ray_cluster import parse_workers
    from autotune.execution.ray_executor import survey_kinds
    from autotune.space.search_space import effective_space, load_space, resolve_space_path

    with _exit_codes():
        if hardware_file is not None:
            kinds = [NodeKind.one_node(load_profile(hardware_file), "saved")]
        else:
            kinds = survey_kinds(ray_address, parse_workers(workers))
        model, storage = None, None
        if request_file is not None:
            space_file, model, storage = _request_model(request_file, space_file)
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
        if model is not None and storage is not None:
            for line in sensitivity_lines(effective, model.sha256, storage):
                _print_wrapped(line)


def _print_space(effective: EffectiveSpace) -> None:
    """Each dimension as `name: values; baseline; when ...`, then per dimension what is
    excluded: one line per reason, after the values it excludes. A line longer than the
    terminal wraps between words, never inside a value, indented under its start."""
    _print_wrapped(
        f"space {effective.name} ({effective.source}), hardware {effective.hardware_fingerprint}"
    )
    for dim in effective.dimensions:
        _print_wrapped(f"  {dim.name}: {_dimension_text(dim)}")
    for name, lines in _excluded_by_reason(effective).items():
        _print_wrapped(f"  {name}: excluded", style="dim")
        for line in lines:
            _print_wrapped(f"    {line}", style="dim")


def _print_wrapped(line: str, style: str | None = None) -> None:
    indent = " " * (len(line) - len(line.lstrip()) + 4)
    wrapped = textwrap.fill(
        line,
        width=out.width,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    )
    out.print(wrapped, style=style, markup=False, highlight=False, soft_wrap=True)


def _dimension_text(dim: EffectiveDimension) -> str:
    """`values; baseline B; when K is V or W, and ...` in words, not Python reprs."""
    if dim.values is not None:
        parts = [", ".join(_shown(v) for v in dim.values)]
    else:
        assert dim.range is not None
        parts = [_range_text(dim.range)]
    if dim.baseline is not None:
        parts.append(f"baseline {_shown(dim.baseline)}")
    conditions = [_one_of(key, values) for key, values in dim.when.items()]
    if dim.contexts is not None and all(dim.contexts):
        conditions.append(_contexts_text(dim.contexts))
    if conditions:
        parts.append("when " + ", and ".join(conditions))
    return "; ".join(parts)


def _range_text(span: Range) -> str:
    text = f"{_shown(span.low)} to {_shown(span.high)}"
    if span.step is not None:
        text += f" in steps of {_shown(span.step)}"
    if span.log:
        text += " on a log scale"
    return f"whole numbers {text}" if span.integer else text


def _one_of(key: str, values: list[Any]) -> str:
    return f"{key} is {' or '.join(_shown(v) for v in values)}"


def _contexts_text(contexts: list[dict[str, Any]]) -> str:
    """The earlier choices under which a dimension is active: `K is A or B` where each is one
    value of the same key, else each context's choices joined."""
    chosen = [{k: v for k, v in c.items() if v is not None} for c in contexts]
    keys = {k for c in chosen for k in c}
    if len(keys) == 1 and all(len(c) == 1 for c in chosen):
        (key,) = keys
        return _one_of(key, [c[key] for c in chosen])
    return " or ".join(_all_of(c) for c in chosen)


def _all_of(context: dict[str, Any]) -> str:
    text = " and ".join(f"{k}={_shown(v)}" for k, v in context.items())
    return f"({text})" if len(context) > 1 else text


def _excluded_by_reason(effective: EffectiveSpace) -> dict[str, list[str]]:
    """Per dimension, one `values: reason` line per distinct reason, the values in the
    order they were excluded."""
    choices: Choices = {}
    for dim in effective.dimensions:
        choices.setdefault(dim.name, set()).update(dim.values or [])
    grouped: dict[str, dict[str, dict[str, list[Context]]]] = {}
    for exclusion in effective.excluded:
        value = "all" if exclusion.value is None else _shown(exclusion.value)
        for reason in _reasons(exclusion):
            by_value = grouped.setdefault(exclusion.dimension, {}).setdefault(reason, {})
            under = {k: v for k, v in exclusion.when.items() if f"{k}={_shown(v)}" not in reason}
            by_value.setdefault(value, []).append(under)
    return {
        name: [_excluded_line(by_value, reason, choices) for reason, by_value in reasons.items()]
        for name, reasons in grouped.items()
    }


def _excluded_line(by_value: dict[str, list[Context]], reason: str, choices: Choices) -> str:
    """`values when <the earlier choices they are out under>; ...: reason`; the choices are
    left out where the reason names them or they cover every choice."""
    values_under: dict[str, list[str]] = {}
    for value, contexts in by_value.items():
        reduced = _reduced(contexts, choices)
        values_under.setdefault(_contexts_text(reduced) if all(reduced) else "", []).append(value)
    labels = [
        ", ".join(values) + (f" when {under}" if under else "")
        for under, values in values_under.items()
    ]
    return f"{'; '.join(labels)}: {reason}"


def _reduced(contexts: list[Context], choices: Choices) -> list[Context]:
    """The same contexts over fewer keys: a key is dropped where, whatever the rest of a
    context, it takes every value the space offers (it makes no difference there)."""
    for key in sorted({k for c in contexts for k in c}):
        rests: dict[tuple[tuple[str, Any], ...], set[Any]] = {}
        for context in contexts:
            rest = tuple(sorted((k, v) for k, v in context.items() if k != key))
            rests.setdefault(rest, set()).add(context.get(key))
        if key in choices and all(None in v or v >= choices[key] for v in rests.values()):
            contexts = [dict(rest) for rest in rests]
    return contexts


def _reasons(exclusion: Exclusion) -> list[str]:
    """The reasons an exclusion gives (joined by '; ', each starting `dimension=value`),
    each without that start: the line names the value."""
    if exclusion.value is None:
        return [exclusion.reason]
    subject = re.escape(f"{exclusion.dimension}={exclusion.value}") + r"(?=[\s:])"
    parts = re.split(rf"; (?={subject})", exclusion.reason)
    return [re.sub(rf"^{subject}:?\s*", "", part) for part in parts]


def _request_model(request_file: Path, space_file: str | None) -> tuple[str | None, Any, str]:
    """The request's space (unless one is named), its model as a trial would see it, and the
    storage of its studies."""
    from autotune.execution.in_process import InProcessExecutor
    from autotune.requests.request import load_request

    request = load_request(request_file)
    workload = request.workload(request_file.resolve().parent)
    model = InProcessExecutor().inspect(workload).model
    return space_file or request.search_space, model, request.storage
