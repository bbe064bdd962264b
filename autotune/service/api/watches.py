"""The watch routes: re-tune on a schedule when the model or the hardware changed."""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter, Request

from autotune.service.api.dependencies import Caller, service_of
from autotune.service.api.schemas import (
    BAD_BODY,
    ERRORS,
    WatchCreate,
    WatchList,
    WatchOut,
    utc_time,
)
from autotune.service.db import Watch
from autotune.service.documents import check_document

router = APIRouter()


@router.post("/watches", status_code=201, responses=BAD_BODY)
def create_watch(body: WatchCreate, request: Request, principal: Caller) -> WatchOut:
    """Re-tune on a schedule (`every` or `cron`, exactly one) when the model or the
    hardware changed; the first check is due at once."""
    check_document(body.request)
    watches = service_of(request).watches
    watch = watches.create(principal, body.request, body.every, body.cron, body.retune_trials)
    return _watch(watch)


@router.get("/watches")
def list_watches(request: Request, principal: Caller) -> WatchList:
    """The watches this token can see."""
    return WatchList(watches=[_watch(w) for w in service_of(request).watches.list(principal)])


@router.get("/watches/{id}", responses=ERRORS)
def get_watch(id: str, request: Request, principal: Caller) -> WatchOut:
    return _watch(service_of(request).watches.get(principal, id))


@router.delete("/watches/{id}", status_code=204, responses=ERRORS)
def delete_watch(id: str, request: Request, principal: Caller) -> None:
    """Stop a watch; the jobs it submitted stay."""
    service_of(request).watches.delete(principal, id)


def _watch(watch: Watch) -> WatchOut:
    return WatchOut(
        id=watch.id,
        request=watch.request,
        every_s=watch.every_s,
        cron=watch.cron,
        retune_trials=watch.retune_trials,
        next_run_at=datetime.fromtimestamp(watch.next_run_at, tz=UTC),
        last_checked_at=utc_time(watch.last_checked_at),
        last_job_id=watch.last_job_id,
        created_at=datetime.fromtimestamp(watch.created_at, tz=UTC),
    )
