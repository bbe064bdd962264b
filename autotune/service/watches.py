"""Scheduled re-tuning: a watch names a model source and a request, and re-tunes when the
model or the hardware changed.

The schedule lives in the service database (each watch's next run time), so it survives
restarts and several scheduler processes never fire the same watch twice: a tick claims
due watches with `SELECT ... FOR UPDATE SKIP LOCKED` on PostgreSQL. Cron expressions are
computed by APScheduler's `CronTrigger`.
"""

from __future__ import annotations

import builtins
import logging
import math
import re
import threading
import uuid
from collections.abc import Iterable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from autotune.core.contract import ModelRef
from autotune.core.errors import AutotuneError, RequestError
from autotune.service.changes import describe_change, model_kind
from autotune.service.db import Database, Job, Token, Watch, WatchCheck, now
from autotune.service.jobs import JobStore
from autotune.service.settings import ServiceSettings, check_web_url
from autotune.service.submission import base_dir, prepare_job
from autotune.service.tokens import Principal
from autotune.tuning import study_front

log = logging.getLogger("autotune.watches")

_EVERY = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h|d)$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
# A watch checks at most once a minute (a server may allow less: `min_watch_every_s`) and
# at least once a year.
MIN_EVERY_S = 60.0
MAX_EVERY_S = 366 * 86400.0
# A re-tune measures at least this many new configurations beyond the previous front.
RETUNE_EXPLORATION = 4
# The checks a watch keeps in its history, the newest.
CHECKS_KEPT = 100


def parse_every(text: str, minimum_s: float = MIN_EVERY_S) -> float:
    """'30m' -> 1800.0; units s, m, h, d; from `minimum_s` to a year."""
    match = _EVERY.match(text.strip())
    if match is None:
        raise RequestError("every", "must look like '90s', '30m', '6h' or '1d'", text)
    seconds = float(match.group(1)) * _UNIT_S[match.group(2)]
    if seconds < minimum_s:
        raise RequestError("every", f"must be at least {minimum_s:g}s", text)
    if seconds > MAX_EVERY_S:
        raise RequestError("every", f"must be at most {MAX_EVERY_S / 86400:g}d", text)
    return seconds


def next_run(every_s: float | None, cron: str | None, after: float) -> float:
    if every_s is not None:
        return after + every_s
    assert cron is not None
    # The first fire time strictly after `after` (cron fires on whole seconds).
    start = datetime.fromtimestamp(math.floor(after) + 1, tz=UTC)
    fire = _cron_trigger(cron).get_next_fire_time(None, start)
    if fire is None:
        raise RequestError("cron", "must fire again", cron)
    return fire.timestamp()


# Fire times a cron schedule's shortest interval is read from: a crontab is a cross product of
# its fields, so every day it fires on repeats the same times, and its shortest interval shows
# within its first two firing days, whose fires are at most 2 x 1,440.
CRON_FIRES_READ = 2 * 1440 + 1


def cron_shortest_interval_s(cron: str, after: float) -> float:
    """The shortest time between two fires of `cron` (read over its first fires after
    `after`, at most a year of them); infinity where it fires once."""
    trigger = _cron_trigger(cron)
    horizon = after + MAX_EVERY_S
    fire = trigger.get_next_fire_time(None, datetime.fromtimestamp(math.floor(after) + 1, tz=UTC))
    shortest = math.inf
    for _ in range(CRON_FIRES_READ):
        if fire is None or fire.timestamp() > horizon:
            break
        following = trigger.get_next_fire_time(fire, fire + timedelta(seconds=1))
        if following is not None:
            shortest = min(shortest, (following - fire).total_seconds())
        fire = following
    return shortest


def _cron_trigger(cron: str) -> Any:
    from apscheduler.triggers.cron import CronTrigger

    try:
        return CronTrigger.from_crontab(cron, timezone=UTC)
    except ValueError as error:
        raise RequestError(
            "cron", f"must be a 5-field crontab expression ({error})", cron
        ) from None


# The model references a watch can see change: files, a model directory, a registered model.
WATCHABLE = frozenset({"onnx", "registered", "weights", "hf"})


