"""MLflow's tracker: where it keeps artifacts, and its writer process of trial runs."""

from __future__ import annotations

import functools
import gc
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from mlflow.tracking import MlflowClient

from autotune.tracking import (
    TRIAL_TAG,
    MlflowTracker,
    artifact_location,
    writer,
)
from autotune.tracking.writer import WriterFailed
from tests.tracker_runs import CONFIG, METRICS, child_runs


class ScriptedClient(MlflowClient):
    """The writer process's client, scripted through a directory it shares with the test:
    each child run's name is appended to `created` before the run is created; a gated client
    waits for the file `open` first, a slow one sleeps, and a name in `refuse` is refused."""

    def __init__(
        self,
        tracking_uri: str,
        directory: Path,
        gated: bool = False,
        delay_s: float = 0.0,
        refuse: tuple[str, ...] = (),
    ) -> None:
        super().__init__(tracking_uri)
        self.directory = directory
        self.gated = gated
        self.delay_s = delay_s
        self.refuse = refuse

    def create_run(self, *args: Any, **kwargs: Any) -> Any:
        name = kwargs["run_name"]
        with (self.directory / "created").open("a") as created:
            created.write(name + "\n")
        deadline = time.monotonic() + 30
        while self.gated and not (self.directory / "open").exists():
            assert time.monotonic() < deadline, "the test never opened the gate"
            time.sleep(0.01)
        time.sleep(self.delay_s)
        if name in self.refuse:
            raise ConnectionError(f"{name} refused")
        return super().create_run(*args, **kwargs)


@pytest.fixture
def uri(mlflow_uri: str) -> str:
    return mlflow_uri


@pytest.fixture
def make_tracker(uri: str, tmp_path: Path) -> Iterator[Any]:
    """Trackers whose writer uses a ScriptedClient set up with the given options; each is
    finished at the end of the test if the test did not."""
    made: list[MlflowTracker] = []

    def make(**script: Any) -> MlflowTracker:
        client = functools.partial(ScriptedClient, directory=tmp_path, **script)
        made.append(MlflowTracker(uri, "tests", "study", writer_client=client))
        return made[-1]

    yield make
    for tracker in made:
        if not tracker.closed:
            tracker.finish("KILLED")


@pytest.fixture
def tracker(make_tracker: Any) -> MlflowTracker:
    return make_tracker()  # type: ignore[no-any-return]


def created(tmp_path: Path) -> list[str]:
    """The child runs the scripted client was asked to create, in order."""
    path = tmp_path / "created"
    return path.read_text().splitlines() if path.exists() else []


Writers = Callable[[], list[psutil.Process]]


