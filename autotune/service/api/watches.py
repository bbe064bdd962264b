"""The watch routes: re-tune on a schedule when the model or the hardware changed."""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter, Request

from autotune.service.api.dependencies import Caller, Service, service_of
from autotune.service.api.schemas import (
    BAD_BODY,
    ERRORS,
    Change,
    WatchCheckOut,
    WatchCreate,
    WatchList,
    WatchOut,
    utc_time,
)
from autotune.service.db import Watch, WatchCheck
from autotune.service.documents import check_document

router = APIRouter()


@router.post("/watches", status_code=201, responses=BAD_BODY)
def create_watch(body: WatchCreate, request: Request, principal: Caller) -> WatchOut:
    """Re-tune on a schedule (`every` or `cron`, exactly one) when the model or the
    hardware changed; the first check is due at once."""
    check_document(body.request)
    service = service_of(request)
    watch = service.watches.create(
        principal, body.request, body.every, body.cron, body.retune_trials, body.notify
    )
    return _watches(service, [watch])[0]


@router.get("/watches")
def list_watches(request: Request, principal: Caller) -> WatchList:
    """The watches this token can see, each with its kept checks."""
    service = service_of(request)
    return WatchList(watches=_watches(service, service.watches.list(principal)))


@router.get("/watches/{id}", responses=ERRORS)
def get_watch(id: str, request: Request, principal: Caller) -> WatchOut:
    """A watch (by its id, or a unique prefix of it) and its kept checks, newest first."""
    service = service_of(request)
    return _watches(service, [service.watches.get(principal, id)])[0]


@router.delete("/watches/{id}", status_code=204, responses=ERRORS)
def delete_watch(id: str, request: Request, principal: Caller) -> None:
    """Stop a watch; the jobs it submitted stay."""
    service_of(request).watches.delete(principal, id)


def _watches(service: Service, watches: list[Watch]) -> list[WatchOut]:
    history = service.watches.checks(w.id for w in watches)
    return [_watch(w, [_check(c, service) for c in history[w.id]]) for w in watches]


def _check(check: WatchCheck, service: Service) -> WatchCheckOut:
    return WatchCheckOut(
        checked_at=datetime.fromtimestamp(check.checked_at, tz=UTC),
        outcome=check.outcome,  # type: ignore[arg-type]
        change=None if check.change is None else Change.model_validate(check.change),
        job_id=check.job_id,
        note=None if check.note is None else service.paths.text(check.note),
    )


def _watch(watch: Watch, checks: list[WatchCheckOut]) -> WatchOut:
    return WatchOut(
        id=watch.id,
        request=watch.request,
        every_s=watch.every_s,
        cron=watch.cron,
        retune_trials=watch.retune_trials,
        notify=watch.notify_url,
        next_run_at=datetime.fromtimestamp(watch.next_run_at, tz=UTC),
        last_checked_at=utc_time(watch.last_checked_at),
        last_job_id=watch.last_job_id,
        created_at=datetime.fromtimestamp(watch.created_at, tz=UTC),
        checks=checks,
    )
