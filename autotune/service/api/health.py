"""/healthz: the one route that needs no token."""

from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter, Request, Response
from sqlalchemy.exc import SQLAlchemyError

from autotune.service.api.dependencies import service_of
from autotune.service.api.schemas import Health, Runners
from autotune.service.supervisor import RunnerCounts

router = APIRouter()


@router.get("/healthz", responses={503: {"model": Health}}, response_model_exclude_none=True)
def healthz(request: Request, response: Response) -> Health:
    """Status "ok": the database answers and, where this server runs job runners, they are
    alive. "degraded" (still 200): some of its runners are being restarted, or running jobs
    wait with an expired lease. "unavailable" (503): the database does not answer, or none
    of this server's runners is alive."""
    service = service_of(request)
    try:
        expired = service.jobs.expired_leases()
    except SQLAlchemyError:
        response.status_code = 503
        return Health(status="unavailable", reason="the database does not answer")
    counts = service.runner_counts() if service.runner_counts is not None else None
    health = _health(counts, expired)
    if health.status == "unavailable":
        response.status_code = 503
    return health


def _health(counts: RunnerCounts | None, expired: int) -> Health:
    health = Health(
        status="ok",
        runners=None if counts is None else Runners(**asdict(counts)),
        expired_leases=expired or None,
    )
    if counts is not None and counts.expected and not counts.alive:
        reason = f"none of this server's {counts.expected} job runners is alive; restarting"
        return health.model_copy(update={"status": "unavailable", "reason": reason})
    problems = []
    if counts is not None and counts.alive < counts.expected:
        problems.append(
            f"{counts.alive} of {counts.expected} job runners alive; the others are restarting"
        )
    if expired:
        problems.append(f"{expired} running job(s) with an expired lease (their runner stopped)")
    if problems:
        return health.model_copy(update={"status": "degraded", "reason": "; ".join(problems)})
    return health
