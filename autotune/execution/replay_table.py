"""Tuning against recorded measurements: a table answers the trials instead of a device.

`autotune tune REQUEST.yaml --replay TABLE.csv` runs the normal coordinator (baseline first,
ask/tell, constraints, re-validation, MLflow, tuned file) with a `ReplayExecutor`, so search
strategies can be compared on recorded data without spending device time.

The table is CSV, one row per configuration:

- dimension columns, named as configuration keys (`runtime.engine`, `batch.size`,
  `prune.ratio`, ...). A conditional dimension that is inactive for a row is an empty cell.
  Cells are read back as bool (`true`/`false`), int (`8`), float (`0.3`) or text.
- `status` (optional): `ok` (also an empty cell or no column), `unsupported`, `oom`,
  `timeout` or `error`; `reason` (optional) says why.
- metric columns named as `TrialMetrics` fields (`accuracy`, `latency_p50_ms`,
  `latency_p90_ms`, `latency_p95_ms`, `latency_p99_ms`, `latency_mean_ms`, `latency_cv`,
  `throughput_per_s`, `energy_per_sample_j`, `energy_source`, `peak_memory_mb`,
  `measure_seconds`, ...), and the measured metrics carried in their map
  (`autotune.core.metrics.mapped_metrics`, e.g. `cpu_time_per_sample_ms`). An ok row needs
  `accuracy` and `latency_p95_ms`; what a row leaves out is filled so that nothing is
  invented beyond what the row implies (a measured metric of the map is not filled): p50,
  p90, p99 and mean latency = p95; `latency_cv` 0; `throughput_per_s` = 1000 * batch.size / p95
  (1000 / p95 without a `batch.size` column); `latency_per_sample_ms` = 1000 /
  `throughput_per_s` (recorded or filled); `energy_per_sample_j` 0 with `energy_source`
  `estimate` (an unlabelled energy figure is an `estimate` too); `peak_memory_mb` 0;
  `iterations` 1; `measure_seconds` 0 (what measuring the row cost, on any row).

What a worker reads besides the full measurement comes from the same rows
(`autotune.execution.replay_window`): a screening window's calls are drawn from a row's
recorded spread (`latency_p50_ms` and `latency_p95_ms`; a row with only a p95 has none), and
the baseline's batch scan reads the call time (`latency_p50_ms`) of the rows of its
configuration at the scanned batch sizes, leaving out a batch the table has no row for.

A configuration is in the table when a row's non-empty dimension cells are exactly the
configuration (8 matches 8.0; a stepped range's 0.30000000000000004 matches 0.3). Any other
configuration is answered `unsupported`, "not in the replay table".

The table's own space (`ReplayTable.space`) is categorical over the values each column holds,
sorted. A column with empty cells gets a `when` on one other column when it is non-empty
exactly where that column takes certain values (`prune.ratio` when `prune.method` is
`magnitude` or `structured`); a table whose empty cells follow no such single column is refused,
and `--space` gives the structure instead (`ReplayTable.space_from`: the space file's
dimensions, their values narrowed to those in the table, the table standing in for the
hardware filter). The baseline of the table's space is an ok row: per column (parents first)
`fp32`, `none` or `torch_eager` where present, else the smallest value; with `--space` it is
the space's baseline, which must be an ok row.

Nothing is probed: the hardware profile is a stand-in whose fingerprint, like the model's
sha256, follows the table's content, so a study's identity follows its table.
"""

from __future__ import annotations

import csv
import hashlib
import io
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from autotune.core.contract import (
    ConfigValue,
    DataRef,
    HardwareProfile,
    ModelRef,
    TrialMetrics,
    TrialStatus,
    Workload,
)
from autotune.core.errors import RequestError
from autotune.core.knobs import DEFAULTS
from autotune.core.knobs.config import default_engine
from autotune.core.metrics import (
    ACCURACY,
    LATENCY_P50,
    LATENCY_P90,
    LATENCY_P95,
    LATENCY_P99,
    METRICS,
    THROUGHPUT,
    mapped_metrics,
)
from autotune.space.search_space import (
    DIMENSION_NAME,
    Dimension,
    EffectiveDimension,
    EffectiveSpace,
    Exclusion,
    SpaceFile,
    effective_space,
)

