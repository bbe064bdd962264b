from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from autotune.cli import app
from autotune.results.records import Candidate
from autotune.space.search_space import SPACES_DIR
from tests.conftest import REPO, stored_trials
from tests.space_command import space_for_onnx

runner = CliRunner()


@pytest.mark.parametrize("command", [[], ["tune"], ["hardware"], ["space"], ["report"]])
def test_every_command_has_help(command: list[str]) -> None:
    result = runner.invoke(app, [*command, "--help"])
    assert result.exit_code == 0
    assert "Usage" in result.output


def test_hardware_json_is_a_profile() -> None:
    result = runner.invoke(app, ["hardware", "--json"])
    assert result.exit_code == 0
    assert json.loads(result.output)["cpu_cores"] >= 1


def test_space_for_a_saved_profile() -> None:
    profile = SPACES_DIR / "profiles" / "h200x8.json"
    result = runner.invoke(app, ["space", "--hardware", str(profile), "--json"])
    assert result.exit_code == 0
    space = json.loads(result.output)
    precisions = [d for d in space["dimensions"] if d["name"] == "precision.mode"]
    on_cuda = [
        d for d in precisions if any(c.get("runtime.device") == "cuda" for c in d["contexts"])
    ]
    assert on_cuda and all("fp16" in d["values"] for d in on_cuda)
    on_ort = [e for e in space["excluded"] if e["when"].get("runtime.provider") == "cuda"]
    assert any(e["value"] == "bf16" and "engine=onnxruntime" in e["reason"] for e in on_ort)