class WatchStore:
    def __init__(self, db: Database, settings: ServiceSettings) -> None:
        self.db = db
        self.settings = settings

    def create(
        self,
        principal: Principal,
        request: dict[str, Any],
        every: str | None = None,
        cron: str | None = None,
        retune_trials: int | None = None,
        notify: str | None = None,
    ) -> Watch:
        """A new watch; its first tick (due at once) submits the first tuning. Where `notify`
        is given, the end of each job it submits is posted there."""
        if (every is None) == (cron is None):
            raise RequestError("schedule", "give exactly one of 'every' or 'cron'", None)
        minimum_s = self.settings.min_watch_every_s
        every_s = parse_every(every, minimum_s) if every is not None else None
        if cron is not None:
            next_run(None, cron, now())  # validates the expression
            shortest = cron_shortest_interval_s(cron, now())
            if shortest < minimum_s:
                raise RequestError(
                    "cron",
                    f"must not fire more often than every {minimum_s:g}s (it fires "
                    f"{shortest:g}s apart)",
                    cron,
                )
        if retune_trials is not None and retune_trials < 1:
            raise RequestError("retune_trials", "must be >= 1", retune_trials)
        if notify is not None:
            check_web_url("notify", notify)
        if isinstance(request, dict) and "model" in request:
            model = request["model"]
            if not isinstance(model, dict) or not (WATCHABLE & set(model)):
                raise RequestError(
                    "model", "a watch needs a model file, directory or registered model", model
                )
        prepare_job(request, principal, self.settings)  # the request must be valid now
        watch = Watch(
            id=uuid.uuid4().hex,
            token_id=principal.token_id,
            team=principal.team,
            request=request,
            base_dir=str(base_dir(self.settings)),
            every_s=every_s,
            cron=cron,
            next_run_at=now(),
            retune_trials=retune_trials,
            created_at=now(),
            notify_url=notify,
        )
        with self.db.transaction() as session:
            session.add(watch)
        return watch

    def list(self, principal: Principal) -> list[Watch]:
        with self.db.transaction() as session:
            query = select(Watch).where(principal.sees(Watch)).order_by(Watch.created_at)
            return list(session.scalars(query).all())

    def get(self, principal: Principal, watch_id: str) -> Watch:
        return principal.fetch(self.db, Watch, watch_id, "watch")

    def checks(self, watch_ids: Iterable[str]) -> dict[str, builtins.list[WatchCheck]]:
        """The kept checks of each watch, newest first."""
        history: dict[str, builtins.list[WatchCheck]] = {watch_id: [] for watch_id in watch_ids}
        with self.db.transaction() as session:
            query = (
                select(WatchCheck)
                .where(WatchCheck.watch_id.in_(list(history)))
                .order_by(WatchCheck.id.desc())
            )
            for check in session.scalars(query):
                history[check.watch_id].append(check)
        return history

    def delete(self, principal: Principal, watch_id: str) -> None:
        watch_id = self.get(principal, watch_id).id
        with self.db.transaction() as session:
            watch = session.get(Watch, watch_id)
            if watch is not None:
                session.execute(delete(WatchCheck).where(WatchCheck.watch_id == watch_id))
                session.delete(watch)


