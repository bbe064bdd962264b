"""The tables that more than one command prints: the Pareto front (the search's
measurements), and the baseline against the tuned configuration (their head-to-head's paired
rounds). Each kind of figure has its own title, so that the baseline's two sets of figures are
never taken for one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich import box
from rich.measure import Measurement
from rich.table import Table

from autotune.cli.shared import out
from autotune.core.metrics import (
    DIMENSIONLESS,
    LATENCY_PER_SAMPLE,
    METRICS,
    OBJECTIVES,
    Metric,
    with_derived,
)
from autotune.search.unmet import figure

if TYPE_CHECKING:
    from autotune.results.records import Candidate


def _front_metrics(front: list[Candidate], compact: bool) -> list[Metric]:
    """The front's metric columns: every objective a request may name that the front's trials
    have (the cost only with a price), once each. Latency per sample (throughput's
    reciprocal) is left out where the table would not fit."""
    metrics = list(dict.fromkeys(OBJECTIVES.values()))
    present = [m for m in metrics if all(m.name in with_derived(c.metrics) for c in front)]
    return [m for m in present if not (compact and m is LATENCY_PER_SAMPLE)]


def _print_front(
    front: list[Candidate], chosen: int | None, baseline: Candidate | None = None
) -> None:
    """The front, whole at any width of 80 columns or more: a column per varying dimension
    where that fits unfolded, else one column listing them (and no ms-per-sample column). The
    chosen trial and the baseline are marked, the baseline added as a last row where it is
    not on the front, and each mark is explained under the table."""
    if not front:
        return
    on_front = {c.trial_number for c in front}
    added = baseline if baseline is not None and baseline.trial_number not in on_front else None
    rows = [*sorted(front, key=lambda c: c.metrics["latency_p95_ms"]), *filter(None, [added])]
    keys = sorted({k for c in rows for k in c.config})
    varying = [k for k in keys if len({_cell(c, k) for c in rows}) > 1]
    shared = {k: _cell(rows[0], k) for k in keys if k not in varying and _cell(rows[0], k)}
    marks = _marks(rows, chosen, baseline)
    table = _front_table(rows, marks, varying, added is not None, compact=False)
    # The width the table takes unfolded (not clamped to the console): rich's minimum is
    # less than that, and a table at its minimum cuts cells short ("onnxrun…").
    unbounded = out.options.update_width(1 << 20)
    if Measurement.get(out, unbounded, table).maximum > out.width:
        table = _front_table(rows, marks, varying, added is not None, compact=True)
    out.print(table)
    legend = _legend(marks, added is not None)
    if legend:
        out.print(legend, highlight=False)
    if shared:
        out.print("common to all: " + ", ".join(f"{k}={v}" for k, v in shared.items()))


def _cell(candidate: Candidate, key: str) -> str:
    """A dimension's value as a cell shows it; '' where the trial does not set it."""
    value = candidate.config.get(key)
    return "" if value is None else _shown(value)


# The titles of the two kinds of figure: each trial's as the search measured it, and the
# baseline's and the chosen configuration's measured again head to head.
FRONT_TITLE = "Pareto front (search measurements)"
HEAD_TO_HEAD_TITLE = "Head to head (paired rounds): baseline vs tuned"


# The marks after a trial's number, and what the legend under the table says of each.
CHOSEN_MARK, BASELINE_MARK = "*", "b"


def _marks(rows: list[Candidate], chosen: int | None, baseline: Candidate | None) -> dict[int, str]:
    base = None if baseline is None else baseline.trial_number
    marks = {
        c.trial_number: (CHOSEN_MARK if c.trial_number == chosen else "")
        + (BASELINE_MARK if c.trial_number == base else "")
        for c in rows
    }
    return {number: mark for number, mark in marks.items() if mark}


def _legend(marks: dict[int, str], baseline_added: bool) -> str:
    shown = "".join(marks.values())
    parts = []
    if CHOSEN_MARK in shown:
        parts.append(f"{CHOSEN_MARK} chosen: the configuration the head-to-head returned")
    if BASELINE_MARK in shown:
        where = ", not on the front (shown to compare)" if baseline_added else ""
        parts.append(f"{BASELINE_MARK} baseline: the unmodified model{where}")
    return "; ".join(parts)


def _front_table(
    rows: list[Candidate],
    marks: dict[int, str],
    varying: list[str],
    baseline_added: bool,
    compact: bool,
) -> Table:
    on_front = len(rows) - baseline_added
    title = f"{FRONT_TITLE}: {on_front} feasible, non-dominated trial{'s' * (on_front != 1)}"
    title += ", and the baseline" if baseline_added else ""
    # Rows of several lines (compact) are set apart by a blank line.
    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", show_lines=compact)
    table.add_column("trial", justify="right", no_wrap=True)
    headers = _dimension_headers(varying)
    if compact:
        table.add_column("configuration")
    for key in [] if compact else varying:
        table.add_column(_two_lines(headers[key]))
    metrics = _front_metrics(rows, compact)
    for metric in metrics:
        table.add_column(metric.column, justify="right")
    for index, c in enumerate(rows):
        values = [_cell(c, k) for k in varying]
        if compact:
            values = [
                "\n".join(f"{headers[k]} {v}" for k, v in zip(varying, values, strict=True) if v)
            ]
        if index == on_front:
            table.add_section()
        figures = with_derived(c.metrics)
        table.add_row(
            f"{c.trial_number}{marks.get(c.trial_number, '')}",
            *values,
            *(_figure(float(figures[m.name]), m) for m in metrics),
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
    """The baseline against the tuned configuration, a row per figure either has, each
    labelled in words with its unit (a figure one of them lacks: n/a)."""
    table = Table(title=HEAD_TO_HEAD_TITLE, title_justify="left")
    for column in ("figure", "baseline", "tuned"):
        # folded, never cut short, where the console is narrower than the table
        table.add_column(column, overflow="fold", justify="left" if column == "figure" else "right")
    for key, value in tuned.items():
        base = baseline.get(key)
        if value is None and base is None:
            continue
        table.add_row(_label(key), _value(key, base), _value(key, value))
    out.print(table)


# The tuned file's figures that are not registered metrics, in words.
_LABELS = {
    "accuracy_judged_by": "accuracy judged by",
    "energy_source": "energy source",
    "latency_p95_ci_ms": "p95 latency 95% CI, ms",
    "iterations": "timed iterations",
    "measure_seconds": "seconds measuring",
    "stopped_by": "timing stopped by",
    "peak_device_memory_mb": "peak device memory, MiB",
    "energy_per_1000_samples_j": "energy per 1,000 samples, J",
    "co2e_g_per_million_samples": "CO2e per 1M samples, g",
}


def _label(key: str) -> str:
    """A figure's name in a few words with its unit: `p95 latency per call, ms`."""
    metric = METRICS.get(key)
    if metric is None:
        return _LABELS.get(key, key.replace("_", " "))
    if metric.unit in DIMENSIONLESS or metric.unit.startswith("per "):
        return metric.label
    return f"{metric.label}, {metric.unit}"


def _value(key: str, value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, list):
        return "–".join(_value(key, v) for v in value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    return _figure(value, METRICS.get(key))


def _figure(value: float, metric: Metric | None) -> str:
    """A number in plain digits, the thousands separated: in its metric's fixed decimals
    where it has them (`0.9500`, `1,981`), else to four significant digits (`0.0101`)."""
    if metric is not None and metric.number_format.endswith("f"):
        return format(value, "," + metric.number_format)
    return figure(value)
