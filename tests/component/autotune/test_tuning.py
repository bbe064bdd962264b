"""The tune use case on the real digits workload, in-process (no Ray): study, MLflow, file."""

from __future__ import annotations

import gc
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest
import yaml
from mlflow.tracking import MlflowClient

from autotune.core.contract import HeadToHeadResult, HeadToHeadSpec
from autotune.core.errors import NoFeasibleConfiguration, RequestError
from autotune.execution.in_process import InProcessExecutor
from autotune.requests.request import load_request, parse_request
from autotune.results import opened_store
from autotune.search.warm_start import load_warm_start
from autotune.tracking import (
    PARENT_TAG,
    ROUND_TAG,
    STUDY_TAG,
    TRIAL_TAG,
    artifact_location,
    is_number,
)
from autotune.tuning import (
    TuneOptions,
    mlflow_artifacts,
    output_dirs,
    run_tune,
    study_front,
)
from tests.conftest import ADMIN_URL, FAST_VALIDATION, postgres_databases, stored_trials

INPROCESS = TuneOptions(executor="inprocess", seed=0)


def child_runs(tracking_uri: str, parent_run_id: str) -> list:
    client = MlflowClient(tracking_uri)
    experiment = client.get_experiment_by_name("tests")
    return client.search_runs(
        [experiment.experiment_id], filter_string=f"tags.`{PARENT_TAG}` = '{parent_run_id}'"
    )