class Scheduler:
    """Ticks due watches: fingerprint the model and the hardware, submit a re-tune when
    either changed, and move the watch's next run time."""

    def __init__(self, db: Database, settings: ServiceSettings) -> None:
        self.db = db
        self.settings = settings
        self.jobs = JobStore(db)
        self.stopped = threading.Event()

    def run_forever(self) -> None:
        while not self.stopped.is_set():
            try:
                self.tick()
            except Exception:
                log.exception("scheduler tick failed; trying again")
            self.stopped.wait(self.settings.poll_s)

    def tick(self) -> list[str]:
        """Check every due watch once; return the ids of the jobs submitted. The trial nodes'
        hardware is asked for only when a watch is due (`ServiceSettings.hardware` reuses a
        recent survey), and each watch compares the kind its request targets."""
        submitted: list[str] = []
        while True:
            with self.db.transaction() as session:
                watch = self._claim_due(session)
                if watch is None:
                    return submitted
                job_id = self._check(session, watch)
                if job_id is not None:
                    submitted.append(job_id)

    def _claim_due(self, session: Session) -> Watch | None:
        query = select(Watch).where(Watch.next_run_at <= now()).order_by(Watch.next_run_at)
        if self.db.is_postgres:
            # NO KEY UPDATE: the re-tune job inserted meanwhile references this row, and
            # its foreign-key check must not wait for this transaction.
            query = query.with_for_update(skip_locked=True, key_share=True)
        return session.scalars(query.limit(1)).first()

    def _check(self, session: Session, watch: Watch) -> str | None:
        """Submit a re-tune if the model or hardware changed, and keep the check in the
        watch's history; the watch's own changes are written last, with the tick's commit
        (on SQLite, an earlier write would hold the one write lock while the job is
        inserted)."""
        checked = now()
        with session.no_autoflush:
            check = self._compare(session, watch)
        check.watch_id, check.checked_at = watch.id, checked
        session.add(check)
        kept = (
            select(WatchCheck.id)
            .where(WatchCheck.watch_id == watch.id)
            .order_by(WatchCheck.id.desc())
            .limit(CHECKS_KEPT)
        )
        session.execute(
            delete(WatchCheck).where(
                WatchCheck.watch_id == watch.id, WatchCheck.id.not_in(kept.scalar_subquery())
            )
        )
        watch.next_run_at = next_run(watch.every_s, watch.cron, checked)
        watch.last_checked_at = checked
        return check.job_id

    def _compare(self, session: Session, watch: Watch) -> WatchCheck:
        """What this check found: an error, nothing changed, or a change (the first check's
        included) and the job submitted for it."""
        token = session.get(Token, watch.token_id)
        if token is None or token.revoked_at is not None:
            return _failed(watch, "its token is revoked")
        principal = Principal(token_id=token.id, name=token.name, team=token.team)
        try:
            model = self._model_fingerprint(watch, principal.namespace)
        except AutotuneError as error:
            return _failed(watch, f"cannot read its model: {error}")
        try:
            hardware = self.settings.job_hardware(watch.request.get("target"))
        except AutotuneError as error:
            return _failed(watch, f"cannot tell its hardware: {error}")
        if (model, hardware) == (watch.last_model_fingerprint, watch.last_hardware_fingerprint):
            log.info("watch %s: unchanged", watch.id)
            return WatchCheck(outcome="unchanged")
        change = _change(watch, model, hardware)
        first = watch.last_model_fingerprint is None
        job_id = self._submit(watch, principal, change, first)
        watch.last_model_fingerprint = model
        watch.last_hardware_fingerprint = hardware
        watch.last_job_id = job_id
        return WatchCheck(outcome="first" if first else "changed", change=change, job_id=job_id)

    def _submit(
        self, watch: Watch, principal: Principal, change: dict[str, Any], first: bool
    ) -> str:
        previous = self._previous(watch)
        request = dict(watch.request)
        if previous is not None:
            trials = self._retune_trials(watch, previous)
            request["budget"] = {**request.get("budget", {}), "trials": trials}
        draft = prepare_job(
            request,
            principal,
            self.settings,
            watch_id=watch.id,
            warm_start_from=previous.id if previous is not None else None,
        )
        of = previous.id if previous is not None else watch.last_job_id
        retune = None if first else {"of": of, **change}
        job, created = self.jobs.submit(replace(draft, retune=retune))
        submitted = "submitted job" if created else "an identical job answered:"
        if first:
            log.info("watch %s: %s; %s %s", watch.id, describe_change(change), submitted, job.id)
        else:
            log.info(
                "watch %s: %s; %s %s, a re-tune of job %s",
                *(watch.id, describe_change(change), submitted, job.id, of),
            )
        return job.id

    def _previous(self, watch: Watch) -> Job | None:
        """The tuning a re-tune starts from: the watch's last job (which may be an identical
        submission made before the watch existed) or its newest successful one."""
        last = self.jobs.get_any(watch.last_job_id) if watch.last_job_id else None
        if last is not None and last.state == "succeeded":
            return last
        return self.jobs.latest_outcome(watch.id)

    def _retune_trials(self, watch: Watch, previous: Job) -> int:
        """A warm-started re-tune re-measures the previous front and explores a little."""
        if watch.retune_trials is not None:
            return watch.retune_trials
        trials = int(watch.request.get("budget", {}).get("trials") or 30)
        front = study_front(previous.study_name, self.settings.storage)
        return min(trials, max(math.ceil(trials / 3), len(front) + 1 + RETUNE_EXPLORATION))

    def _model_fingerprint(self, watch: Watch, namespace: str) -> str:
        """A registered model is looked up among the watch's team's (`namespace`)."""
        from autotune.requests.sources import source_fingerprint

        model = dict(watch.request.get("model", {}))
        return source_fingerprint(
            ModelRef(**model),
            base_dir(self.settings),
            self.settings.models_root,
            self.settings.tracking_uri,
            namespace,
        )


def _failed(watch: Watch, note: str) -> WatchCheck:
    log.warning("watch %s: %s", watch.id, note)
    return WatchCheck(outcome="error", note=note)


def _change(watch: Watch, model: str, hardware: str) -> dict[str, Any]:
    """What differs from the watch's last check (everything, on its first)."""
    change: dict[str, Any] = {"model": None, "hardware": None}
    if model != watch.last_model_fingerprint:
        what = model_kind(watch.request.get("model"))
        change["model"] = {"what": what, "old": watch.last_model_fingerprint, "new": model}
    if hardware != watch.last_hardware_fingerprint:
        change["hardware"] = {"old": watch.last_hardware_fingerprint, "new": hardware}
    return change