STATUSES: tuple[TrialStatus, ...] = ("ok", "unsupported", "oom", "timeout", "error", "too_slow")


REQUIRED_METRICS = (ACCURACY.name, LATENCY_P95.name)


METRIC_COLUMNS = frozenset(TrialMetrics.model_fields) - {"measured"} | frozenset(mapped_metrics())


TEXT_METRICS = frozenset({"energy_source", "stopped_by"})


# The knobs' defaults and a torch model's default engine: what the unmodified model runs.
BASELINE_VALUES = (*DEFAULTS.values(), default_engine("torch"))


NOT_IN_TABLE = "not in the replay table"


_DIMENSION = re.compile(DIMENSION_NAME)


_INT = re.compile(r"^[+-]?\d+$")


_FLOAT = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


Condition = dict[str, list[ConfigValue]]


def parse_value(cell: str) -> ConfigValue:
    text = cell.strip()
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    if _INT.match(text):
        return int(text)
    if _FLOAT.match(text):
        return float(text)
    return text


def _norm(value: ConfigValue) -> tuple[str, ConfigValue]:
    """A value as the table compares and sorts it; True never equals 1."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float):
        return ("number", round(float(value), 9))
    return ("text", value)


def _key(config: dict[str, ConfigValue]) -> frozenset[tuple[str, tuple[str, ConfigValue]]]:
    return frozenset((name, _norm(value)) for name, value in config.items())


def _distinct_sorted(values: list[ConfigValue]) -> list[ConfigValue]:
    unique: dict[tuple[str, ConfigValue], ConfigValue] = {}
    for value in values:
        unique.setdefault(_norm(value), value)
    return [unique[k] for k in sorted(unique)]


@dataclass(frozen=True)
class ReplayRow:
    line: int
    config: dict[str, ConfigValue]
    status: TrialStatus
    reason: str | None
    metrics: TrialMetrics | None
    measure_seconds: float


class ReplayTable:
    """Recorded measurements, one row per configuration (format: the module docstring)."""

    def __init__(self, path: Path, sha256: str, dimensions: list[str], rows: list[ReplayRow]):
        self.path = path
        self.sha256 = sha256
        self.dimensions = dimensions
        self.rows = rows
        self.fingerprint = self.profile().fingerprint
        self._index: dict[frozenset[Any], ReplayRow] = {}
        for row in rows:
            first = self._index.setdefault(_key(row.config), row)
            if first is not row:
                rule = f"repeats the configuration of line {first.line}"
                raise RequestError(f"{path.name} line {row.line}", rule, row.config)

    @classmethod
    def load(cls, path: Path) -> ReplayTable:
        if not path.is_file():
            raise RequestError("replay", "must be an existing CSV file", str(path))
        payload = path.read_bytes()
        try:
            reader = csv.reader(io.StringIO(payload.decode("utf-8-sig")))
        except UnicodeDecodeError:
            raise RequestError("replay", "must be UTF-8 text", str(path)) from None
        header = [c.strip() for c in next(reader, [])]
        dimensions = _dimension_columns(path.name, header)
        rows = []
        for cells in reader:
            if any(c.strip() for c in cells):
                rows.append(_parse_row(path.name, reader.line_num, header, cells, dimensions))
        # A column empty on every row is set by no configuration: it is not searched.
        dimensions = [d for d in dimensions if any(d in row.config for row in rows)]
        return cls(path.resolve(), hashlib.sha256(payload).hexdigest(), dimensions, rows)

    def lookup(self, config: dict[str, ConfigValue]) -> ReplayRow | None:
        return self._index.get(_key(config))

    def values(self, dimension: str) -> list[ConfigValue]:
        return _distinct_sorted([r.config[dimension] for r in self.rows if dimension in r.config])

    def profile(self) -> HardwareProfile:
        """A stand-in for the machine that recorded the table; its fingerprint follows the
        table's content."""
        return HardwareProfile(
            hostname="replay",
            cpu_model=f"replay:{self.sha256[:8]}",
            cpu_cores=1,
            memory_mb=1,
            cpu_flags=[],
            notes=[f"replayed from {self.path}; no hardware was probed"],
        )

    def workload(self) -> Workload:
        """A placeholder naming the table: a replay never loads a model or data."""
        table = str(self.path)
        return Workload(model=ModelRef(onnx=table), data=DataRef(npz=table))

    def space(self, name: str) -> EffectiveSpace:
        """Every column categorical over its values, conditions inferred (module docstring)."""
        conditions = self._conditions()
        baseline = self._baseline_row(list(conditions))
        dimensions = [
            EffectiveDimension(
                name=dim,
                values=self.values(dim),
                range=None,
                baseline=baseline.config.get(dim),
                when=when,
            )
            for dim, when in conditions.items()
        ]
        return EffectiveSpace(
            name=name,
            source=str(self.path),
            hardware_fingerprint=self.fingerprint,
            dimensions=dimensions,
            excluded=[],
        )

    def space_from(self, space: SpaceFile, source: str) -> EffectiveSpace:
        """A space file's dimensions with their values narrowed to the table's (no hardware
        filter: the table says what the hardware ran); its baseline must be an ok row."""
        missing = [d for d in self.dimensions if d not in {s.name for s in space.dimensions}]
        if missing:
            raise RequestError("search_space", f"must have the table's columns {missing}", source)
        kept, excluded = [], []
        for dim in space.dimensions:
            if dim.name not in self.dimensions:
                excluded.append(Exclusion(dimension=dim.name, value=None, reason=NOT_IN_TABLE))
                continue
            present = {_norm(v) for v in self.values(dim.name)}
            values = [v for v in dim.values or [] if _norm(v) in present]
            absent = [v for v in dim.values or [] if _norm(v) not in present]
            excluded += [
                Exclusion(dimension=dim.name, value=v, reason=NOT_IN_TABLE) for v in absent
            ]
            if dim.values is None or values:
                kept.append(_unrestricted(dim, values if dim.values is not None else None))
        narrowed = space.model_copy(update={"dimensions": kept})
        effective = effective_space(narrowed, self.profile(), source, apply_knob_rules=False)
        baseline = effective.baseline()
        row = self.lookup(baseline)
        if row is None or row.status != "ok":
            raise RequestError(
                "search_space", "its baseline must be an ok row of the table", baseline
            )
        return effective.model_copy(update={"excluded": excluded})

    def _conditions(self) -> dict[str, Condition]:
        """Each column's `when`, parents before their children."""
        placed: dict[str, Condition] = {
            d: {} for d in self.dimensions if all(d in r.config for r in self.rows)
        }
        waiting = [d for d in self.dimensions if d not in placed]
        while waiting:
            found = {d: c for d in waiting if (c := self._condition(d, list(placed))) is not None}
            if not found:
                rule = (
                    "is empty on rows that no single other column sets apart; "
                    "give --space with its 'when'"
                )
                raise RequestError(f"{self.path.name}, {waiting[0]}", rule, "")
            placed.update(found)
            waiting = [d for d in waiting if d not in found]
        return placed

    def _condition(self, dimension: str, parents: list[str]) -> Condition | None:
        """`{parent: values}` when `dimension` is set exactly where `parent` takes `values`."""
        for parent in parents:
            active = [r.config.get(parent) for r in self.rows if dimension in r.config]
            inactive = [r.config.get(parent) for r in self.rows if dimension not in r.config]
            if any(v is None for v in active):
                continue
            on = {_norm(v) for v in active if v is not None}
            if not on & {_norm(v) for v in inactive if v is not None}:
                return {parent: _distinct_sorted([v for v in active if v is not None])}
        return None

    def _baseline_row(self, order: list[str]) -> ReplayRow:
        ok = [r for r in self.rows if r.status == "ok"]
        if not ok:
            raise RequestError(self.path.name, "must have an ok row (for the baseline)", 0)
        ranks = {
            d: {_norm(v): (v not in BASELINE_VALUES, i) for i, v in enumerate(self.values(d))}
            for d in order
        }

        def rank(row: ReplayRow) -> list[tuple[bool, int]]:
            return [
                ranks[d][_norm(row.config[d])] if d in row.config else (False, -1) for d in order
            ]

        return min(ok, key=rank)