@pytest.mark.slow
def test_tune_writes_study_mlflow_runs_and_tuned_file(write_request, tmp_path: Path) -> None:
    outcome, written = run_tune(write_request(), INPROCESS)

    tuned = yaml.safe_load(written.read_text())
    # An int8 choice also names its precision settings and float nodes (`precision`).
    int8 = str(tuned["config"]["precision.mode"]).startswith("int8")
    assert set(tuned) == ({"precision"} if int8 else set()) | {
        "config",
        "metrics",
        "baseline",
        "metrics_from",
        "constraints",
        "model",
        "hardware",
        "software",
        "study",
        "mlflow",
        "artifact",
        "headline",
        "revalidation",
    }
    assert tuned["metrics"]["energy_source"] == "estimate"
    assert tuned["baseline"]["accuracy_drop"] == 0.0
    assert tuned["constraints"]["max_accuracy_drop"]["met"] is True
    assert tuned["metrics"]["accuracy_drop"] <= 0.01
    assert Path(tuned["artifact"]).is_file()

    storage = f"sqlite:///{tmp_path / 'study.db'}"
    trials = stored_trials(storage, "digits-test")
    finished = [t for t in trials if t.counted]
    assert len(finished) == 6
    assert trials[0].marks.baseline is True
    assert trials[0].config["precision.mode"] == "fp32"

    runs = child_runs(tuned["mlflow"]["tracking_uri"], tuned["mlflow"]["run_id"])
    assert sorted(int(r.data.tags[TRIAL_TAG]) for r in runs) == list(range(6))
    for run in runs:
        trial = trials[int(run.data.tags[TRIAL_TAG])]
        assert run.data.params == {k: str(v) for k, v in trial.config.items()}
        assert run.data.tags["pareto"] in {"true", "false"}
        if trial.metrics is not None:
            assert run.data.metrics["latency_p95_ms"] == trial.metrics["latency_p95_ms"]
    front_numbers = {c.trial_number for c in outcome.front}
    assert {int(r.data.tags[TRIAL_TAG]) for r in runs if r.data.tags["pareto"] == "true"} == (
        front_numbers
    )
    assert {c.trial_number for c in study_front("digits-test", storage)} == front_numbers

    client = MlflowClient(tuned["mlflow"]["tracking_uri"])
    revalidation = tuned["revalidation"]
    assert revalidation["chosen"] == tuned["study"]["trial_number"]
    remeasured = {f["trial"]: f["revalidated"] for f in revalidation["comparisons"][-1]}
    assert revalidation["baseline_trial"] == 0
    remeasured[0] = revalidation["baseline"]  # the unmodified model stays if nothing beats it
    confirmed = revalidation["confirmation"]  # a choice among several is timed again
    assert (confirmed or remeasured[revalidation["chosen"]]) == tuned["metrics"]
    assert revalidation["baseline"] == tuned["baseline"]
    with opened_store("digits-test", storage, "study") as store:
        assert store.revalidation_report()["rounds"] == 6  # the request's validation.rounds
    headline = tuned["headline"]
    assert headline["rounds"] == 6
    assert headline["conditions"] in {"quiet", "contended"}
    assert "paired rounds" in headline["text"]
    throughput = headline["ratios"]["throughput_per_s"]
    assert throughput["ci_low"] <= throughput["ratio"] <= throughput["ci_high"]
    chosen_run = next(r for r in runs if int(r.data.tags[TRIAL_TAG]) == revalidation["chosen"])
    chosen_run = client.get_run(chosen_run.info.run_id)
    assert chosen_run.data.tags["revalidated"] == "true"
    assert (
        chosen_run.data.metrics["revalidated.latency_p95_ms"] == tuned["metrics"]["latency_p95_ms"]
    )
    parent = client.get_run(tuned["mlflow"]["run_id"])
    assert parent.data.tags[STUDY_TAG] == "digits-test"
    assert parent.data.tags["energy_source"] == "estimate"
    assert parent.data.metrics["baseline.accuracy"] == tuned["baseline"]["accuracy"]
    assert parent.data.metrics["tuned.latency_p95_ms"] == tuned["metrics"]["latency_p95_ms"]
    assert parent.data.metrics["headline.throughput_per_s.ratio"] == throughput["ratio"]
    assert parent.data.tags["autotune.headline"] == headline["text"]
    assert {run.data.tags["contended"] for run in runs if "contended" in run.data.tags}
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id, "pareto")}
    assert {
        "pareto/pareto_front.csv",
        "pareto/all_trials.csv",
        "pareto/pareto_front.png",
        "pareto/pareto_report.html",
    } <= artifacts
    assert client.list_artifacts(parent.info.run_id, "optimized_model")

    # What a person reviewing the study in the MLflow UI is shown without configuring it.
    experiment = client.get_experiment(tuned["mlflow"]["experiment_id"])
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    views = [k for k in experiment.tags if k.startswith("mlflow.sharedViewState.")]
    assert len(views) == 1 and views[0].rsplit(".", 1)[1] in parent.data.tags["mlflow.note.content"]
    note = parent.data.tags["mlflow.note.content"]
    assert headline["text"] in note and "re-measured head to head" in note  # the choice
    assert all(f"- **#{number}**" in note for number in front_numbers)  # the front's list
    assert "workflowType=machine_learning" in experiment.tags["mlflow.note.content"]
    now = runs_now(client, tuned)
    marked = {int(r.data.tags[TRIAL_TAG]) for r in now if r.data.tags.get("chosen") == "true"}
    assert marked == {revalidation["chosen"]}
    names = {int(r.data.tags[TRIAL_TAG]): r.info.run_name for r in now}
    assert names[revalidation["chosen"]].startswith(f"trial-{revalidation['chosen']} (chosen")
    chosen_tags = next(r for r in now if r.data.tags.get("chosen") == "true").data.tags
    assert chosen_tags["hardware_fingerprint"] == tuned["hardware"]["fingerprint"]
    assert chosen_tags["node_id"] == "local"  # the in-process executor's one node
    assert "torch=" in chosen_tags["software"] and chosen_tags["host"]
    for run in now:
        assert "None" not in run.data.tags.values()
        assert run.info.end_time - run.info.start_time > 0  # the trial's own time
    report = client.download_artifacts(parent.info.run_id, "pareto/pareto_report.html")
    page = Path(report).read_text()
    assert page.count('<svg class="plot"') == 3  # accuracy, latency, energy: three pairs
    assert "<script src" not in page and "<link" not in page  # self-contained


def runs_now(client: MlflowClient, tuned: dict[str, Any]) -> list[Any]:
    return child_runs(tuned["mlflow"]["tracking_uri"], tuned["mlflow"]["run_id"])