def writer_processes() -> list[psutil.Process]:
    """The writer processes of this process (MLflow's writers here): spawned, or forked from
    the forkserver (which stays, and is not one); running, or exited and not yet reaped."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            command = " ".join(child.cmdline())
            forked = "forkserver" in command and child.ppid() != os.getpid()
            if "spawn_main" in command or forked:
                found.append(child)
        except psutil.ZombieProcess:
            found.append(child)
        except psutil.NoSuchProcess:
            pass
    return found


@pytest.fixture
def writers() -> Writers:
    """The writer processes that appeared since the test began: an earlier test's unreaped
    writer in this worker is that test's failure, not this one's."""
    before = {process.pid for process in writer_processes()}
    return lambda: [process for process in writer_processes() if process.pid not in before]


def test_a_sqlite_stores_artifacts_live_beside_it_whatever_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, new_mlflow_store: Callable[[Path], str]
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    uri = new_mlflow_store(tmp_path / "store" / "mlflow.db")
    tracker = MlflowTracker(uri, "tests", "study")
    location = MlflowClient(uri).get_experiment(tracker.experiment_id).artifact_location
    assert location == (tmp_path / "store" / "mlruns").as_uri()
    assert not (elsewhere / "mlruns").exists()


def test_a_relative_sqlite_path_and_other_stores() -> None:
    assert artifact_location("sqlite:///mlflow.db") == (Path.cwd() / "mlruns").as_uri()
    assert artifact_location("postgresql+psycopg://u@h/db") is None
    assert artifact_location("http://127.0.0.1:5000") is None


def test_log_trial_returns_before_the_run_is_written(
    uri: str, tmp_path: Path, make_tracker: Any
) -> None:
    tracker = make_tracker(gated=True)
    tracker.log_trial(0, 0, CONFIG, METRICS, {})
    tracker.log_trial(0, 1, CONFIG, METRICS, {})  # queued, not yet written: not logged again
    assert child_runs(uri, tracker) == {}

    (tmp_path / "open").touch()
    tracker.flush()
    assert list(child_runs(uri, tracker)) == [0]
    assert created(tmp_path) == ["trial-0"]


def test_a_trial_run_holds_what_was_logged_when_it_was_logged(
    uri: str, tracker: MlflowTracker
) -> None:
    config = dict(CONFIG)
    before = int(time.time() * 1000)
    tracker.log_trial(3, 2, config, METRICS, {"contended": "false"})
    tracker.log_trial(4, 0, config, None, {"failure": "out of memory"})
    config["batch_size"] = 99  # the caller's dict changes after the call
    tracker.flush()

    runs = child_runs(uri, tracker)
    measured, failed = runs[3], runs[4]
    assert measured.info.status == "FINISHED"
    assert measured.info.run_name == "trial-3"
    assert measured.data.params == {"batch_size": "8", "shape": "[1, 3]"}
    assert measured.data.metrics == {
        "latency_p95_ms": 3.5,
        "accuracy": 0.9,
        "rounded/latency_p95_ms": 3.5,  # the key figures as tables show them, too
        "rounded/accuracy": 0.9,
    }
    assert measured.data.tags["energy_source"] == "estimate"
    assert measured.data.tags["autotune.attempt"] == "2"
    assert measured.data.tags["contended"] == "false"
    assert before <= measured.info.start_time == measured.info.end_time
    assert failed.info.status == "FAILED"
    assert failed.data.tags["failure"] == "out of memory"
    assert failed.data.metrics == {}


def test_a_trial_that_ended_unmeasured_keeps_where_its_time_went(
    uri: str, tracker: MlflowTracker
) -> None:
    spent = {"time.build_s": 1.5, "time.accuracy_s": 0.0, "time.timing_s": 9.0}
    tracker.log_trial(5, 0, CONFIG, spent, {"status": "too_slow"})
    tracker.log_trial(6, 0, CONFIG, {**METRICS, **spent}, {"status": "screened"})
    tracker.flush()
    runs = child_runs(uri, tracker)
    assert (runs[5].info.status, runs[5].data.metrics) == ("FAILED", spent)
    assert runs[6].info.status == "FINISHED"


def test_a_failed_trial_s_traceback_is_a_file_of_its_run(uri: str, tracker: MlflowTracker) -> None:
    story = 'Traceback (most recent call last):\n  File "m.py", line 3\nRuntimeError: boom\n'
    tracker.log_trial(7, 0, CONFIG, None, {"status": "error"}, 1.0, {"traceback.txt": story})
    tracker.log_trial(8, 0, CONFIG, METRICS, {"status": "ok"})
    tracker.flush()
    runs = child_runs(uri, tracker)
    client = MlflowClient(uri)
    assert [f.path for f in client.list_artifacts(runs[7].info.run_id)] == ["traceback.txt"]
    local = client.download_artifacts(runs[7].info.run_id, "traceback.txt")
    assert Path(local).read_text() == story
    assert client.list_artifacts(runs[8].info.run_id) == []


def test_runs_are_written_in_the_order_trials_were_logged(
    tmp_path: Path, tracker: MlflowTracker
) -> None:
    for number in (5, 2, 9, 0):
        tracker.log_trial(number, 0, CONFIG, METRICS, {})
    tracker.flush()
    assert created(tmp_path) == ["trial-5", "trial-2", "trial-9", "trial-0"]


def test_a_failed_write_is_raised_by_the_next_flush_and_the_others_are_written(
    uri: str, make_tracker: Any
) -> None:
    tracker = make_tracker(refuse=("trial-1",))
    for number in range(3):
        tracker.log_trial(number, 0, CONFIG, METRICS, {})

    with pytest.raises(ConnectionError, match="trial-1 refused") as raised:
        tracker.flush()
    assert "in create_run" in str(raised.value.__cause__)  # where, in the writer process
    assert sorted(child_runs(uri, tracker)) == [0, 2]
    tracker.flush()  # raised once


def test_finish_raises_a_failed_write_after_ending_the_parent_run(
    writers: Writers, uri: str, make_tracker: Any
) -> None:
    tracker = make_tracker(refuse=("trial-0", "trial-1"))
    tracker.log_trial(0, 0, CONFIG, METRICS, {})
    tracker.log_trial(1, 0, CONFIG, METRICS, {})

    with pytest.raises(ConnectionError, match="trial-0 refused") as raised:
        tracker.finish("FINISHED")
    assert raised.value.__notes__ == ["1 later deferred writes failed too"]
    assert MlflowClient(uri).get_run(tracker.parent_run_id).info.status == "FINISHED"
    assert not tracker.writing
    assert writers() == []


def test_revalidation_tags_runs_still_queued_when_it_is_called(uri: str, make_tracker: Any) -> None:
    tracker = make_tracker(delay_s=0.2)
    tracker.log_trial(0, 0, CONFIG, METRICS, {})
    tracker.log_trial(1, 0, CONFIG, METRICS, {})
    report = {
        "rounds": 6,
        "comparisons": [[{"trial": 1, "revalidated": {"latency_p95_ms": 3.0}}]],
    }
    tracker.log_revalidation(report)

    finalist = child_runs(uri, tracker)[1]
    assert finalist.data.tags["revalidated"] == "true"
    assert finalist.data.metrics["revalidated.latency_p95_ms"] == 3.0
    assert finalist.data.metrics["revalidated.rounds"] == 6  # the rounds it added
    assert finalist.data.metrics["latency_p95_ms"] == METRICS["latency_p95_ms"]  # its search's


def test_finish_leaves_no_writer_process(writers: Writers, tracker: MlflowTracker) -> None:
    tracker.log_trial(0, 0, CONFIG, METRICS, {})
    assert tracker.writing
    assert len(writers()) == 1
    tracker.finish("FINISHED")
    assert not tracker.writing
    assert writers() == []


def test_a_failure_between_log_trial_and_finish_still_reaps_the_writer(
    writers: Writers, uri: str, tracker: MlflowTracker
) -> None:
    with pytest.raises(RuntimeError, match="coordinator failed"):
        try:
            tracker.log_trial(0, 0, CONFIG, METRICS, {})
            raise RuntimeError("coordinator failed")
        finally:
            tracker.finish("FAILED")
    assert writers() == []
    assert MlflowClient(uri).get_run(tracker.parent_run_id).info.status == "FAILED"
    assert list(child_runs(uri, tracker)) == [0]


def test_a_tracker_dropped_unfinished_writes_what_was_queued_and_stops_its_writer(
    writers: Writers,
    uri: str,
) -> None:
    tracker = MlflowTracker(uri, "tests", "study")
    experiment_id = tracker.experiment_id
    tracker.log_trial(0, 0, CONFIG, METRICS, {})
    assert len(writers()) == 1
    del tracker
    gc.collect()
    assert writers() == []
    (run,) = MlflowClient(uri).search_runs(
        [experiment_id], filter_string=f"tags.`{TRIAL_TAG}` = '0'"
    )
    assert run.info.status == "FINISHED"


def test_a_writer_process_that_dies_is_reported_not_waited_for(
    writers: Writers, uri: str, tracker: MlflowTracker
) -> None:
    tracker.log_trial(0, 0, CONFIG, METRICS, {})
    (process,) = writers()
    os.kill(process.pid, signal.SIGKILL)
    with pytest.raises(WriterFailed, match="exited"):
        tracker.flush()
    with pytest.raises(WriterFailed, match="exited"):
        tracker.finish("FAILED")
    assert writers() == []
    assert MlflowClient(uri).get_run(tracker.parent_run_id).info.status == "FAILED"


def test_without_a_writer_process_the_caller_writes_each_run(
    writers: Writers, uri: str, tracker: MlflowTracker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer, "START_METHODS", ("no-such-start-method",))
    tracker.log_trial(0, 0, CONFIG, METRICS, {})
    assert list(child_runs(uri, tracker)) == [0]  # written before log_trial returned
    assert not tracker.writing
    assert writers() == []
    tracker.finish("FINISHED")


def test_a_yaml_document_of_the_study_reads_as_written(uri: str, tracker: MlflowTracker) -> None:
    """The tuned file logged to the study's run shows × and – as themselves, not \\xD7."""
    headline = {"headline": {"text": "2.04× throughput (95% CI 1.9–2.2×)"}}
    tracker.log_study_inputs({}, {"tuned.yaml": headline}, {})
    local = MlflowClient(uri).download_artifacts(tracker.parent_run_id, "tuned.yaml")
    text = Path(local).read_text(encoding="utf-8")
    assert "2.04× throughput (95% CI 1.9–2.2×)" in text and "\\x" not in text
