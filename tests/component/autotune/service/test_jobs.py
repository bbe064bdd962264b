"""The job store on SQLite and on PostgreSQL: deduplication, exclusive claims, leases,
cancel, release; and migrations that match the models."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from autotune.core.errors import Conflict, NotFound
from autotune.service.db import VERSION_TABLE, Base, Database
from autotune.service.jobs import JobDraft, JobStore
from autotune.service.tokens import Principal
from tests.conftest import postgres_databases
from tests.service_support import principal


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    if request.param == "sqlite":
        database = Database(f"sqlite:///{tmp_path / 'service.db'}")
        yield database
        database.close()
        return
    with postgres_databases(1) as (url,):
        database = Database(url)
        yield database
        database.close()


def draft(owner: Principal, name: str = "a", sha: str = "m1") -> JobDraft:
    return JobDraft(
        principal=owner,
        request={"name": name, "budget": {"trials": 5}},
        base_dir="/srv",
        model_source={"kind": "upload", "sha256": sha},
        model_sha256=sha,
        hardware_fingerprint="hw1",
    )


def test_migrations_match_the_models(db: Database) -> None:
    with db.engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
        assert compare_metadata(context, Base.metadata) == []
    Database(db.url).close()  # migrating again is a no-op


def test_identical_submissions_share_one_job(db: Database) -> None:
    store, alice = JobStore(db), principal(db)
    first, created = store.submit(draft(alice))
    again, created_again = store.submit(draft(alice))
    other_model, created_other = store.submit(draft(alice, sha="m2"))
    assert created and not created_again and created_other
    assert again.id == first.id and other_model.id != first.id
    assert again.budget_trials == 5 and again.study_name == f"a (job {first.id[:8]})"


def test_a_study_is_named_after_the_request_and_never_shares_a_name(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two jobs of one name whose ids start alike get studies told apart by a longer id, and
    the prefix the two share names neither."""
    store, alice = JobStore(db), principal(db)
    ids = iter([uuid.UUID("38d0a1b2" + "0" * 24), uuid.UUID("38d0a1b2" + "1" * 24)])
    with monkeypatch.context() as patched:
        patched.setattr("autotune.service.jobs.uuid.uuid4", lambda: next(ids))
        first, _ = store.submit(draft(alice, name="digits"))
        second, _ = store.submit(draft(alice, name="digits", sha="m2"))
    assert first.study_name == "digits (job 38d0a1b2)"
    assert second.study_name == "digits (job 38d0a1b21)"
    with pytest.raises(NotFound, match="job id prefix '38d0a1b2' is ambiguous"):
        store.get(alice, "38d0a1b2")
    assert store.get(alice, "38d0a1b21").id == second.id
    long, _ = store.submit(draft(alice, name="n" * 100, sha="m3"))
    assert len(long.study_name) == 100 and long.study_name.endswith(f" (job {long.id[:8]})")


def test_a_job_is_found_by_a_unique_prefix_of_its_id(db: Database) -> None:
    store, alice = JobStore(db), principal(db)
    job, _ = store.submit(draft(alice))
    assert store.get(alice, job.id[:4]).id == job.id
    assert store.get(alice, job.id[:9].upper()).id == job.id
    for bad in ("abc", job.id[:3], "zzzz", "0" * 33, job.id + "0"):
        with pytest.raises(NotFound, match=f"no such job '{bad}' \\(give its id, or its first 4"):
            store.get(alice, bad)
    bob = principal(db, "bob")
    with pytest.raises(NotFound, match="no such job"):
        store.get(bob, job.id[:6])  # another's job is not there, by its id or a prefix


