"""The job routes: submit, list, follow, fetch the result or the Pareto front, cancel."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, BinaryIO, cast

from fastapi import APIRouter, HTTPException, Request
from fastapi.concurrency import run_in_threadpool

from autotune.conclusion.tuned_file import TunedConfig
from autotune.core.errors import Conflict, RequestError
from autotune.service.api.bodies import MULTIPART_TYPE, media_type, multipart_parts, read_form
from autotune.service.api.dependencies import Caller, Service, service_of
from autotune.service.api.schemas import (
    BAD_BODY,
    ENDED,
    ERRORS,
    REQUEST_REF,
    Best,
    JobList,
    JobModel,
    JobStatus,
    JobSummary,
    Pareto,
    ParetoTrial,
    ProblemBody,
    Progress,
    Retune,
    Submitted,
    utc_time,
)
from autotune.service.client_paths import ClientPaths
from autotune.service.db import Job
from autotune.service.documents import JSON_TYPE, YAML_TYPES
from autotune.service.jobs import JobState
from autotune.service.submission import prepare_job
from autotune.service.tokens import Principal

_DOCUMENT_SCHEMA = {"$ref": REQUEST_REF}
SUBMIT_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            JSON_TYPE: {"schema": _DOCUMENT_SCHEMA},
            **{media: {"schema": _DOCUMENT_SCHEMA} for media in YAML_TYPES},
            MULTIPART_TYPE: {
                "schema": {
                    "type": "object",
                    "properties": {
                        "request": {"type": "string", "description": "the request, YAML or JSON"},
                        "model": {
                            "type": "string",
                            "format": "binary",
                            "description": "ONNX, a zip of ONNX with external data, "
                            "or safetensors weights",
                        },
                    },
                    "required": ["request"],
                }
            },
        },
    }
}

router = APIRouter()


@router.post(
    "/jobs",
    status_code=202,
    openapi_extra=SUBMIT_BODY,
    responses={
        **BAD_BODY,
        413: {"model": ProblemBody, "description": "the request or the upload is too large"},
        415: {"model": ProblemBody, "description": "an unsupported content type"},
        503: {"description": "every request parser is busy; retry (Retry-After)"},
    },
)
async def submit_job(request: Request, principal: Caller) -> Submitted:
    """Queue a tuning job; an identical submission answers with the existing job."""
    service = service_of(request)
    media = media_type(request.headers.get("content-type", ""))
    if media == MULTIPART_TYPE:
        async with read_form(request) as form:
            raw, model = await multipart_parts(form, service.documents)
            job, created = await run_in_threadpool(_submit, service, principal, raw, model)
    elif media == JSON_TYPE or media in YAML_TYPES:
        raw = await service.documents.parse(await request.body(), media)
        job, created = await run_in_threadpool(_submit, service, principal, raw, None)
    else:
        accepted = ", ".join((JSON_TYPE, *YAML_TYPES, MULTIPART_TYPE))
        problem = {"field": "content-type", "rule": f"must be one of {accepted}", "value": media}
        raise HTTPException(status_code=415, detail=problem)
    return Submitted(id=job.id, state=cast(JobState, job.state), created=created)


def _submit(
    service: Service, principal: Principal, raw: Any, model: BinaryIO | None
) -> tuple[Job, bool]:
    upload = None
    if model is not None:
        upload = service.models.put_upload(model, service.settings.max_upload_bytes)
    return service.jobs.submit(prepare_job(raw, principal, service.settings, upload))


@router.get("/jobs")
def list_jobs(request: Request, principal: Caller) -> JobList:
    """The jobs this token can see (its own and its team's), newest first."""
    jobs = service_of(request).jobs.list(principal)
    return JobList(jobs=[_summary(job) for job in jobs])


@router.get("/jobs/{id}", responses=ERRORS)
def job_status(id: str, request: Request, principal: Caller) -> JobStatus:
    """A job's state, progress and best feasible configuration so far; `id` may be a unique
    prefix of the job's id (4 characters or more)."""
    service = service_of(request)
    return _status(service.jobs.get(principal, id), service.paths)


@router.get("/jobs/{id}/result", responses={**ERRORS, **ENDED})
def job_result(id: str, request: Request, principal: Caller) -> TunedConfig:
    """The tuned configuration of a job that succeeded; its paths as the client names them
    (the artifact relative to the server's data directory)."""
    service = service_of(request)
    job = service.jobs.get(principal, id)
    if job.state == "succeeded" and job.result is not None:
        return TunedConfig.model_validate(service.paths.value(job.result))
    if job.state == "infeasible":
        raise Conflict(
            f"job {id} is infeasible: no configuration met the constraints ({job.error})"
        )
    if job.state in ("failed", "cancelled"):
        raise Conflict(f"job {id} has no result: it {job.state} ({job.error})")
    raise Conflict(f"job {id} has no result yet: it is {job.state}")


@router.get("/jobs/{id}/pareto", responses=ERRORS)
def job_pareto(id: str, request: Request, principal: Caller) -> Pareto:
    """The feasible Pareto front of the job's study so far (empty before it starts)."""
    from autotune.tuning import study_front

    service = service_of(request)
    job = service.jobs.get(principal, id)
    try:
        front = study_front(job.study_name, service.settings.storage)
    except RequestError:
        front = []  # no study yet
    paths = service.paths
    trials = [
        ParetoTrial(
            trial_number=c.trial_number,
            config=paths.value(c.config),
            metrics=paths.value(c.metrics),
        )
        for c in front
    ]
    return Pareto(trials=trials)


@router.delete("/jobs/{id}", status_code=202, responses={**ERRORS, **ENDED})
def cancel_job(id: str, request: Request, principal: Caller) -> JobStatus:
    """Cancel a queued job at once, or ask a running one to stop after its running trials."""
    service = service_of(request)
    return _status(service.jobs.cancel(principal, id), service.paths)


def _progress(job: Job) -> Progress:
    return Progress(trials_done=job.trials_done, budget=job.budget_trials)


def _summary(job: Job) -> JobSummary:
    return JobSummary(
        id=job.id,
        name=str(job.request.get("name", "")),
        state=cast(JobState, job.state),
        created_at=datetime.fromtimestamp(job.created_at, tz=UTC),
        finished_at=utc_time(job.finished_at),
        progress=_progress(job),
    )


def _status(job: Job, paths: ClientPaths) -> JobStatus:
    """The job as its client sees it: the server's paths in its model source, error and
    best configuration shown as `paths` shows them (the job row keeps them absolute)."""
    return JobStatus(
        id=job.id,
        state=cast(JobState, job.state),
        created_at=datetime.fromtimestamp(job.created_at, tz=UTC),
        started_at=utc_time(job.started_at),
        finished_at=utc_time(job.finished_at),
        progress=_progress(job),
        best=None if job.best is None else Best.model_validate(paths.value(job.best)),
        error=None if job.error is None else paths.text(job.error),
        study=job.study_name,
        model=JobModel(source=paths.value(job.model_source), sha256=job.model_sha256),
        registered_model=paths.value(job.registered_model),
        watch_id=job.watch_id,
        warm_start_from=job.warm_start_from,
        retune=None if job.retune is None else Retune.model_validate(job.retune),
        attempts=job.attempts,
        cancel_requested=job.cancel_requested,
    )
