"""Tuning against a recorded table: the real coordinator, trials answered on a simulated clock."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import pytest
from typer.testing import CliRunner

from autotune.cli import app
from autotune.core.contract import TrialResult
from autotune.core.errors import AutotuneError, RequestError
from autotune.execution import built_in
from autotune.execution.replay import ReplayExecutor
from autotune.execution.replay_table import NOT_IN_TABLE, ReplayTable
from autotune.results import TrialRecord
from autotune.space.search_space import load_space
from autotune.tuning import TuneOptions, run_tune
from tests.conftest import REPO, stored_trials
from tests.replay_tables import (
    BASELINE,
    COLUMNS,
    CONSTRAINTS,
    TRIALS,
    config_of,
    recorded_rows,
    spec,
    write_request,
    write_table,
)

runner = CliRunner()


class RecordingExecutor(ReplayExecutor):
    """Keeps every result it hands back, in the order it handed them back."""

    last: RecordingExecutor | None = None

    def __init__(self, table: ReplayTable, slots: int = 1) -> None:
        super().__init__(table, slots)
        self.returned: list[TrialResult] = []
        RecordingExecutor.last = self

    def wait(self) -> list[TrialResult]:
        results = super().wait()
        self.returned.extend(results)
        return results


@dataclass
class Replayed:
    tuned: dict[str, Any]
    trials: list[TrialRecord]
    executor: RecordingExecutor


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> Replayed:
    """One replayed tune through the command line, on three simulated slots."""
    directory = tmp_path_factory.mktemp("replay")
    table = write_table(directory / "table.csv", recorded_rows())
    storage = f"sqlite:///{directory / 'study.db'}"
    args = ["tune", str(write_request(directory)), "--replay", str(table)]
    args += ["--storage", storage, "--study", "s", "--workers", "3"]
    args += ["--sampler", "random", "--seed", "0", "--json"]
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(directory)
        patch.setattr(built_in, "ReplayExecutor", RecordingExecutor)
        result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert RecordingExecutor.last is not None
    return Replayed(json.loads(result.stdout), stored_trials(storage, "s"), RecordingExecutor.last)


LABELS = ("Tuned config:", "Optimized model:", "Open the UI:")


@pytest.mark.slow
def test_paths_and_the_ui_command_are_printed_whole_however_long(tmp_path: Path) -> None:
    """Lines a user copies (the tuned file, the model, the UI command) are never folded at
    the console's width, however deep the directory."""
    directory = tmp_path / ("deep-" * 40)
    directory.mkdir()
    table = write_table(directory / "table.csv", recorded_rows())
    args = ["tune", str(write_request(directory)), "--replay", str(table)]
    args += ["--storage", f"sqlite:///{directory / 'study.db'}", "--sampler", "random"]
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(directory)
        result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    lines = dict(
        line.split(":", 1) for line in result.stdout.splitlines() if line.startswith(LABELS)
    )
    for label in ("Tuned config", "Optimized model"):
        assert (directory / lines[label].strip()).is_file(), lines[label]
    assert f"--backend-store-uri sqlite:///{directory}" in lines["Open the UI"]


@pytest.mark.slow
def test_tuned_config_is_the_best_feasible_row(replayed: Replayed) -> None:
    rows = recorded_rows()
    baseline = next(r for r in rows if config_of(r) == BASELINE)
    feasible = [
        r
        for r in rows
        if r["status"] == "ok"
        and baseline["accuracy"] - r["accuracy"] <= CONSTRAINTS["max_accuracy_drop"]
        and 1000 * r["batch.size"] / r["latency_p95_ms"] >= CONSTRAINTS["min_throughput_per_s"]
    ]
    best = min(feasible, key=lambda r: r["latency_p95_ms"])
    tuned = replayed.tuned
    assert tuned["config"] == config_of(best)
    assert tuned["metrics"]["latency_p95_ms"] == best["latency_p95_ms"]
    assert tuned["metrics"]["throughput_per_s"] == pytest.approx(8000 / best["latency_p95_ms"])
    assert tuned["metrics"]["energy_source"] == "estimate"
    assert tuned["baseline"]["accuracy"] == baseline["accuracy"]
    assert all(c["met"] for c in tuned["constraints"].values())
    artifact = json.loads(Path(tuned["artifact"]).read_text())
    assert artifact["config"] == config_of(best)