def test_concurrent_identical_submissions_create_one_job(db: Database) -> None:
    store, alice = JobStore(db), principal(db)
    ids: list[str] = []
    barrier = threading.Barrier(6)

    def submit() -> None:
        barrier.wait()
        job, _ = store.submit(draft(alice, name="race"))
        ids.append(job.id)

    threads = [threading.Thread(target=submit) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(ids) == 6 and len(set(ids)) == 1


def test_a_failed_job_no_longer_answers_identical_submissions(db: Database) -> None:
    store, alice = JobStore(db), principal(db)
    job, _ = store.submit(draft(alice))
    claimed = store.claim("runner-1", 30)
    assert claimed is not None and claimed.id == job.id
    assert store.finish(job.id, "runner-1", "failed", error="broken")
    retry, created = store.submit(draft(alice))
    assert created and retry.id != job.id


def test_claims_are_exclusive_and_leases_expire(db: Database) -> None:
    store, alice = JobStore(db), principal(db)
    job, _ = store.submit(draft(alice))
    claimed = store.claim("runner-1", lease_s=0.5)
    assert claimed is not None and claimed.state == "running" and claimed.attempts == 1
    assert store.claim("runner-2", lease_s=0.5) is None
    assert not store.renew(job.id, "runner-2", 0.5).held
    # runner-1 stops renewing (it died): once the lease expires, runner-2 takes the job over
    taken = None
    for _ in range(50):
        taken = store.claim("runner-2", lease_s=30)
        if taken is not None:
            break
        threading.Event().wait(0.1)
    assert taken is not None and taken.id == job.id and taken.attempts == 2
    assert not store.renew(job.id, "runner-1", 30).held
    assert not store.finish(job.id, "runner-1", "succeeded", result={})
    assert store.finish(job.id, "runner-2", "succeeded", result={"config": {}})
    assert store.get(alice, job.id).state == "succeeded"


def test_cancel_queued_running_and_finished(db: Database) -> None:
    store, alice = JobStore(db), principal(db)
    queued, _ = store.submit(draft(alice, name="q"))
    assert store.cancel(alice, queued.id).state == "cancelled"
    assert store.cancel(alice, queued.id).state == "cancelled"  # twice is fine
    running, _ = store.submit(draft(alice, name="r"))
    assert store.claim("runner-1", 30) is not None
    assert store.cancel(alice, running.id).cancel_requested
    assert store.renew(running.id, "runner-1", 30).cancel_requested
    assert store.finish(running.id, "runner-1", "succeeded", result={})
    with pytest.raises(Conflict):
        store.cancel(alice, running.id)


def test_release_requeues_a_job_for_the_next_runner(db: Database) -> None:
    store, alice = JobStore(db), principal(db)
    job, _ = store.submit(draft(alice))
    assert store.claim("runner-1", 30) is not None
    store.release(job.id, "runner-1")
    again = store.claim("runner-2", 30)
    assert again is not None and again.id == job.id and again.attempts == 2


def test_jobs_are_visible_to_their_token_and_team_only(db: Database) -> None:
    store = JobStore(db)
    alice, bob, carol = (
        principal(db, "alice", "red"),
        principal(db, "bob", "red"),
        principal(db, "carol"),
    )
    job, _ = store.submit(draft(alice))
    assert store.get(bob, job.id).id == job.id
    assert [j.id for j in store.list(bob)] == [job.id]
    with pytest.raises(NotFound):
        store.get(carol, job.id)
    with pytest.raises(NotFound):
        store.cancel(carol, job.id)
    assert store.list(carol) == []


def test_identical_submissions_are_shared_within_a_team_only(db: Database) -> None:
    store = JobStore(db)
    alice, bob, carol, dave = (
        principal(db, "alice", "red"),
        principal(db, "bob", "red"),
        principal(db, "carol", "blue"),
        principal(db, "dave"),
    )
    job, _ = store.submit(draft(alice))
    same, created = store.submit(draft(bob))
    assert not created and same.id == job.id
    theirs, created = store.submit(draft(carol))
    assert created and theirs.id != job.id
    assert store.get(carol, theirs.id).team == "blue"
    alone, created = store.submit(draft(dave))
    assert created and alone.id not in {job.id, theirs.id}
    assert store.submit(draft(dave))[0].id == alone.id
