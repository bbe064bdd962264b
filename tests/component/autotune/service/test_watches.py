"""Scheduled re-tuning: schedules, a watch that fires on a changed model file and not on an
unchanged one, and a re-tune warm-started from the previous job's front."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from autotune.core.contract import NodeInfo, NodeKind
from autotune.core.errors import RequestError
from autotune.service.db import Database
from autotune.service.jobs import JobStore
from autotune.service.runner import JobRunner
from autotune.service.settings import HardwareSurvey, ServiceSettings
from autotune.service.submission import prepare_job
from autotune.service.tokens import Principal
from autotune.service.watches import Scheduler, WatchStore, next_run, parse_every
from autotune.space.hardware import load_profile
from experiments.digits.model import export_weights
from tests.conftest import postgres_databases, stored_trials
from tests.onnx_models import tiny_onnx
from tests.service_fixtures import Notices
from tests.service_support import (
    PROFILES,
    ReplacedNodes,
    principal,
    service_request,
    settings_for,
    sqlite_settings,
    wait_for,
)


def test_intervals_and_cron_schedules() -> None:
    assert parse_every("90s") == 90 and parse_every("30m") == 1800 and parse_every("1d") == 86400
    for bad in ("30", "m", "-5m", "0.1s", "59s", "367d", "9" * 400 + "s"):
        with pytest.raises(RequestError, match="every"):
            parse_every(bad)
    assert parse_every("1s", minimum_s=1.0) == 1.0
    at = datetime(2026, 11, 30, 2, 59, 30, tzinfo=UTC).timestamp()
    assert next_run(1800.0, None, at) == at + 1800
    daily = datetime.fromtimestamp(next_run(None, "0 3 * * *", at), tz=UTC)
    assert daily == datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
    after = datetime.fromtimestamp(next_run(None, "0 3 * * *", daily.timestamp()), tz=UTC)
    assert after == datetime(2026, 12, 1, 3, 0, tzinfo=UTC)
    with pytest.raises(RequestError, match="cron"):
        next_run(None, "61 * * * *", at)


def test_a_watch_needs_one_schedule_and_a_model_file(tmp_path: Path) -> None:
    settings = sqlite_settings(tmp_path)
    db = Database(settings.db)
    watches, alice = WatchStore(db, settings), principal(db)
    with pytest.raises(RequestError, match="schedule"):
        watches.create(alice, service_request(), every="1m", cron="0 3 * * *")
    with pytest.raises(RequestError, match="model"):
        watches.create(alice, service_request(), every="1m")  # an entry point cannot change


def test_a_watch_checks_at_most_once_a_minute_unless_the_server_allows_more(
    tmp_path: Path,
) -> None:
    settings = sqlite_settings(tmp_path)
    (settings.models_root / "tiny.onnx").write_bytes(tiny_onnx().SerializeToString())  # type: ignore[operator]
    request = service_request(model={"onnx": "tiny.onnx"})
    db = Database(settings.db)
    watches, alice = WatchStore(db, settings), principal(db)
    with pytest.raises(RequestError) as info:
        watches.create(alice, request, every="1s")
    assert (info.value.field, info.value.rule, info.value.value) == (
        "every",
        "must be at least 60s",
        "1s",
    )
    assert watches.create(alice, request, every="60s").every_s == 60.0
    settings.min_watch_every_s = 1.0
    assert watches.create(alice, request, every="1s").every_s == 1.0
    db.close()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServiceSettings]:
    """Service settings on SQLite files, or on three fresh PostgreSQL databases."""
    if request.param == "sqlite":
        yield sqlite_settings(tmp_path)
        return
    with postgres_databases(3) as (jobs_db, studies_db, mlflow_db):
        yield settings_for(tmp_path, jobs_db, studies_db, mlflow_db)


@pytest.mark.slow
def test_a_changed_model_file_is_retuned_from_the_previous_front(
    stores: ServiceSettings, tmp_path: Path, notice_server: tuple[str, Notices]
) -> None:
    settings = stores
    settings.min_watch_every_s = 1.0  # ticks a second apart keep the test short
    weights = settings.models_root / "digits.safetensors"  # type: ignore[operator]
    export_weights(weights, seed=0, epochs=3)
    db = Database(settings.db)
    jobs, watches, alice = JobStore(db), WatchStore(db, settings), principal(db)
    model = {"entry_point": "experiments.digits.model:architecture", "weights": weights.name}
    request = service_request(name="watched", trials=6, model=model)
    url, notices = notice_server
    watch = watches.create(alice, request, every="1s", retune_trials=4, notify=url)
    scheduler, runner = Scheduler(db, settings), JobRunner(db, settings)

    (first,) = scheduler.tick()  # due at once: the first tuning
    assert runner.run_once() == first
    assert jobs.get(alice, first).state == "succeeded"

    ticked = wait_for(lambda: _ticked(scheduler, watches, alice, watch.id), 30, "a tick")
    assert ticked == ([],)
    assert jobs.list(alice)[0].id == first  # unchanged model: nothing submitted

    export_weights(weights, seed=1, epochs=3)
    (retune,) = wait_for(lambda: scheduler.tick(), 30, "the re-tune")
    job = jobs.get(alice, retune)
    assert job.warm_start_from == first and job.watch_id == watch.id
    assert (
        job.request["budget"]["trials"] == 4
        and job.model_sha256 != jobs.get(alice, first).model_sha256
    )
    assert runner.run_once() == retune
    done = jobs.get(alice, retune)
    assert done.state == "succeeded", done.error
    # Each job's end was posted to the watch's URL: the re-tune's says what changed.
    told, notice = wait_for(lambda: notices.received[1:] and notices.received, 10, "notices")
    assert (told["job_id"], told["changed"]) == (first, "the watch's first tuning")
    assert (notice["job_id"], notice["retune_of"], notice["state"]) == (retune, first, "succeeded")
    assert notice["changed"].startswith("model weights changed (")
    assert notice["headline"] == done.result["headline"]["text"]  # type: ignore[index]
    assert notice["mlflow"]["run_id"] == done.result["mlflow"]["run_id"]  # type: ignore[index]

    previous_study = jobs.get(alice, first).study_name
    trials = stored_trials(settings.storage, done.study_name)
    warm = [t for t in trials if t.marks.warm_start == previous_study]
    assert warm and min(t.number for t in warm) == 1  # right after the baseline
    client = MlflowClient(settings.tracking_uri)
    run_id = done.result["mlflow"]["run_id"]  # type: ignore[index]
    path = client.download_artifacts(run_id, "comparison.json", str(tmp_path))
    comparison = json.loads(Path(path).read_text())
    # Measured side by side in the re-tune's rounds, never two figures of different days.
    assert comparison["text"] == "same configuration: no change" or comparison["ratios"]
    assert done.result["previous"]["text"] == comparison["text"]  # type: ignore[index]
    assert "metric_changes" not in comparison
    registered = client.get_model_version_by_alias("token~alice~watched", "tuned")
    assert registered.tags["autotune.job"] == retune
    db.close()


def _ticked(
    scheduler: Scheduler, watches: WatchStore, alice: Principal, watch_id: str
) -> tuple[list[str]] | None:
    """The jobs a tick submitted, once the watch was due and checked again."""
    before = watches.get(alice, watch_id).last_checked_at
    submitted = scheduler.tick()
    after = watches.get(alice, watch_id).last_checked_at
    return (submitted,) if after != before else None


def test_a_hardware_survey_is_reused_for_its_time_to_live() -> None:
    nodes = ReplacedNodes()
    survey = HardwareSurvey(nodes.kinds, ttl_s=3600)
    assert survey.kinds() == survey.kinds() == nodes.kinds()
    assert nodes.surveys == 2  # once by the survey, once by the comparison
    assert HardwareSurvey(nodes.kinds, ttl_s=0).kinds() and nodes.surveys == 3


def test_replaced_trial_nodes_are_retuned_and_identical_submissions_are_told_apart(
    tmp_path: Path,
) -> None:
    """The dedupe key and the watch's hardware come from the executor's nodes, not from the
    service's own machine: a GPU node replaced by another model re-tunes the watched model."""
    settings = sqlite_settings(tmp_path)
    settings.min_watch_every_s = 1.0
    nodes = ReplacedNodes()
    settings.hardware = HardwareSurvey(nodes.kinds, ttl_s=0)
    (settings.models_root / "tiny.onnx").write_bytes(tiny_onnx().SerializeToString())  # type: ignore[operator]
    db = Database(settings.db)
    jobs, watches, alice = JobStore(db), WatchStore(db, settings), principal(db)
    watch = watches.create(alice, service_request(model={"onnx": "tiny.onnx"}), every="1s")
    scheduler = Scheduler(db, settings)

    (first,) = scheduler.tick()
    assert jobs.get(alice, first).hardware_fingerprint == nodes.profile.fingerprint
    ticked = wait_for(lambda: _ticked(scheduler, watches, alice, watch.id), 30, "a tick")
    assert ticked == ([],)  # the same nodes: nothing to re-tune

    nodes.profile = load_profile(PROFILES / "h200x8.json")
    (retune,) = wait_for(lambda: scheduler.tick(), 30, "the re-tune")
    assert retune != first
    assert jobs.get(alice, retune).hardware_fingerprint == nodes.profile.fingerprint
    assert watches.get(alice, watch.id).last_hardware_fingerprint == nodes.profile.fingerprint
    db.close()