@pytest.mark.slow
def test_trials_read_back_in_order_and_unrecorded_ones_are_unsupported(
    replayed: Replayed,
) -> None:
    recorded = {json.dumps(config_of(r), sort_keys=True): r for r in recorded_rows()}
    trials = replayed.trials
    assert [t.number for t in trials] == list(range(TRIALS))
    assert trials[0].marks.baseline is True
    assert trials[0].config == BASELINE
    unrecorded = 0
    for trial in trials:
        row = recorded.get(json.dumps(trial.config, sort_keys=True))
        if row is None:
            unrecorded += 1
            assert trial.state == "pruned"
            assert trial.reason == NOT_IN_TABLE
        elif row["status"] == "unsupported":
            assert trial.state == "pruned"
            assert trial.reason == row["reason"]
        elif trial.status == "screened":  # its short window: never on a front
            assert trial.state == "pruned"
            assert trial.metrics is not None and trial.metrics["accuracy"] == row["accuracy"]
        else:
            assert trial.state == "complete"
            assert trial.metrics is not None and trial.metrics["accuracy"] == row["accuracy"]
    assert unrecorded > 0


@pytest.mark.slow
def test_slots_finish_out_of_order_and_every_trial_is_told_once(replayed: Replayed) -> None:
    executor = replayed.executor
    searched = [r.trial_number for r in executor.returned if r.attempt == 0]
    assert sorted(searched) == list(range(TRIALS))
    assert searched != sorted(searched)
    assert sum(t.counted for t in replayed.trials) == len(replayed.trials) == TRIALS
    assert executor.measurements == TRIALS
    assert executor.remeasurements >= 2  # the baseline and the choice, measured again
    assert 0 < executor.simulated_seconds < sum(r.duration_s for r in executor.returned)


def test_executor_answers_on_a_simulated_clock(tmp_path: Path) -> None:
    rows = [
        {**BASELINE, "status": "ok", "accuracy": 0.9, "latency_p95_ms": 2.0, "measure_seconds": s}
        for s in (30, 1, 10)
    ]
    for row, batch in zip(rows, (1, 2, 4), strict=True):
        row["batch.size"] = batch
    table = ReplayTable.load(write_table(tmp_path / "t.csv", rows))
    executor = ReplayExecutor(table, slots=3)
    for number, row in enumerate(rows):
        executor.submit(spec(table, number, config_of(row), known_accuracy=0.1))
    with pytest.raises(AutotuneError, match="no idle slot"):
        executor.submit(spec(table, 9, config_of(rows[0])))
    first = executor.wait()
    assert [r.trial_number for r in first] == [1]
    assert executor.simulated_seconds == 1
    assert first[0].duration_s == 1
    assert first[0].metrics is not None and first[0].metrics.accuracy == 0.9  # the table's
    executor.submit(spec(table, 3, {**BASELINE, "batch.size": 16}))  # not recorded: at once
    assert [(r.trial_number, r.status) for r in executor.wait()] == [(3, "unsupported")]
    executor.submit(spec(table, 4, config_of(rows[0]), timeout_s=5))
    assert [(r.trial_number, r.status) for r in executor.wait()] == [(4, "timeout")]
    assert executor.simulated_seconds == 6
    assert [r.trial_number for r in executor.wait()] == [2]
    assert [r.trial_number for r in executor.wait()] == [0]
    assert executor.simulated_seconds == 30
    assert executor.wait() == []


def test_request_without_model_and_data_needs_replay(tmp_path: Path) -> None:
    result = runner.invoke(app, ["tune", str(write_request(tmp_path))])
    assert result.exit_code == 2
    assert "model: is required (except with --replay)" in result.output


def test_table_space_infers_the_condition_and_the_baseline(tmp_path: Path) -> None:
    table = ReplayTable.load(write_table(tmp_path / "t.csv", recorded_rows()))
    space = table.space("t")
    dims = {d.name: d for d in space.dimensions}
    assert [d.name for d in space.dimensions] == table.dimensions
    assert dims["prune.ratio"].when == {"prune.method": ["magnitude"]}
    assert dims["prune.ratio"].values == [0.3, 0.6]
    assert dims["runtime.engine"].values == ["onnxruntime", "torch_eager"]
    assert space.baseline() == BASELINE
    row = table.lookup({**BASELINE, "batch.size": 8.0})
    assert row is not None and row.config["batch.size"] == 8
    assert table.lookup({**BASELINE, "prune.ratio": 0.3}) is None


