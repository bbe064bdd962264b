"""The bodies the API reads and answers, and the error responses its routes declare."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from autotune.requests.request import MAX_TRIALS
from autotune.service.jobs import JobState

REQUEST_REF = "#/components/schemas/TuningRequest"


class ApiModel(BaseModel):
    """A body of the REST API: unknown fields refused (a 422 naming them)."""

    model_config = ConfigDict(extra="forbid")


class Problem(ApiModel):
    field: str
    rule: str
    value: Any


class ProblemBody(ApiModel):
    detail: Problem


class MessageBody(ApiModel):
    detail: str


class Runners(ApiModel):
    """This server's job runner processes (absent where it runs none)."""

    expected: int
    alive: int
    restarts: int


class Health(ApiModel):
    status: Literal["ok", "degraded", "unavailable"]
    reason: str | None = None
    runners: Runners | None = None
    # Running jobs whose runner stopped renewing the lease, not yet back in the queue.
    expired_leases: int | None = None


class Submitted(ApiModel):
    id: str
    state: JobState
    created: bool


class Progress(ApiModel):
    trials_done: int
    budget: int | None


class Best(ApiModel):
    trial: int
    config: dict[str, Any]
    metrics: dict[str, Any]


class JobModel(ApiModel):
    """The model a job tunes: where it came from, and its digest."""

    source: dict[str, Any]
    sha256: str


class JobSummary(ApiModel):
    id: str
    name: str
    state: JobState
    created_at: datetime
    finished_at: datetime | None
    progress: Progress


class JobList(ApiModel):
    jobs: list[JobSummary]


class Changed(ApiModel):
    old: str | None
    new: str


class ModelChanged(Changed):
    what: str


class Change(ApiModel):
    """What a watch's check found different (on its first check, `old` is null)."""

    model: ModelChanged | None = None
    hardware: Changed | None = None


class Retune(Change):
    """A watch's re-tune: the job it re-tunes (`of`) and what changed since."""

    of: str | None


class JobStatus(ApiModel):
    id: str
    state: JobState
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    progress: Progress
    best: Best | None
    error: str | None
    study: str
    model: JobModel
    registered_model: dict[str, Any] | None
    watch_id: str | None
    warm_start_from: str | None
    retune: Retune | None
    attempts: int
    cancel_requested: bool


class ParetoTrial(ApiModel):
    trial_number: int
    config: dict[str, Any]
    metrics: dict[str, Any]


class Pareto(ApiModel):
    trials: list[ParetoTrial]


class WatchCreate(ApiModel):
    request: Annotated[dict[str, Any], WithJsonSchema({"allOf": [{"$ref": REQUEST_REF}]})]
    every: str | None = None
    cron: str | None = None
    retune_trials: int | None = Field(default=None, le=MAX_TRIALS)
    notify: str | None = Field(
        default=None, description="an http(s) URL the end of each of its jobs is posted to"
    )


class WatchCheckOut(ApiModel):
    """One check of a watch: 'first' (recorded the model and hardware), 'unchanged',
    'changed' (`change` says what), or 'error' (`note` says why it could not tell); `job_id`
    is the job it submitted (or the identical job that answered)."""

    checked_at: datetime
    outcome: Literal["first", "unchanged", "changed", "error"]
    change: Change | None
    job_id: str | None
    note: str | None


class WatchOut(ApiModel):
    id: str
    request: dict[str, Any]
    every_s: float | None
    cron: str | None
    retune_trials: int | None
    notify: str | None
    next_run_at: datetime
    last_checked_at: datetime | None
    last_job_id: str | None
    created_at: datetime
    checks: list[WatchCheckOut] = Field(description="its kept checks, newest first")


class WatchList(ApiModel):
    watches: list[WatchOut]


def utc_time(epoch: float | None) -> datetime | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, tz=UTC)


# What every route behind the token may answer, besides its own responses.
PROTECTED: dict[int | str, dict[str, Any]] = {
    401: {"model": MessageBody, "description": "missing, unknown or revoked token"},
    503: {"model": MessageBody, "description": "the job database is unavailable"},
}
BAD_INPUT: dict[int | str, dict[str, Any]] = {
    422: {"model": ProblemBody, "description": "bad input: the field, the rule and the value"},
}
# What a route that reads a body answers besides.
BAD_BODY: dict[int | str, dict[str, Any]] = {
    **BAD_INPUT,
    408: {"model": ProblemBody, "description": "the body did not arrive in the server's time"},
}
ERRORS: dict[int | str, dict[str, Any]] = {
    **BAD_INPUT,
    404: {"model": MessageBody, "description": "no such job or watch visible to this token"},
}
ENDED: dict[int | str, dict[str, Any]] = {
    409: {"model": MessageBody, "description": "the job's state does not allow this"}
}
