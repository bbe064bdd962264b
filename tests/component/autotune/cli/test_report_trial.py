"""`autotune report STUDY --trial N`: one trial as the study holds it, a failed one with the
traceback its worker sent; a trial the study does not hold is bad input naming --trial."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotune.cli import app
from autotune.core.contract import DataRef, ModelRef, TrialResult, TrialSpec, Workload
from autotune.execution.in_process import InProcessExecutor
from autotune.strategies import make_strategy
from tests.conftest import REPO
from tests.coordinator_support import (
    SPACE,
    STUDY,
    ScriptedExecutor,
    config_with,
    make_request,
    make_rig,
    open_store,
)

runner = CliRunner()
INT8 = config_with(precision__mode="int8_static")
MISSING_MODEL = Workload(
    model=ModelRef(entry_point="tests.misbehaving_models:no_such_function"),
    data=DataRef(entry_point="experiments.digits.model:eval_data"),
    python_path=[str(REPO)],
)


@pytest.fixture(scope="module")
def worker_error() -> TrialResult:
    """A trial the in-process executor ran on a model whose entry point does not exist."""
    executor = InProcessExecutor()
    try:
        executor.submit(TrialSpec(study=STUDY, trial_number=0, workload=MISSING_MODEL, config={}))
        (result,) = executor.wait()
    finally:
        executor.close()
    assert result.status == "error" and result.traceback, result.reason
    return result


class Int8RaisesInTheWorker(ScriptedExecutor):
    """Answers from the script, but an int8 trial ends as the worker's error did."""

    def __init__(self, error: TrialResult) -> None:
        super().__init__()
        self.error = error

    def _result(self, spec: TrialSpec) -> TrialResult:
        if spec.config.get("precision.mode") != "int8_static":
            return super()._result(spec)
        own = {"study": spec.study, "trial_number": spec.trial_number, "attempt": spec.attempt}
        return self.error.model_copy(update=own)


@pytest.fixture(scope="module")
def storage(tmp_path_factory: pytest.TempPathFactory, worker_error: TrialResult) -> str:
    """A study on SQLite whose baseline measured and whose int8 trial (number 1) raised."""
    url = f"sqlite:///{tmp_path_factory.mktemp('study') / 'study.db'}"
    request = make_request(trials=2)
    store = open_store(request, make_strategy("random", SPACE, request, 0), SPACE, url)
    rig = make_rig(executor=Int8RaisesInTheWorker(worker_error), trials=2, store=store)
    rig.queue(INT8)
    rig.search()
    rig.store.close()
    return url


def test_an_error_trial_shows_its_configuration_status_reason_and_traceback(
    storage: str, worker_error: TrialResult
) -> None:
    result = runner.invoke(app, ["report", STUDY, "--storage", storage, "--trial", "1"])

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[:2] == ["trial 1 (attempt 0)", "status: error"]
    assert lines[2].startswith("reason: RequestError in resolve_entry_point: model.entry_point")
    assert "  precision.mode = int8_static" in lines
    assert "traceback:" in lines
    shown = result.stdout.split("traceback:\n", 1)[1]
    assert worker_error.traceback is not None
    assert shown.rstrip() == worker_error.traceback.rstrip(), "the whole traceback, as sent"
    assert "in resolve_entry_point\n    raise RequestError(" in shown


def test_a_measured_trial_has_no_traceback_and_json_gives_the_same_fields(storage: str) -> None:
    shown = runner.invoke(app, ["report", STUDY, "--storage", storage, "--trial", "0"])
    assert shown.exit_code == 0, shown.output
    assert "status: ok" in shown.stdout and "traceback" not in shown.stdout

    as_json = runner.invoke(app, ["report", STUDY, "--storage", storage, "--trial", "1", "--json"])
    assert as_json.exit_code == 0, as_json.output
    trial = json.loads(as_json.stdout)
    assert (trial["trial"], trial["status"]) == (1, "error")
    assert trial["config"]["precision.mode"] == "int8_static"
    assert "raise RequestError(" in trial["traceback"]


def test_a_trial_the_study_does_not_hold_is_bad_input_naming_the_option(storage: str) -> None:
    result = runner.invoke(app, ["report", STUDY, "--storage", storage, "--trial", "7"])

    assert result.exit_code == 2
    message = " ".join(result.stderr.split())
    assert "--trial:" in message and "(got 7)" in message
    assert "its trials: numbers 0 to 1" in message


def test_a_study_that_does_not_exist_is_still_an_error_with_trial(tmp_path: Path) -> None:
    missing = f"sqlite:///{tmp_path / 'none.db'}"
    result = runner.invoke(app, ["report", STUDY, "--storage", missing, "--trial", "0"])

    assert result.exit_code == 2
    assert not (tmp_path / "none.db").exists()