@pytest.mark.slow
def test_resume_adds_only_the_missing_trials(write_request, tmp_path: Path) -> None:
    path = write_request(budget={"trials": 3})
    first, _ = run_tune(path, INPROCESS)
    second, written = run_tune(path, TuneOptions(executor="inprocess", trials=5, seed=1))
    tuned = yaml.safe_load(written.read_text())
    trials = stored_trials(f"sqlite:///{tmp_path / 'study.db'}", "digits-test")
    skipped = sum(t.status == "skipped" for t in trials)  # these do not use up the budget
    assert tuned["study"]["n_trials"] == 5 + skipped
    assert tuned["mlflow"]["run_id"] == first.tuned.mlflow["run_id"]
    runs = child_runs(tuned["mlflow"]["tracking_uri"], tuned["mlflow"]["run_id"])
    assert sorted(int(r.data.tags[TRIAL_TAG]) for r in runs) == list(range(5 + skipped))
    assert sum(t.marks.baseline for t in trials) == 1


@pytest.mark.slow
def test_unmeetable_constraint_exits_infeasible(write_request) -> None:
    path = write_request(constraints={"max_latency_p95_ms": 1e-6}, budget={"trials": 2})
    with pytest.raises(NoFeasibleConfiguration):
        run_tune(path, INPROCESS)


@pytest.mark.parametrize(
    ("model", "field"),
    [
        ({"onnx": "missing.onnx"}, "model.onnx"),
        ({"entry_point": "no_such_package.module:build"}, "model.entry_point"),
    ],
)
def test_bad_model_writes_nothing(write_request, tmp_path: Path, model: dict, field: str) -> None:
    with pytest.raises(RequestError) as info:
        run_tune(write_request(model=model), INPROCESS)
    assert info.value.field == field
    assert not (tmp_path / "study.db").exists()
    assert not (tmp_path / "mlflow.db").exists()


@pytest.mark.slow
def test_resuming_with_another_model_is_refused(write_request, tmp_path: Path) -> None:
    run_tune(write_request(budget={"trials": 1}), INPROCESS)
    onnx_path = tmp_path / "other.onnx"
    import torch

    from experiments.digits.model import build_model

    torch.onnx.export(build_model(), (torch.zeros(1, 1, 8, 8),), str(onnx_path), dynamo=False)
    with pytest.raises(RequestError) as info:
        run_tune(write_request(model={"onnx": str(onnx_path)}, budget={"trials": 1}), INPROCESS)
    assert info.value.field == "study"
    assert "model_sha256" in info.value.rule


@pytest.mark.slow
def test_logged_model_reproduces_the_tuned_accuracy(write_request, tmp_path: Path) -> None:
    from workers import evaluate_artifact

    path = write_request(budget={"trials": 4})
    outcome, tuned_file = run_tune(path, INPROCESS)
    tuned = outcome.tuned
    client = MlflowClient(tuned.mlflow["tracking_uri"])
    local = client.download_artifacts(tuned.mlflow["run_id"], "optimized_model", str(tmp_path))
    workload = load_request(path).workload(path.parent)
    assert evaluate_artifact(local, workload) == pytest.approx(tuned.metrics["accuracy"], abs=1e-12)

    # The tuned file loads as one call, with what was measured: judged on the samples the
    # study judged by (those it held out to calibrate static int8 left out).
    import autotune
    from workers.cache import WorkloadCache

    judged = WorkloadCache().get(workload).data
    inputs, labels = judged.inputs, judged.labels
    with autotune.load(tuned_file) as predictor:
        assert predictor.config.engine == tuned.config["runtime.engine"]
        assert predictor.batch_size == tuned.config["batch.size"]
        top1 = float(np.mean(predictor.predict(inputs).argmax(axis=1) == labels))
    assert top1 == pytest.approx(tuned.metrics["accuracy"], abs=1e-12)


@pytest.mark.integration
def test_reading_stored_studies_leaves_no_connection_open() -> None:
    """The service reads a study for every /pareto request and every re-tune; each read
    must close its connections itself, not leave them to the garbage collector."""
    with postgres_databases(1, "autotune_reads") as (storage,):
        optuna.create_study(study_name="s", storage=storage)
        gc.collect()
        database = storage.rsplit("/", 1)[1]
        before = connections_to(database)
        gc.disable()
        try:
            for _ in range(4):
                assert study_front("s", storage) == []
                assert load_warm_start("s", storage).trials == []
            after = connections_to(database)
        finally:
            gc.enable()
    assert after == before