def test_empty_cells_without_a_single_parent_are_refused(tmp_path: Path) -> None:
    rows = [
        {"runtime.engine": "a", "batch.size": 1, "prune.ratio": 0.5},
        {"runtime.engine": "a", "batch.size": 2, "prune.ratio": ""},
        {"runtime.engine": "b", "batch.size": 1, "prune.ratio": ""},
        {"runtime.engine": "b", "batch.size": 2, "prune.ratio": 0.5},
    ]
    for row in rows:
        row.update(accuracy=0.9, latency_p95_ms=1.0)
    table = ReplayTable.load(write_table(tmp_path / "t.csv", rows))
    with pytest.raises(RequestError) as info:
        table.space("t")
    assert info.value.field == "t.csv, prune.ratio"
    assert "--space" in info.value.rule


SPACE = """
name: replayed-space
dimensions:
  - {name: runtime.engine, values: [onnxruntime, torch_eager, torch_compile],
     baseline: [torch_compile, torch_eager]}
  - {name: batch.size, values: [1, 8, 64], baseline: 1, at_most: batch_memory}
  - {name: precision.mode, values: [fp32, fp16], baseline: fp32, requires: [cuda]}
  - {name: prune.method, values: [none, magnitude], baseline: none}
  - {name: prune.ratio, range: {low: 0.3, high: 0.6, step: 0.3},
     when: {prune.method: [magnitude]}}
"""


def test_space_file_is_narrowed_to_the_table(tmp_path: Path) -> None:
    table = ReplayTable.load(write_table(tmp_path / "t.csv", recorded_rows()))
    (tmp_path / "space.yaml").write_text(SPACE)
    space = table.space_from(load_space(tmp_path / "space.yaml"), "space.yaml")
    dims = {d.name: d for d in space.dimensions}
    assert dims["runtime.engine"].values == ["onnxruntime", "torch_eager"]
    assert dims["batch.size"].values == [1, 8]
    assert dims["prune.ratio"].range is not None
    assert "precision.mode" not in dims
    assert {(e.dimension, e.value) for e in space.excluded} == {
        ("runtime.engine", "torch_compile"),
        ("batch.size", 64),
        ("precision.mode", None),
    }
    assert space.baseline() == BASELINE
    rows = recorded_rows()
    for row in rows:
        if config_of(row) == {**BASELINE, "batch.size": 8}:
            row["status"] = "oom"
    table = ReplayTable.load(write_table(tmp_path / "t.csv", rows))
    (tmp_path / "space.yaml").write_text(SPACE.replace("baseline: 1,", "baseline: 8,"))
    with pytest.raises(RequestError, match="baseline must be an ok row"):
        table.space_from(load_space(tmp_path / "space.yaml"), "space.yaml")


GOOD = {**BASELINE, "accuracy": 0.9, "latency_p95_ms": 2.0}


@pytest.mark.parametrize(
    ("rows", "field", "rule"),
    [
        (
            [GOOD, {**GOOD, "batch.size": 1.0}],
            "t.csv line 3",
            "repeats the configuration of line 2",
        ),
        ([GOOD, {**GOOD, "accuracy": ""}], "t.csv line 3, accuracy", "is required for an ok row"),
        ([{**GOOD, "status": "broken"}], "t.csv line 2, status", "must be one of"),
        ([{**GOOD, "latency_p95_ms": "fast"}], "t.csv line 2, latency_p95_ms", "a number"),
        ([{**GOOD, "energy_source": "guess"}], "t.csv line 2, energy_source", "Input should be"),
    ],
)
def test_table_errors_name_the_line_and_column(
    tmp_path: Path, rows: list[dict[str, Any]], field: str, rule: str
) -> None:
    columns = [*COLUMNS, "energy_source"]
    with pytest.raises(RequestError) as info:
        ReplayTable.load(write_table(tmp_path / "t.csv", rows, columns))
    assert info.value.field == field
    assert rule in info.value.rule


@pytest.mark.parametrize(
    ("columns", "field"),
    [
        (["accuracy", "latency_p95_ms"], "t.csv"),
        (["batch.size", "latency_p99"], "t.csv, latency_p99"),
    ],
)
def test_table_columns_must_be_known(tmp_path: Path, columns: list[str], field: str) -> None:
    (tmp_path / "t.csv").write_text(",".join(columns) + "\n1,2\n")
    with pytest.raises(RequestError) as info:
        ReplayTable.load(tmp_path / "t.csv")
    assert info.value.field == field


TABLES = REPO / "experiments" / "tables"


def test_per_sample_latency_is_derived_from_the_throughput(tmp_path: Path) -> None:
    # A recorded table has a throughput column and no per-sample latency.
    recorded = ReplayTable.load(TABLES / "digits.csv")
    ok = [r.metrics for r in recorded.rows if r.metrics is not None]
    assert ok
    for metrics in ok:
        assert metrics.latency_per_sample_ms == pytest.approx(1000 / metrics.throughput_per_s)
    # Without a throughput column, both follow from p95 and the batch size.
    table = ReplayTable.load(write_table(tmp_path / "t.csv", recorded_rows()))
    for row in table.rows:
        if row.metrics is not None:
            batch = row.config["batch.size"]
            assert isinstance(batch, int)
            expected = row.metrics.latency_p95_ms / batch
            assert row.metrics.latency_per_sample_ms == pytest.approx(expected)


