"""The durable job queue: submit (deduplicated), claim under a lease, renew, finish, cancel.

Runners claim with `SELECT ... FOR UPDATE SKIP LOCKED` on PostgreSQL, so several runners
never take the same job; on SQLite the claim is a compare-and-set UPDATE. A runner that
dies stops renewing its lease; once the lease expires the job is claimable again and the
next runner resumes its study (the study name is the job's).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from autotune.core.errors import Conflict
from autotune.service.db import Database, Job, Token, now
from autotune.service.tokens import Principal, namespace

JobState = Literal["queued", "running", "succeeded", "infeasible", "failed", "cancelled"]
FINAL_STATES = ("succeeded", "infeasible", "failed", "cancelled")
# Outcomes that answer an identical submission; a failed or cancelled job does not.
ANSWERING_STATES = ("queued", "running", "succeeded", "infeasible")
# A job's id in its study's name is at least this long; a study name at most MAX_STUDY_NAME.
SHORT_ID = 8
MAX_STUDY_NAME = 100


@dataclass(frozen=True)
class JobDraft:
    principal: Principal
    request: dict[str, Any]
    base_dir: str
    model_source: dict[str, Any]
    model_sha256: str
    hardware_fingerprint: str
    watch_id: str | None = None
    warm_start_from: str | None = None
    # A watch's re-tune: the job it re-tunes and what changed (`Job.retune`).
    retune: dict[str, Any] | None = None

    @property
    def dedupe_key(self) -> str:
        """Same model bytes, same request, same hardware, for the same team (or the same
        token without a team): the same tuning. Another team's identical submission is a job
        of its own, which it can see."""
        identity = {
            "namespace": self.principal.namespace,
            "request": {k: v for k, v in self.request.items() if k != "model"},
            "model_sha256": self.model_sha256,
            "hardware": self.hardware_fingerprint,
            "warm_start_from": self.warm_start_from,
        }
        return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class Lease:
    """What renewing a lease told the runner."""

    held: bool
    cancel_requested: bool


class JobStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    # -- clients -----------------------------------------------------------------------

    def submit(self, draft: JobDraft) -> tuple[Job, bool]:
        """The new job, or the existing one for an identical submission (created=False)."""
        key = draft.dedupe_key
        existing = self._answering(key)
        if existing is not None:
            return existing, False
        job_id = uuid.uuid4().hex
        budget = draft.request.get("budget", {}).get("trials", 30)
        job = Job(
            id=job_id,
            token_id=draft.principal.token_id,
            team=draft.principal.team,
            state="queued",
            request=draft.request,
            base_dir=draft.base_dir,
            model_source=draft.model_source,
            model_sha256=draft.model_sha256,
            hardware_fingerprint=draft.hardware_fingerprint,
            dedupe_key=key,
            active_key=key,
            study_name=self._study_name(str(draft.request.get("name", "job")), job_id),
            watch_id=draft.watch_id,
            warm_start_from=draft.warm_start_from,
            retune=draft.retune,
            budget_trials=budget,
            trials_done=0,
            cancel_requested=False,
            attempts=0,
            created_at=now(),
        )
        try:
            with self.db.transaction() as session:
                session.add(job)
        except IntegrityError:
            # An identical submission won the race for the unique active key.
            existing = self._answering(key)
            if existing is None:
                raise
            return existing, False
        return job, True

    def _study_name(self, name: str, job_id: str) -> str:
        """'NAME (job 38d0a1b2)': the request's name and the shortest prefix of the job's id,
        of 8 characters or more, that no other job's study has (studies never share a name)."""
        for length in range(SHORT_ID, len(job_id) + 1):
            suffix = f" (job {job_id[:length]})"
            candidate = name[: MAX_STUDY_NAME - len(suffix)] + suffix
            with self.db.transaction() as session:
                taken = session.scalar(select(Job.id).where(Job.study_name == candidate))
            if taken is None:
                return candidate
        raise Conflict(f"job {job_id}: every study name of it is taken")

    def _answering(self, key: str) -> Job | None:
        with self.db.transaction() as session:
            return session.scalar(select(Job).where(Job.active_key == key))

    def get(self, principal: Principal, job_id: str) -> Job:
        return principal.fetch(self.db, Job, job_id, "job")

    def namespace(self, job: Job) -> str:
        """The namespace of the job's team, or of its token when that has no team (what
        `Principal.namespace` of the submitting token is)."""
        with self.db.transaction() as session:
            token_name = session.scalar(select(Token.name).where(Token.id == job.token_id))
        return namespace(str(token_name), job.team)

    def get_any(self, job_id: str) -> Job | None:
        with self.db.transaction() as session:
            return session.get(Job, job_id)

    def list(self, principal: Principal, limit: int = 100) -> list[Job]:
        with self.db.transaction() as session:
            query = (
                select(Job).where(principal.sees(Job)).order_by(Job.created_at.desc()).limit(limit)
            )
            return list(session.scalars(query).all())

    def cancel(self, principal: Principal, job_id: str) -> Job:
        """A queued job is cancelled at once; a running one is asked to stop (its runner
        stops the study cleanly and records 'cancelled'); a finished one cannot be."""
        job_id = self.get(principal, job_id).id  # the whole id, where a prefix was given
        with self.db.transaction() as session:
            queued = session.execute(
                update(Job)
                .where(Job.id == job_id, Job.state == "queued")
                .values(state="cancelled", finished_at=now(), active_key=None)
            )
            if _rowcount(queued) == 0:
                session.execute(
                    update(Job)
                    .where(Job.id == job_id, Job.state == "running")
                    .values(cancel_requested=True)
                )
        job = self.get(principal, job_id)
        if job.state in FINAL_STATES and job.state != "cancelled":
            raise Conflict(f"job {job_id!r} already ended ({job.state})")
        return job

    # -- runners -----------------------------------------------------------------------

    def claim(self, owner: str, lease_s: float) -> Job | None:
        """Take the oldest queued job, or a running one whose lease expired."""
        with self.db.transaction() as session:
            claimable = _claimable(now())
            query = select(Job.id).where(claimable).order_by(Job.created_at).limit(1)
            if self.db.is_postgres:
                query = query.with_for_update(skip_locked=True)
            job_id = session.scalar(query)
            if job_id is None:
                return None
            taken = session.execute(
                update(Job)
                .where(Job.id == job_id, _claimable(now()))
                .values(
                    state="running",
                    lease_owner=owner,
                    lease_expires_at=now() + lease_s,
                    attempts=Job.attempts + 1,
                    started_at=now(),
                )
            )
            if _rowcount(taken) != 1:
                return None  # another runner took it between the select and the update
            return _fresh(session, job_id)

    def renew(self, job_id: str, owner: str, lease_s: float) -> Lease:
        with self.db.transaction() as session:
            renewed = session.execute(
                update(Job)
                .where(Job.id == job_id, Job.lease_owner == owner, Job.state == "running")
                .values(lease_expires_at=now() + lease_s)
            )
            if _rowcount(renewed) != 1:
                return Lease(held=False, cancel_requested=False)
            cancel = session.scalar(select(Job.cancel_requested).where(Job.id == job_id))
            return Lease(held=True, cancel_requested=bool(cancel))

    def progress(
        self, job_id: str, owner: str, trials_done: int, best: dict[str, Any] | None
    ) -> None:
        with self.db.transaction() as session:
            session.execute(
                update(Job)
                .where(Job.id == job_id, Job.lease_owner == owner, Job.state == "running")
                .values(trials_done=trials_done, best=best)
            )

    def finish(
        self,
        job_id: str,
        owner: str,
        state: JobState,
        result: dict[str, Any] | None = None,
        error: str | None = None,
        registered_model: dict[str, Any] | None = None,
    ) -> bool:
        """Record the outcome if this runner still holds the job; False if it lost it."""
        values: dict[str, Any] = {
            "state": state,
            "result": result,
            "registered_model": registered_model,
            "error": error,
            "finished_at": now(),
            "lease_owner": None,
            "lease_expires_at": None,
        }
        if state not in ANSWERING_STATES:
            values["active_key"] = None
        with self.db.transaction() as session:
            done = session.execute(
                update(Job)
                .where(Job.id == job_id, Job.lease_owner == owner, Job.state == "running")
                .values(**values)
            )
            return _rowcount(done) == 1

    def release(self, job_id: str, owner: str) -> None:
        """Give a job back to the queue (its runner is shutting down); the next runner
        resumes its study."""
        with self.db.transaction() as session:
            session.execute(
                update(Job)
                .where(Job.id == job_id, Job.lease_owner == owner, Job.state == "running")
                .values(state="queued", lease_owner=None, lease_expires_at=None)
            )

    def release_owner(self, owner: str) -> Sequence[str]:
        """Give back every job a runner held: the runner died, or was killed on shutdown."""
        return self._give_back(and_(Job.state == "running", Job.lease_owner == owner))

    def requeue_expired(self) -> Sequence[str]:
        """Give back the running jobs whose lease expired: their runner stopped renewing it
        (it died, here or on another machine)."""
        return self._give_back(_expired(now()))

    def expired_leases(self) -> int:
        """Running jobs whose lease expired, not yet given back or claimed again."""
        with self.db.transaction() as session:
            query = select(func.count()).select_from(Job).where(_expired(now()))
            return int(session.scalar(query) or 0)

    def _give_back(self, held: Any) -> Sequence[str]:
        """The jobs `held` selects back to the queue, where the next runner resumes each
        study; one whose cancel was requested ends as cancelled instead."""
        lease = {"lease_owner": None, "lease_expires_at": None}
        with self.db.transaction() as session:
            cancelled = session.execute(
                update(Job)
                .where(held, Job.cancel_requested.is_(True))
                .values(
                    state="cancelled",
                    finished_at=now(),
                    active_key=None,
                    error="cancelled; its runner stopped before the study did",
                    **lease,
                )
                .returning(Job.id)
            )
            ids = list(cancelled.scalars())
            queued = session.execute(
                update(Job).where(held).values(state="queued", **lease).returning(Job.id)
            )
            return ids + list(queued.scalars())

    def latest_outcome(self, watch_id: str) -> Job | None:
        """The newest job of a watch that produced a tuned configuration."""
        with self.db.transaction() as session:
            query = (
                select(Job)
                .where(Job.watch_id == watch_id, Job.state == "succeeded")
                .order_by(Job.created_at.desc())
                .limit(1)
            )
            return session.scalar(query)


def _rowcount(result: Any) -> int:
    """Rows an UPDATE changed (a CursorResult's count; the ORM types it as a plain Result)."""
    return int(result.rowcount)


def _expired(at: float) -> Any:
    return and_(Job.state == "running", Job.lease_expires_at < at)


def _claimable(at: float) -> Any:
    return or_(Job.state == "queued", _expired(at))


def _fresh(session: Session, job_id: str) -> Job:
    job = session.get(Job, job_id, populate_existing=True)
    assert job is not None
    return job