def connections_to(database: str) -> int:
    import sqlalchemy

    engine = sqlalchemy.create_engine(ADMIN_URL, poolclass=sqlalchemy.pool.NullPool)
    with engine.connect() as connection:
        query = "SELECT count(*) FROM pg_stat_activity WHERE datname = :name"
        return connection.execute(sqlalchemy.text(query), {"name": database}).scalar_one()


@pytest.mark.slow
def test_after_a_resume_the_parent_run_shows_the_tuned_file(write_request) -> None:
    """Each round logs its figures at its own step: MLflow's latest parent metrics are the
    second tuned file's, not the larger of the two rounds'."""
    path = write_request(budget={"trials": 3})
    run_tune(path, INPROCESS)
    _, written = run_tune(path, replace(INPROCESS, trials=4))
    tuned = yaml.safe_load(written.read_text())
    client = MlflowClient(tuned["mlflow"]["tracking_uri"])
    parent = client.get_run(tuned["mlflow"]["run_id"])
    latest = parent.data.metrics
    expected = {
        f"{prefix}.{name}": value
        for prefix, figures in (("tuned", tuned["metrics"]), ("baseline", tuned["baseline"]))
        for name, value in figures.items()
        if is_number(value) and f"{prefix}.{name}" in latest
    }
    for metric, ratio in tuned["headline"]["ratios"].items():
        expected.update({f"headline.{metric}.{part}": v for part, v in ratio.items()})
    assert {"tuned.latency_p95_ms", "baseline.latency_p95_ms", "tuned.throughput_per_s"} <= set(
        expected
    )
    assert {key: latest[key] for key in expected} == expected
    history = client.get_metric_history(parent.info.run_id, "tuned.latency_p95_ms")
    assert sorted(m.step for m in history) == [1, 2]
    assert parent.data.tags[ROUND_TAG] == "2"


@pytest.mark.slow
def told_once_without_the_summary(events: list[str]) -> list[str]:
    """The events but the search's summary of its trials, which must be told exactly once."""
    summaries = [e for e in events if e.startswith("study digits-test: 3 trials: ")]
    assert len(summaries) == 1, events
    return [e for e in events if e not in summaries]