def test_a_job_on_a_cluster_of_several_kinds_names_its_kind(tmp_path: Path) -> None:
    """With nodes of two kinds, a submission without a `target` is bad input naming the
    kinds; with one, the job's hardware (its dedupe key) is the targeted kind's."""
    settings = sqlite_settings(tmp_path)
    a100, h200 = load_profile(PROFILES / "a100.json"), load_profile(PROFILES / "h200x8.json")
    nodes = [
        NodeKind(
            profile=profile,
            nodes=[
                NodeInfo(node_id=name, hostname=name, labels={"gpu": name}, cpus=8, gpus=1, slots=1)
            ],
        )
        for name, profile in (("a100", a100), ("h200", h200))
    ]
    settings.hardware = HardwareSurvey(lambda: nodes, ttl_s=0)
    db = Database(settings.db)
    alice = principal(db)
    with pytest.raises(RequestError) as info:
        prepare_job(service_request(), alice, settings)
    assert info.value.field == "target" and a100.fingerprint in info.value.rule
    draft = prepare_job(service_request(target="gpu=h200"), alice, settings)
    assert draft.hardware_fingerprint == h200.fingerprint
    assert draft.request["target"] == "gpu=h200"
    db.close()


def test_a_cron_schedule_is_held_to_the_server_s_minimum_interval_too(tmp_path: Path) -> None:
    """A server allowing a check an hour at most refuses '--every 30m', and so a cron that
    fires every minute, or twice an hour at 0 and 1 past, whatever its other fires."""
    settings = sqlite_settings(tmp_path)
    settings.min_watch_every_s = 3600.0
    (settings.models_root / "tiny.onnx").write_bytes(tiny_onnx().SerializeToString())  # type: ignore[operator]
    request = service_request(model={"onnx": "tiny.onnx"})
    db = Database(settings.db)
    watches, alice = WatchStore(db, settings), principal(db)
    for cron, apart in (("* * * * *", "60s"), ("0,1 * * * *", "60s"), ("0,59 0,23 * * *", "60s")):
        with pytest.raises(RequestError) as info:
            watches.create(alice, request, cron=cron)
        assert (info.value.field, info.value.value) == ("cron", cron)
        assert (
            info.value.rule == f"must not fire more often than every 3600s (it fires {apart} apart)"
        )
    assert watches.create(alice, request, cron="0 * * * *").cron == "0 * * * *"
    assert watches.create(alice, request, cron="0 3 * * *").cron == "0 3 * * *"