def _unrestricted(dim: Dimension, values: list[ConfigValue] | None) -> Dimension:
    """`dim` with `values`, its baseline preferences among them, and no hardware limits."""
    preferences = [
        p for p in dim.baseline_preferences() if p == "max" or values is None or p in values
    ]
    return dim.model_copy(
        update={
            "values": values,
            "requires": [],
            "value_requires": {},
            "at_most": None,
            "baseline": None if dim.baseline is None else preferences,
        }
    )


def _dimension_columns(name: str, header: list[str]) -> list[str]:
    known = METRIC_COLUMNS | {"status", "reason"}
    for column in header:
        if header.count(column) > 1:
            raise RequestError(f"{name}, {column}", "must be a column only once", column)
        if column not in known and not _DIMENSION.match(column):
            rule = "must be a dimension (group.param), a metric, 'status' or 'reason'"
            raise RequestError(f"{name}, {column}", rule, column)
    dimensions = [c for c in header if c not in known]
    if not dimensions:
        raise RequestError(name, "must have a dimension column (group.param)", header)
    return dimensions


def _where(name: str, line: int, column: str) -> str:
    return f"{name} line {line}, {column}"


def _parse_row(
    name: str, line: int, header: list[str], cells: list[str], dimensions: list[str]
) -> ReplayRow:
    if len(cells) != len(header):
        raise RequestError(f"{name} line {line}", f"must have {len(header)} cells", len(cells))
    row = dict(zip(header, cells, strict=True))
    config = {d: parse_value(row[d]) for d in dimensions if row[d].strip()}
    text = row.get("status", "").strip() or "ok"
    status = next((s for s in STATUSES if s == text), None)
    if status is None:
        raise RequestError(_where(name, line, "status"), f"must be one of {list(STATUSES)}", text)
    recorded = {
        c: _metric(_where(name, line, c), c, v)
        for c, v in row.items()
        if c in METRIC_COLUMNS and v.strip()
    }
    seconds = float(recorded.get("measure_seconds", 0.0))
    if seconds < 0:
        raise RequestError(_where(name, line, "measure_seconds"), "must be >= 0", seconds)
    reason = row.get("reason", "").strip() or None
    if status != "ok":
        reason = reason or f"recorded as {status} in the replay table"
        return ReplayRow(line, config, status, reason, None, seconds)
    metrics = _metrics(name, line, recorded, config)
    return ReplayRow(line, config, status, reason, metrics, seconds)