def test_a_resume_that_measured_nothing_reuses_the_head_to_head(
    write_request, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []
    compare = InProcessExecutor.compare

    def counted(executor: InProcessExecutor, spec: HeadToHeadSpec) -> HeadToHeadResult:
        events.append("compare")
        return compare(executor, spec)

    monkeypatch.setattr(InProcessExecutor, "compare", counted)
    path = write_request(budget={"trials": 3})
    _, written = run_tune(path, replace(INPROCESS, on_phase=events.append, on_note=events.append))
    first = yaml.safe_load(written.read_text())
    events = told_once_without_the_summary(events)
    # The start-up is told as it happens: the hardware, then the model.
    starts = ["start: probing the trial nodes' hardware", "start: loading and inspecting the model"]
    assert [e.split(" on a")[0] for e in events[:2]] == starts
    # A busy machine adds a note on the baseline's batch scan; it is not this test's concern.
    events = [e for e in events[2:] if not e.startswith("the baseline's batch scan ran under")]
    # The head-to-head is announced before the blocking call that runs it.
    assert events[0].startswith("head to head: baseline and")
    confirming = ["head to head (confirming the choice): baseline and 1 finalists", "compare"]
    confirmed = first["revalidation"]["confirmation"] is not None
    # The unmodified model kept is measured as loaded from its artifact against the plain one.
    as_loaded = [
        "head to head (the unmodified model as loaded): the baseline as built for trials and "
        "as loaded from its artifact",
        "compare",
    ]
    kept = first["headline"]["same_as_baseline"]
    shown = [e.split(", 6 rounds")[0] for e in events[1:]]
    assert shown == [
        "compare",
        *(confirming if confirmed else []),
        *(as_loaded if kept else []),
        "export: the optimized model",
    ]

    events.clear()
    artifact = Path(first["artifact"])
    exported_at = artifact.stat().st_mtime_ns
    outcome, written = run_tune(
        path, replace(INPROCESS, on_note=events.append, on_phase=events.append)
    )
    second = yaml.safe_load(written.read_text())
    events = told_once_without_the_summary(events)
    assert events[2:] == ["study digits-test: 3 of 3 trials done, re-using them"]
    for key in ("config", "metrics", "baseline", "constraints", "headline", "revalidation"):
        assert second[key] == first[key], key
    assert any("its figures are reused" in note for note in outcome.notes)
    # nor is the same configuration of the same model exported again
    assert second["artifact"] == first["artifact"]
    assert artifact.stat().st_mtime_ns == exported_at
    assert any("exported last time is reused" in note for note in outcome.notes)

    events.clear()
    validation = {**FAST_VALIDATION, "remeasure_on_resume": True}
    _, written = run_tune(write_request(budget={"trials": 3}, validation=validation), INPROCESS)
    third = yaml.safe_load(written.read_text())
    confirmed = third["revalidation"]["confirmation"] is not None
    kept = third["headline"]["same_as_baseline"]
    # deciding, confirming a choice, and the unmodified model kept measured as loaded
    assert events == ["compare"] * (1 + confirmed + kept)


@pytest.mark.slow
def test_a_hugging_face_directory_is_tuned_end_to_end(write_request, tmp_path: Path) -> None:
    """A tiny transformers encoder saved to a directory, judged on text lines its tokenizer
    prepares: tuned, exported, and loaded back with `autotune.load` as it was measured."""
    from transformers import AutoTokenizer

    import autotune
    from tests.hf_models import SENTENCES, bert_directory, text_file

    model = bert_directory(tmp_path / "encoder")
    lines = text_file(tmp_path / "lines.txt")
    request = write_request(
        name="hf-test",
        model={"hf": "encoder", "task": "feature-extraction"},
        data={"text": "lines.txt", "sequence_length": 16},
        constraints={"max_accuracy_drop": 0.05},
        budget={"trials": 4},
    )
    outcome, written = run_tune(request, INPROCESS)
    tuned = yaml.safe_load(written.read_text())
    assert tuned["baseline"]["accuracy"] == pytest.approx(1.0)  # fidelity, the task's default
    assert tuned["metrics"]["accuracy_drop"] <= 0.05
    assert len(outcome.front) >= 1
    tokens = AutoTokenizer.from_pretrained(str(model))(
        lines.read_text().splitlines(), padding="max_length", max_length=16, return_tensors="np"
    )["input_ids"]
    assert autotune.load(written).predict(tokens).shape == (len(SENTENCES), 32)


@pytest.mark.parametrize(
    ("out", "artifacts", "expected"),
    [
        (None, None, ("autotune-out/s", "autotune-out")),
        ("elsewhere/tuned.yaml", None, ("elsewhere", "elsewhere")),
        ("elsewhere/tuned.yaml", "kept", ("kept", "kept")),
        (None, "kept", ("kept", "kept")),
    ],
)
def test_outputs_go_beside_the_tuned_file_unless_told(
    out: str | None, artifacts: str | None, expected: tuple[str, str]
) -> None:
    """One kind's outputs and where each kind's own directory goes (several kinds): with
    several, `elsewhere/s@FINGERPRINT/`, never a sibling of the directory --out names."""
    out_file = None if out is None else Path(out)
    options = TuneOptions(out=out_file, out_dir=None if artifacts is None else Path(artifacts))
    assert output_dirs(options, "s") == tuple(Path(p) for p in expected)


def test_a_new_experiments_artifacts_on_a_database_store_never_default_to_the_cwd(
    tmp_path: Path,
) -> None:
    def root(uri: str, **options: Any) -> Any:
        request = parse_request({"name": "r", "tracking": {"uri": uri}}, replay=True)
        return mlflow_artifacts(request, TuneOptions(**options), tmp_path / "out")

    postgres = "postgresql+psycopg://u@h/db"
    assert root(postgres) == tmp_path / "out" / "mlruns"  # beside the tuned output
    assert root(postgres, mlflow_artifacts="s3://bucket/a") == "s3://bucket/a"
    assert root(f"sqlite:///{tmp_path}/mlflow.db") is None  # beside the SQLite file
    assert root(f"sqlite:///{tmp_path}/mlflow.db", mlflow_artifacts="/srv/a") == "/srv/a"
    assert root("http://127.0.0.1:5000") is None  # an MLflow server chooses its own
    assert artifact_location(postgres, tmp_path / "a") == (tmp_path / "a").as_uri()
    assert artifact_location("http://127.0.0.1:5000", tmp_path / "a") is None
