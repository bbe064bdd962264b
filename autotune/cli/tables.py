"""The tables that more than one command prints: the Pareto front, and the baseline against
the tuned configuration."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.measure import Measurement
from rich.table import Table

from autotune.cli.shared import out
from autotune.core.metrics import LATENCY_PER_SAMPLE, OBJECTIVES, Metric, with_derived


def _front_metrics(front: list[Any], compact: bool) -> list[Metric]:
    """The front's metric columns: every objective a request may name that the front's trials
    have (the cost only with a price), once each. Latency per sample (throughput's
    reciprocal) is left out where the table would not fit."""
    metrics = list(dict.fromkeys(OBJECTIVES.values()))
    present = [m for m in metrics if all(m.name in with_derived(c.metrics) for c in front)]
    return [m for m in present if not (compact and m is LATENCY_PER_SAMPLE)]


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
    metrics = _front_metrics(front, compact)
    for metric in metrics:
        table.add_column(metric.column, justify="right")
    for c in sorted(front, key=lambda c: c.metrics["latency_p95_ms"]):
        values = [_shown(c.config.get(k, "")) for k in varying]
        if compact:
            values = ["\n".join(f"{headers[k]} {v}" for k, v in zip(varying, values, strict=True))]
        mark = "*" if c.trial_number == chosen else ""
        figures = with_derived(c.metrics)
        table.add_row(
            f"{c.trial_number}{mark}", *values, *(m.shown(float(figures[m.name])) for m in metrics)
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