# Per call and per sample disagree: batching raises the p95 of a call and the throughput.
SERVED = [
    # engine, batch size, p95 ms per call -> samples/s, ms per sample
    ("torch_eager", 1, 1.0),  # 1,000/s, 1.0 ms: the baseline
    ("torch_eager", 8, 4.0),  # 2,000/s, 0.5 ms
    ("onnxruntime", 1, 0.8),  # 1,250/s, 0.8 ms: the lowest p95
    ("onnxruntime", 8, 2.0),  # 4,000/s, 0.25 ms
    ("onnxruntime", 64, 12.8),  # 5,000/s, 0.2 ms: the highest throughput
]


def tune_served(directory: Path, **request: Any) -> tuple[dict[str, Any], optuna.Study]:
    directory.mkdir(exist_ok=True)
    rows = [
        {"runtime.engine": engine, "batch.size": batch, "prune.method": "none", "status": "ok",
         "accuracy": 0.9, "latency_p95_ms": p95, "measure_seconds": 1}
        for engine, batch, p95 in SERVED
    ]  # fmt: skip
    table = write_table(directory / "served.csv", rows)
    storage = f"sqlite:///{directory / 'study.db'}"
    options = TuneOptions(
        trials=20, replay=table, storage=storage, study="s", sampler="random", seed=0,
        out_dir=directory / "out",
    )  # fmt: skip
    request.setdefault("measurement", {"screen_seconds": None})  # every row timed in full
    outcome, _ = run_tune(write_request(directory, **request), options)
    trials = stored_trials(storage, "s")
    measured = {(t.config["runtime.engine"], t.config["batch.size"])
                for t in trials if t.state == "complete"}  # fmt: skip
    assert measured == {(engine, batch) for engine, batch, _ in SERVED}, "every row was seen"
    assert outcome.tuned is not None
    return outcome.tuned.model_dump(mode="json"), optuna.load_study(study_name="s", storage=storage)


@pytest.mark.slow
def test_highest_throughput_picks_the_fastest_feasible_row(tmp_path: Path) -> None:
    tuned, study = tune_served(
        tmp_path,
        # The feasible front holds onnxruntime at batch 1 (lowest p95) and at batch 8.
        objectives=["accuracy", "latency", "throughput"],
        constraints={"max_latency_p95_ms": 10.0},  # rules out batch 64, the fastest row
        selection={"strategy": "highest_throughput"},
    )
    maximize, minimize = optuna.study.StudyDirection.MAXIMIZE, optuna.study.StudyDirection.MINIMIZE
    assert study.directions == [maximize, minimize, maximize]
    assert tuned["config"] == {
        "runtime.engine": "onnxruntime",
        "batch.size": 8,
        "prune.method": "none",
    }
    assert tuned["metrics"]["throughput_per_s"] == pytest.approx(4000)
    assert tuned["metrics"]["latency_per_sample_ms"] == pytest.approx(0.25)


@pytest.mark.slow
def test_per_sample_latency_bound_decides_feasibility(tmp_path: Path) -> None:
    bound = 0.6
    tuned, _ = tune_served(
        tmp_path / "bounded",
        objectives=["accuracy", "latency"],
        constraints={"max_latency_per_sample_ms": bound},
    )
    for trial in stored_trials(f"sqlite:///{tmp_path / 'bounded' / 'study.db'}", "s"):
        if trial.metrics is not None:
            per_sample = trial.metrics["latency_per_sample_ms"]
            assert trial.violations == {
                "max_latency_per_sample_ms": pytest.approx(per_sample - bound)
            }
    # The lowest p95 (onnxruntime at batch 1, 0.8 ms a sample) breaks the bound: the lowest
    # p95 within it is onnxruntime at batch 8.
    assert tuned["config"] == {
        "runtime.engine": "onnxruntime",
        "batch.size": 8,
        "prune.method": "none",
    }
    outcome = tuned["constraints"]["max_latency_per_sample_ms"]
    assert outcome == {"bound": bound, "value": pytest.approx(0.25), "met": True}
    unbounded, _ = tune_served(
        tmp_path / "free", objectives=["accuracy", "latency"], constraints={}
    )
    assert unbounded["config"]["batch.size"] == 1