def _metric(where: str, column: str, cell: str) -> ConfigValue:
    if column in TEXT_METRICS:
        return cell.strip()
    value = parse_value(cell)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RequestError(where, "must be a number", cell)
    return value


def _metrics(
    name: str, line: int, recorded: dict[str, ConfigValue], config: dict[str, ConfigValue]
) -> TrialMetrics:
    for column in REQUIRED_METRICS:
        if column not in recorded:
            raise RequestError(_where(name, line, column), "is required for an ok row", "")
    p95 = float(recorded[LATENCY_P95.name])
    if p95 <= 0:
        raise RequestError(_where(name, line, LATENCY_P95.name), "must be > 0", p95)
    batch = config.get("batch.size", 1)
    samples = float(batch) if isinstance(batch, int | float) else 1.0
    unrecorded = {m.name: m.unrecorded for m in METRICS.values() if m.unrecorded is not None}
    filled: dict[str, Any] = {
        **unrecorded,
        **{m.name: p95 for m in (LATENCY_P50, LATENCY_P90, LATENCY_P99)},
        "latency_mean_ms": p95,
        THROUGHPUT.name: 1000.0 * samples / p95,
        "energy_source": "estimate",
        "iterations": 1,
        "measure_seconds": 0.0,
    }
    try:
        return TrialMetrics.model_validate({**filled, **recorded})
    except ValidationError as exc:
        first = exc.errors()[0]
        column = ".".join(str(p) for p in first["loc"])
        raise RequestError(_where(name, line, column), first["msg"], first.get("input")) from None
