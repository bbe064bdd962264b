"""Record an exhaustive measurement table: every configuration of a table's effective space,
measured once with autotune's own trial runner, one CSV row each.

    python -m experiments.tables.record {digits,minilm} [--out experiments/tables/NAME.csv]
                                                        [--limit N]

The space is the table's space file (`TABLES[name].space_file`, the search_spaces/ format)
filtered by the probed hardware and the model, as `autotune tune` filters it. Trials run one
at a time in this process (`InProcessExecutor`); accuracy is judged once per model variant
(`variant_key`) and handed to the variant's later trials as `known_accuracy`, as the
coordinator does. Rows are appended as they are measured: run the same command again to
resume an interrupted recording (configurations already in the file are skipped). A sidecar
`NAME.md` next to the CSV names the machine, the command, the settings and the outcome.

The CSV: one column per dimension (named as the configuration key; empty where a `when`
condition leaves the dimension inactive), `status` and `reason` of the TrialResult, the
metric columns (`METRIC_COLUMNS`, empty unless the status is ok) and `measure_seconds`, the
trial's wall time (build, evaluation and timing).
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from autotune.core.contract import (
    ConfigValue,
    DataRef,
    HardwareProfile,
    MeasurementSettings,
    MetricRef,
    ModelRef,
    TrialResult,
    TrialSpec,
    Workload,
)
from autotune.core.knobs import variant_key
from autotune.execution.in_process import InProcessExecutor
from autotune.space.search_space import (
    EffectiveDimension,
    EffectiveSpace,
    effective_space,
    load_space,
)

TABLES_DIR = Path(__file__).resolve().parent
REPO = TABLES_DIR.parents[1]

METRIC_COLUMNS = (
    "accuracy",
    "latency_p50_ms",
    "latency_p90_ms",
    "latency_p95_ms",
    "latency_p99_ms",
    "latency_mean_ms",
    "latency_cv",
    "throughput_per_s",
    "energy_per_sample_j",
    "energy_source",
    "peak_memory_mb",
)
STATUS_COLUMNS = ("status", "reason")
COST_COLUMN = "measure_seconds"

Config = dict[str, ConfigValue]


@dataclass(frozen=True)
class Table:
    name: str
    space_file: Path
    workload: Workload
    measurement: MeasurementSettings

    @property
    def default_out(self) -> Path:
        return TABLES_DIR / f"{self.name}.csv"


def _entry_points(module: str, metric: Literal["accuracy", "fidelity"]) -> Workload:
    return Workload(
        model=ModelRef(entry_point=f"{module}:build_model"),
        data=DataRef(entry_point=f"{module}:eval_data"),
        metric=MetricRef(kind=metric),
        python_path=[str(REPO)],
    )


# Short but real: each call's batch is timed at least 30 times and 0.1 s, or until the cap.
SHORT = MeasurementSettings(warmup_iters=5, min_iters=30, min_seconds=0.1, max_seconds=0.5)

TABLES = {
    "digits": Table(
        name="digits",
        space_file=TABLES_DIR / "digits-space.yaml",
        workload=_entry_points("experiments.digits.model", "accuracy"),
        measurement=SHORT,
    ),
    "minilm": Table(
        name="minilm",
        space_file=TABLES_DIR / "minilm-space.yaml",
        workload=_entry_points("experiments.minilm.model", "fidelity"),
        # A MiniLM call takes up to ~200 ms: a longer cap leaves some calls to time.
        measurement=SHORT.model_copy(update={"max_seconds": 1.5}),
    ),
}


def configurations(space: EffectiveSpace) -> list[Config]:
    """Every configuration of the space, the first dimension varying slowest; a dimension whose
    `when` condition a configuration does not meet is left out of it, not multiplied out."""
    configs: list[Config] = [{}]
    for dim in space.dimensions:
        values = _listed_values(dim)
        configs = [
            extended
            for config in configs
            for extended in (
                [{**config, dim.name: v} for v in values] if dim.active(config) else [config]
            )
        ]
    return configs


def _listed_values(dim: EffectiveDimension) -> list[ConfigValue]:
    if dim.values is None:
        raise ValueError(f"{dim.name}: a table's space needs listed values, not a range")
    return dim.values


def header(space: EffectiveSpace) -> list[str]:
    return [*(d.name for d in space.dimensions), *STATUS_COLUMNS, *METRIC_COLUMNS, COST_COLUMN]


def cells(config: Mapping[str, ConfigValue], dimensions: list[str]) -> tuple[str, ...]:
    """A configuration as the CSV spells it: one cell per dimension, empty when inactive."""
    return tuple(str(config[name]) if name in config else "" for name in dimensions)


def row(config: Config, result: TrialResult, dimensions: list[str]) -> dict[str, str]:
    values = dict(zip(dimensions, cells(config, dimensions), strict=True))
    values.update(status=result.status, reason=result.reason or "")
    metrics = result.metrics.model_dump() if result.metrics is not None else {}
    values.update({name: str(metrics.get(name, "")) for name in METRIC_COLUMNS})
    values[COST_COLUMN] = str(result.duration_s)
    return values


def read_rows(path: Path, expected_header: list[str]) -> list[dict[str, str]]:
    """The rows already in `path` (none if it is missing or empty); its header must match."""
    if not path.is_file() or path.stat().st_size == 0:
        return []
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        if reader.fieldnames != expected_header:
            raise SystemExit(
                f"{path}: its header {reader.fieldnames} is not this table's {expected_header}; "
                "choose another --out"
            )
        return list(reader)


@dataclass
class Recording:
    """What one invocation did, for the sidecar."""

    table: Table
    out: Path
    space: EffectiveSpace
    profile: HardwareProfile
    space_size: int
    total: int
    already: int = 0
    measured: int = 0
    started: float = 0.0
    wall_s: float = 0.0


def record(table: Table, out: Path, limit: int | None) -> Recording:
    """Measure the configurations (the first `limit` of them) that `out` does not hold yet."""
    started = time.time()
    executor = InProcessExecutor()
    try:
        inspection = executor.inspect(table.workload)
        info, profile = inspection.model, inspection.kinds[0].profile
        source = _shown(table.space_file)
        # Every combination, those the knobs refuse included: a table records what each
        # configuration does, and a refusal is a row with its reason.
        space = effective_space(
            load_space(table.space_file), profile, source, info, apply_knob_rules=False
        )
        every = configurations(space)
        configs = every[:limit]
        recording = Recording(table, out, space, profile, len(every), len(configs), started=started)
        _run(executor, recording, configs)
    finally:
        executor.close()
    recording.wall_s = time.time() - recording.started
    return recording


def _run(executor: InProcessExecutor, recording: Recording, configs: list[Config]) -> None:
    fields = header(recording.space)
    dimensions = [d.name for d in recording.space.dimensions]
    done = {cells(r, dimensions): r for r in read_rows(recording.out, fields)}
    accuracy: dict[str, float] = {}
    recording.out.parent.mkdir(parents=True, exist_ok=True)
    with recording.out.open("a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        if not done:
            writer.writeheader()
        for number, config in enumerate(configs):
            previous = done.get(cells(config, dimensions))
            if previous is not None:
                recording.already += 1
                if previous["status"] == "ok":
                    accuracy.setdefault(variant_key(config), float(previous["accuracy"]))
                continue
            spec = _spec(recording.table, number, config, accuracy.get(variant_key(config)))
            result = _measure(executor, spec)
            if result.metrics is not None:
                accuracy.setdefault(result.variant_key, result.metrics.accuracy)
            writer.writerow(row(config, result, dimensions))
            handle.flush()
            recording.measured += 1
            _progress(recording, number, config, result)


def _spec(table: Table, number: int, config: Config, known: float | None) -> TrialSpec:
    return TrialSpec(
        study=f"table-{table.name}",
        trial_number=number,
        workload=table.workload,
        config=config,
        measurement=table.measurement,
        known_accuracy=known,
    )


def _measure(executor: InProcessExecutor, spec: TrialSpec) -> TrialResult:
    executor.submit(spec)
    (result,) = executor.wait()
    return result


def _progress(recording: Recording, number: int, config: Config, result: TrialResult) -> None:
    elapsed = time.time() - recording.started
    remaining = recording.total - recording.already - recording.measured
    left = elapsed / recording.measured * remaining
    shown = " ".join(f"{key.split('.', 1)[1]}={value}" for key, value in config.items())
    outcome: str = result.status
    if result.metrics is not None:
        m = result.metrics
        outcome += f" acc {m.accuracy:.4f} p95 {m.latency_p95_ms:.3f} ms"
    print(
        f"[{number + 1:4d}/{recording.total}] {shown}: {outcome} ({result.duration_s:.1f} s; "
        f"{_clock(elapsed)} elapsed, ~{_clock(left)} left)",
        flush=True,
    )


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}:{secs:02d}"


def _shown(path: Path) -> str:
    """A path relative to the repository where it lies inside it."""
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


# --- the sidecar --------------------------------------------------------------------------------


def sidecar(recording: Recording, command: str, context: dict[str, str]) -> str:
    """The markdown that describes the CSV as it now stands."""
    rows = read_rows(recording.out, header(recording.space))
    statuses = Counter(r["status"] for r in rows)
    sources = sorted({r["energy_source"] for r in rows if r["energy_source"]})
    cost = sum(float(r[COST_COLUMN]) for r in rows)
    settings = recording.table.measurement
    return "\n".join(
        [
            f"# Measurement table `{recording.out.name}`: {recording.table.name}, every "
            "configuration of its space",
            "",
            f"Command: `{command}` (niceness {context['niceness']}), started {context['date']}.",
            "",
            "Machine:",
            *machine(recording.profile, sources),
            f"- load average (1 min) before / after: {context['load_before']} / "
            f"{context['load_after']}; other processes' CPU before the run: "
            f"{context['neighbours_before']}; after: {context['neighbours_after']}",
            "",
            *_space_lines(recording),
            "",
            f"Measurement settings: `{settings.model_dump_json()}`; one trial at a time in one "
            "process (`InProcessExecutor`); accuracy "
            f"({recording.table.workload.metric.kind}) judged once per model variant and reused "
            "as `known_accuracy`. Peak memory is the resident memory of that long-lived process.",
            "",
            f"Rows: {len(rows)}; the space has {recording.space_size} configurations — "
            + ", ".join(f"{status} {count}" for status, count in statuses.most_common())
            + ".",
            "",
            f"Wall time of this invocation: {_clock(recording.wall_s)} (min:s) for "
            f"{recording.measured} rows measured, {recording.already} already in the file; sum of "
            f"`measure_seconds` over all rows: {cost:.0f} s.",
            "",
            REPLAY_NOTE,
            "",
        ]
    )


# How a replay reads the table beyond its rows' figures (autotune.execution.replay_window).
REPLAY_NOTE = (
    "Replayed (`autotune tune --replay`, `experiments/search_benchmark.py`): a trial's "
    "screening window is drawn from its row's spread, log-normal with the row's "
    "`latency_p50_ms` as median and sigma = ln(p95 / p50) / 1.645, seeded by the study and "
    "trial; the baseline's batch scan reads `latency_p50_ms` of the rows of its configuration "
    "at the larger batch sizes (a batch without a row is left out of the scan)."
)


def _space_lines(recording: Recording) -> list[str]:
    lines = [
        f"Space: `{recording.space.source}` (effective on this machine for this model):",
    ]
    for dim in recording.space.dimensions:
        when = f" when {dim.when}" if dim.when else ""
        lines.append(f"- `{dim.name}`: {dim.values}{when}")
    for excluded in recording.space.excluded:
        lines.append(f"- excluded `{excluded.dimension}` {excluded.value}: {excluded.reason}")
    return lines


def machine(profile: HardwareProfile, energy_sources: list[str]) -> list[str]:
    from experiments.measurement_spread import machine as described

    gpus = ", ".join(g.name for g in profile.gpus) or "none"
    return [
        *described(),
        f"- GPUs: {gpus}; ONNX Runtime providers: {', '.join(profile.onnxruntime_providers)}",
        f"- energy source of the rows: {', '.join(energy_sources) or 'no ok row'}",
    ]


def _load(when: str) -> dict[str, str]:
    """The machine's load around the recording: load average and the busiest other processes."""
    from experiments.measurement_spread import busy_neighbours

    return {f"load_{when}": f"{os.getloadavg()[0]:.2f}", f"neighbours_{when}": busy_neighbours()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m experiments.tables.record")
    parser.add_argument("table", choices=sorted(TABLES))
    parser.add_argument("--out", type=Path, help="the CSV (default experiments/tables/NAME.csv)")
    parser.add_argument("--limit", type=int, help="record only the first N configurations")
    args = parser.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be at least 1")
    table = TABLES[args.table]
    out: Path = args.out or table.default_out
    command = " ".join(["python -m experiments.tables.record", *(argv or sys.argv[1:])])
    context = {
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "niceness": str(os.nice(0)),
        **_load("before"),
    }
    recording = record(table, out, args.limit)
    context.update(_load("after"))
    out.with_suffix(".md").write_text(sidecar(recording, command, context))
    print(f"{out}: {recording.measured} rows measured in {_clock(recording.wall_s)}")


if __name__ == "__main__":
    main()