def _space_output(profile: Path, width: int, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    from rich.console import Console

    from autotune.cli import hardware

    monkeypatch.setattr(hardware, "out", Console(width=width))
    result = runner.invoke(app, ["space", "--hardware", str(profile)])
    assert result.exit_code == 0, result.output
    return result.output.splitlines()


def _said(lines: list[str]) -> list[tuple[int, str]]:
    """Each printed line with the lines that continue it (indented deeper) as one, with the
    depth it starts at."""
    said: list[tuple[int, str]] = []
    for line in lines:
        depth = len(line) - len(line.lstrip())
        if said and depth > said[-1][0] + 2:
            said[-1] = (said[-1][0], f"{said[-1][1]} {line.strip()}")
        else:
            said.append((depth, line.strip()))
    return said


@pytest.mark.parametrize("profile", ["cpu-only.json", "h200x8.json"])
def test_space_reads_at_80_columns(profile: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every line fits; a dimension's values and the values a reason excludes are whole
    words of their lines (never cut where a line wraps), in words, not Python reprs."""
    path = SPACES_DIR / "profiles" / profile
    lines = _space_output(path, 80, monkeypatch)
    space = json.loads(runner.invoke(app, ["space", "--hardware", str(path), "--json"]).output)
    assert max(len(line) for line in lines) <= 80
    for repr_mark in ("['", "{'", "low=", "log=False"):
        assert repr_mark not in "\n".join(lines)
    words = [set(re.split(r"[\s,;:()]+", text)) for _, text in _said(lines)]
    for dim in space["dimensions"]:
        for value in dim["values"] or []:
            assert any({dim["name"], str(value)} <= w for w in words), (dim["name"], value)
    for exclusion in space["excluded"]:
        if exclusion["value"] is not None:
            assert any(str(exclusion["value"]) in w for w in words), exclusion


def test_space_gives_each_reason_once_after_the_values_it_excludes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    said = _said(_space_output(SPACES_DIR / "profiles" / "cpu-only.json", 80, monkeypatch))
    reasons: dict[str, list[str]] = {}  # per dimension, as printed
    for depth, text in said:
        if text.endswith(": excluded"):
            dimension = reasons.setdefault(text, [])
        elif depth == 4:
            dimension.append(text.split(": ", 1)[1])
    assert all(len(printed) == len(set(printed)) for printed in reasons.values())
    excluded = [text for depth, text in said if depth == 4]
    assert "4, 8, 16, 32, 64: exceeds cpu_cores = 2" in excluded
    assert (
        "reduce-overhead, max-autotune: captures CUDA graphs, which inductor skips on the CPU "
        "(it would run as mode default); it needs runtime.device=cuda"
    ) in excluded
    assert sum("CPUExecutionProvider" in line for line in excluded) == 1  # was printed 4 times
    shown = [text for depth, text in said if depth == 2]
    assert "runtime.threads: 1, 2; baseline 2" in shown
    assert (
        "prune.ratio: 0.1 to 0.6 in steps of 0.1; when prune.method is magnitude or structured"
    ) in shown


def test_bad_request_exits_2_naming_the_field(write_request) -> None:
    path = write_request(constraints={"max_latency_p95_ms": -3})
    result = runner.invoke(app, ["tune", str(path), "--executor", "inprocess"])
    assert result.exit_code == 2
    assert "constraints.max_latency_p95_ms" in result.output
    assert "-3" in result.output


@pytest.mark.parametrize("from_option", [False, True])
def test_a_number_over_its_maximum_exits_2(write_request, from_option: bool) -> None:
    path = write_request() if from_option else write_request(budget={"trials": 3_000_000_000})
    option = ["--trials", "3000000000"] if from_option else []
    result = runner.invoke(app, ["tune", str(path), "--executor", "inprocess", *option])
    assert result.exit_code == 2
    assert "budget.trials" in result.output
    assert "less than or equal to 100000" in result.output
    assert "3000000000" in result.output


def test_missing_request_exits_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["tune", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2


def test_bad_space_option_exits_2() -> None:
    result = runner.invoke(app, ["space", "--space", "nope.yaml"])
    assert result.exit_code == 2
    assert "search_space" in result.output


def test_unknown_study_exits_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["report", "nope", "--storage", f"sqlite:///{tmp_path}/s.db"])
    assert result.exit_code == 2


@pytest.mark.slow
def test_infeasible_exits_3(write_request) -> None:
    path = write_request(constraints={"max_latency_p95_ms": 1e-6}, budget={"trials": 2})
    result = runner.invoke(app, ["tune", str(path), "--executor", "inprocess"])
    assert result.exit_code == 3, result.output


@pytest.mark.slow
def test_tune_through_ray_end_to_end(write_request, tmp_path: Path) -> None:
    """The real path: the CLI in its own process, trials on an in-process Ray."""
    path = write_request(budget={"trials": 8})
    out = tmp_path / "tuned.yaml"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    completed = subprocess.run(
        [sys.executable, "-m", "autotune", "tune", str(path), "--out", str(out), "--seed", "0"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "Pareto front" in completed.stdout
    assert "mlflow ui --backend-store-uri" in completed.stdout
    tuned = yaml.safe_load(out.read_text())
    assert tuned["constraints"]["max_accuracy_drop"]["met"]
    trials = stored_trials(f"sqlite:///{tmp_path}/study.db", "digits-test")
    assert sum(t.ended for t in trials) == 8
    client = MlflowClient(tuned["mlflow"]["tracking_uri"])
    children = client.search_runs(
        [tuned["mlflow"]["experiment_id"]],
        filter_string=f"tags.`mlflow.parentRunId` = '{tuned['mlflow']['run_id']}'",
    )
    assert len(children) == 8
    pids = {t.provenance.pid for t in trials if t.provenance is not None}
    assert len(pids) == 1 and None not in pids  # one Ray actor measured every trial


class _RayMustNotStart:
    def __init__(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("the Ray executor started before the request's model was checked")


@pytest.mark.parametrize(
    ("model", "field"),
    [
        ({"onnx": "missing.onnx"}, "model.onnx"),
        ({"onnx": "notes.onnx"}, "model.onnx"),  # a text file named .onnx
        ({"entry_point": "unimportable_model:build"}, "model.entry_point"),
    ],
    ids=["missing-file", "text-file", "module-does-not-import"],
)
def test_bad_model_exits_2_with_one_line_before_ray_starts(
    write_request, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: dict, field: str
) -> None:
    """The default executor (Ray) is never started for a model that is bad on its face."""
    (tmp_path / "notes.onnx").write_text("these are notes about a model, not a model\n" * 40)
    module = "import no_such_dependency_of_the_model\n\n\ndef build():\n    return None\n"
    (tmp_path / "unimportable_model.py").write_text(module)
    monkeypatch.setattr("autotune.execution.ray_executor.RayExecutor", _RayMustNotStart)
    result = runner.invoke(app, ["tune", str(write_request(model=model))])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {field}: "), lines[0]
    assert not (tmp_path / "study.db").exists()


@pytest.mark.slow
def test_bad_model_found_by_a_ray_worker_exits_2_with_one_line(
    write_request, tmp_path: Path
) -> None:
    """A model whose factory fails is found only by loading it, on a Ray worker: its
    RequestError comes back through Ray as itself."""
    module = "def build():\n    raise RuntimeError('the weights are missing')\n"
    (tmp_path / "failing_model.py").write_text(module)
    path = write_request(model={"entry_point": "failing_model:build"})
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    completed = subprocess.run(
        [sys.executable, "-m", "autotune", "tune", str(path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert completed.returncode == 2, completed.stderr[-3000:]
    *started, error = completed.stderr.strip().splitlines()
    assert all(line.startswith("start: ") for line in started), completed.stderr[-3000:]
    assert error.startswith("error: model.entry_point: must run (RuntimeError: the weights")


def test_report_without_a_store_exits_2_and_creates_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["report", "digits-test"])  # the default: sqlite:///autotune.db
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --storage: must name an existing SQLite file")
    assert list(tmp_path.iterdir()) == []

    (tmp_path / "empty.db").write_bytes(b"")
    result = runner.invoke(app, ["report", "s", "--storage", "sqlite:///empty.db"])
    assert result.exit_code == 2
    assert "--storage" in result.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["empty.db"]
    assert (tmp_path / "empty.db").read_bytes() == b""


def test_token_list_without_a_database_exits_2_and_creates_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["token", "list", "--db", "sqlite:///service.db"])
    assert result.exit_code == 2
    assert "--db" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_ui_command_works_outside_the_venv(tmp_path: Path) -> None:
    from autotune.cli import _ui_command

    # In the repository, with the Makefile's own store: its target, on the port given.
    assert _ui_command("sqlite:///mlflow.db", 5003, REPO) == "make mlflow-ui MLFLOW_PORT=5003"
    # Another store, or no Makefile here: the mlflow beside the running Python.
    mlflow = str(Path(sys.executable).parent / "mlflow")
    other = f"sqlite:///{tmp_path}/mlflow.db"
    assert _ui_command(other, 5003, REPO) == f"{mlflow} ui --backend-store-uri {other} --port 5003"
    assert _ui_command("sqlite:///mlflow.db", 5003, tmp_path) == (
        f"{mlflow} ui --backend-store-uri sqlite:///mlflow.db --port 5003"
    )
    assert _ui_command("http://mlflow:5000", 5003) == "open http://mlflow:5000 in a browser"


def _front_member(number: int, p95: float, **changes: object) -> Candidate:
    config = {
        "batch.size": 1,
        "precision.mode": "fp32",
        "prune.method": "none",
        "prune.ratio": 0.0,
        "runtime.engine": "torch_eager",
        "runtime.graph_opt": "all",
        "runtime.threads": 2,
        **changes,
    }
    metrics = {
        "accuracy": 0.98612,
        "latency_p95_ms": p95,
        "throughput_per_s": 123456.0 / (number + 1),
        "energy_per_sample_j": 1.234e-5,
    }
    return Candidate(number, config, metrics, feasible=True)


FRONT = [
    _front_member(0, 0.2),
    _front_member(
        12,
        0.0165,
        **{
            "batch.size": 32,
            "precision.mode": "int8_dynamic",
            "prune.method": "unstructured",
            "prune.ratio": 0.30000000000000004,
            "runtime.engine": "onnxruntime",
            "runtime.graph_opt": "extended",
            "runtime.threads": 1,
        },
    ),
    _front_member(
        7,
        0.05,
        **{
            "batch.size": 256,
            "precision.mode": "int8_static",
            "prune.method": "structured",
            "prune.ratio": 0.5,
            "runtime.engine": "onnxruntime",
            "runtime.graph_opt": "basic",
        },
    ),
]


def _rendered_front(
    width: int,
    monkeypatch: pytest.MonkeyPatch,
    front: list[Candidate] = FRONT,
    baseline: Candidate | None = None,
) -> str:
    import io

    from rich.console import Console

    from autotune.cli import tables

    buffer = io.StringIO()
    monkeypatch.setattr(tables, "out", Console(file=buffer, width=width))
    tables._print_front(front, 12, baseline)
    return buffer.getvalue()


@pytest.mark.parametrize("width", [80, 200])
def test_pareto_table_is_whole_at_any_width(width: int, monkeypatch: pytest.MonkeyPatch) -> None:
    text = _rendered_front(width, monkeypatch)
    assert "…" not in text
    assert max(len(line.rstrip()) for line in text.splitlines()) <= width
    for figure in ("12*", "int8_dynamic", "unstructured", "onnxruntime", "0.3 ", "0.017"):
        assert figure in text
    for header in ("trial", "accuracy", "per call", "samples", "sample", "threads"):
        assert header in text


def _unpruned(number: int, p95: float, **changes: object) -> Candidate:
    """A trial without pruning: it sets no prune ratio."""
    member = _front_member(number, p95, **changes)
    config = {k: v for k, v in member.config.items() if k != "prune.ratio"}
    return Candidate(number, config, member.metrics, feasible=True)


@pytest.mark.parametrize("width", [80, 200])
def test_pareto_table_marks_the_chosen_trial_and_the_baseline_and_explains_them(
    width: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    front = [FRONT[1], FRONT[2], _unpruned(5, 0.1, **{"runtime.engine": "onnxruntime"})]
    baseline = _unpruned(0, 0.9)  # dominated: not on the front
    text = _rendered_front(width, monkeypatch, front, baseline)
    lines = text.splitlines()
    assert "…" not in text and max(len(line.rstrip()) for line in lines) <= width
    assert " ".join(text.split()).startswith(
        "Pareto front (search measurements): 3 feasible, non-dominated trials, and the baseline"
    )
    assert [line.split()[0] for line in lines if line.split()[:1] in (["12*"], ["0b"])] == [
        "12*",
        "0b",
    ]
    said = " ".join(text.split())
    assert "* chosen: the configuration the head-to-head returned" in said
    assert "b baseline: the unmodified model, not on the front (shown to compare)" in said
    assert not [line for line in lines if line.rstrip().endswith(("prune ratio", "ratio"))]


def test_pareto_table_explains_only_the_marks_it_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    text = " ".join(_rendered_front(80, monkeypatch).split())
    assert "* chosen: the configuration the head-to-head returned" in text
    assert "baseline" not in text


def test_a_baseline_on_the_front_is_marked_in_its_row(monkeypatch: pytest.MonkeyPatch) -> None:
    text = _rendered_front(200, monkeypatch, FRONT, FRONT[0])
    title = "Pareto front (search measurements): 3 feasible, non-dominated trials"
    assert text.splitlines()[0].rstrip() == title
    assert [line.split()[0] for line in text.splitlines() if "torch_eager" in line] == ["0b"]
    assert "b baseline: the unmodified model" in text and "not on the front" not in text


def test_pareto_table_has_a_column_per_dimension_where_it_fits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wide = _rendered_front(200, monkeypatch).splitlines()
    header = next(i for i, line in enumerate(wide) if line.lstrip().startswith("trial "))
    assert "precision" in wide[header - 1] and "mode" in wide[header]
    assert "graph" in wide[header - 1] and "opt" in wide[header]
    assert "configuration" not in wide[header]


@pytest.mark.slow
def test_tune_tells_the_resume_the_phases_and_a_ui_command_that_works(write_request) -> None:
    path = write_request(budget={"trials": 3})
    first = runner.invoke(app, ["tune", str(path), "--executor", "inprocess"])
    assert first.exit_code == 0, first.output
    assert "re-using them" not in first.stderr
    # Not a terminal: a line for each start-up step, each trial and each phase
    lines = first.stderr.splitlines()
    assert [line for line in lines if line.startswith("start: ")] == [
        "start: probing the trial nodes' hardware",
        "start: loading and inspecting the model on a trial worker",
    ]
    assert [line.split(":")[0] for line in lines if line.startswith("tuning ")] == [
        "tuning 1/3",
        "tuning 2/3",
        "tuning 3/3",
    ]
    assert any(line.startswith("head to head: ") and "finalists" in line for line in lines)
    assert "export: the optimized model" in lines
    ui = next(line for line in first.stdout.splitlines() if line.startswith("Open the UI:"))
    assert f"{Path(sys.executable).parent / 'mlflow'} ui --backend-store-uri sqlite:///" in ui
    port = ui.split("--port ")[1]
    review = next(line for line in first.stdout.splitlines() if line.startswith("Then review:"))
    assert review.split()[-1].startswith(f"http://127.0.0.1:{port}/#/experiments/")
    assert "workflowType=machine_learning" in review and "viewStateShareKey=" in review
    assert "Registered as:   models:/digits-test@tuned (version 1)" in first.stdout

    second = runner.invoke(app, ["tune", str(path), "--executor", "inprocess"])
    assert second.exit_code == 0, second.output
    assert "study digits-test: 3 of 3 trials done, re-using them" in second.stderr
    # Nothing new was measured: the stored head-to-head is reused, not run again.
    assert "head to head" not in second.stderr
    assert "its figures are reused" in second.stdout
    # the same run's model: the same version, still behind the alias
    assert "Registered as:   models:/digits-test@tuned (version 1)" in second.stdout


def test_space_for_a_request_says_what_its_onnx_model_cannot_use(
    write_request: Any, tmp_path: Path
) -> None:
    from experiments.digits.model import build_model
    from tests.workers_support import export_digits_onnx

    onnx = export_digits_onnx(build_model(), tmp_path / "digits.onnx")
    engines, reasons = space_for_onnx(write_request, onnx)
    assert "torch_eager" not in engines and "onnxruntime" in engines
    assert "this model is ONNX" in reasons[("runtime.engine", "torch_eager")]
    assert "needs a torch model" in reasons[("prune.method", "structured")]
