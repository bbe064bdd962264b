"""The REST API: jobs and watches over HTTP; every route but /healthz needs a bearer token
(the documentation too, unless the server was started with `--public-docs`).

Errors keep one shape: bad input is `{"detail": {"field", "rule", "value"}}` (422, or 413
when something is too large); a missing or bad token is 401, an unknown job (or another
team's) 404, a job whose state does not allow the call 409, and any call while the job
database is unreachable 503.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, BinaryIO, Literal, cast

import yaml
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema
from sqlalchemy.exc import (
    DisconnectionError,
    InterfaceError,
    OperationalError,
    SQLAlchemyError,
)
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.datastructures import FormData, UploadFile
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from autotune.errors import Conflict, NotFound, RequestError, Unauthorized
from autotune.request import MAX_TRIALS, TuningRequest
from autotune.service.db import Database, Job, Watch
from autotune.service.jobs import JobState, JobStore
from autotune.service.settings import ServiceSettings
from autotune.service.submission import SERVICE_FIELDS, prepare_job
from autotune.service.supervisor import RunnerCounts
from autotune.service.tokens import Principal, authenticate
from autotune.service.watches import WatchStore
from autotune.sources import ModelStore, UploadTooLarge
from autotune.tuned import TunedConfig

# The request document itself (not a model upload) is small; anything bigger is refused.
MAX_DOCUMENT_BYTES = 1 << 20
MAX_DOCUMENT_VALUES = 10_000
MAX_DOCUMENT_DEPTH = 32
# Room for multipart boundaries and part headers around the request and the model.
MULTIPART_SLACK_BYTES = 64 << 10
JSON_TYPE = "application/json"
YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml")
MULTIPART_TYPE = "multipart/form-data"
JOBS_PATH = "/v1/jobs"
REQUEST_REF = "#/components/schemas/TuningRequest"
OPENAPI_PATH = "/openapi.json"
DATABASE_DOWN = "the service's job database is unavailable; try again later"
# What the job database raises when it cannot be reached (refused, gone, timed out): the
# service is unavailable (503), not broken (500).
UNAVAILABLE = (OperationalError, InterfaceError, DisconnectionError, PoolTimeout)

log = logging.getLogger("autotune.api")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Problem(Strict):
    field: str
    rule: str
    value: Any


class ProblemBody(Strict):
    detail: Problem


class MessageBody(Strict):
    detail: str


class Runners(Strict):
    """This server's job runner processes (absent where it runs none)."""

    expected: int
    alive: int
    restarts: int


class Health(Strict):
    status: Literal["ok", "degraded", "unavailable"]
    reason: str | None = None
    runners: Runners | None = None
    # Running jobs whose runner stopped renewing the lease, not yet back in the queue.
    expired_leases: int | None = None


class Submitted(Strict):
    id: str
    state: JobState
    created: bool


class Progress(Strict):
    trials_done: int
    budget: int | None


class Best(Strict):
    trial: int
    config: dict[str, Any]
    metrics: dict[str, Any]


class ModelInfo(Strict):
    source: dict[str, Any]
    sha256: str


class JobSummary(Strict):
    id: str
    name: str
    state: JobState
    created_at: datetime
    finished_at: datetime | None
    progress: Progress


class JobList(Strict):
    jobs: list[JobSummary]


class JobStatus(Strict):
    id: str
    state: JobState
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    progress: Progress
    best: Best | None
    error: str | None
    study: str
    model: ModelInfo
    registered_model: dict[str, Any] | None
    watch_id: str | None
    warm_start_from: str | None
    attempts: int
    cancel_requested: bool


class ParetoTrial(Strict):
    trial_number: int
    config: dict[str, Any]
    metrics: dict[str, Any]


class Pareto(Strict):
    trials: list[ParetoTrial]


class WatchCreate(Strict):
    request: Annotated[dict[str, Any], WithJsonSchema({"allOf": [{"$ref": REQUEST_REF}]})]
    every: str | None = None
    cron: str | None = None
    retune_trials: int | None = Field(default=None, le=MAX_TRIALS)


class WatchOut(Strict):
    id: str
    request: dict[str, Any]
    every_s: float | None
    cron: str | None
    retune_trials: int | None
    next_run_at: datetime
    last_checked_at: datetime | None
    last_job_id: str | None
    created_at: datetime


class WatchList(Strict):
    watches: list[WatchOut]


@dataclass(frozen=True)
class Service:
    settings: ServiceSettings
    db: Database
    jobs: JobStore
    watches: WatchStore
    models: ModelStore
    runner_counts: Callable[[], RunnerCounts] | None = None


class ServiceApp(FastAPI):
    """The API; its OpenAPI document describes the tuning request in full."""

    def openapi(self) -> dict[str, Any]:
        if self.openapi_schema is None:
            _add_request_schema(super().openapi())
        return self.openapi_schema  # type: ignore[return-value]


def _add_request_schema(document: dict[str, Any]) -> None:
    schema = TuningRequest.model_json_schema(ref_template="#/components/schemas/{model}")
    components = document.setdefault("components", {}).setdefault("schemas", {})
    for name, definition in schema.pop("$defs", {}).items():
        if components.setdefault(name, definition) != definition:
            raise RuntimeError(f"two OpenAPI schemas are named {name!r}")
    for key in SERVICE_FIELDS:
        schema["properties"].pop(key)
    schema["description"] = (
        "The tuning request, as in a request file. 'storage' and 'tracking' are the "
        "service's; paths name files under the server's models root; entry points must be "
        "in modules the server trusts."
    )
    components["TuningRequest"] = schema


def create_app(
    settings: ServiceSettings,
    db: Database | None = None,
    runner_counts: Callable[[], RunnerCounts] | None = None,
) -> FastAPI:
    """The API over `db` (opened, and migrated, from `settings.db` when not given);
    `runner_counts` tells /healthz about the job runners this server supervises."""
    db = db if db is not None else Database(settings.db)
    app = ServiceApp(
        title="autotune",
        summary="Hardware-aware tuning of ML models, as a service.",
        version="1",
        # Served by `_docs` instead, behind the token unless settings.public_docs.
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
    )
    app.state.service = Service(
        settings=settings,
        db=db,
        jobs=JobStore(db),
        watches=WatchStore(db, settings),
        models=ModelStore(settings.uploads_dir),
        runner_counts=runner_counts,
    )
    app.include_router(public)
    app.include_router(router)
    app.include_router(_docs(settings.public_docs))
    _add_error_handlers(app)
    app.add_middleware(BodyLimit, max_upload_bytes=settings.max_upload_bytes)
    return app


# -- errors --------------------------------------------------------------------------------


def _add_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RequestError, _request_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(Unauthorized, _unauthorized)
    app.add_exception_handler(NotFound, _message(404))
    app.add_exception_handler(Conflict, _message(409))
    app.add_exception_handler(StarletteHTTPException, _http_error)
    for unavailable in UNAVAILABLE:
        app.add_exception_handler(unavailable, _database_unavailable)


async def _request_error(request: Request, exc: Exception) -> JSONResponse:
    error = cast(RequestError, exc)
    return _problem(413 if isinstance(error, UploadTooLarge) else 422, error)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    first = cast(RequestValidationError, exc).errors()[0]
    loc = [str(part) for part in first.get("loc", ())]
    # ("body", "every") names the field "every"; a body that is not JSON names "body".
    field = "body" if first.get("type") == "json_invalid" else ".".join(loc[1:]) or loc[0]
    return _problem(422, RequestError(field, first.get("msg", "invalid"), first.get("input")))


async def _http_error(request: Request, exc: Exception) -> Response:
    """FastAPI answers a body it could not read (not UTF-8, or cut off at its cap) with a
    bare 400; here it is bad input like any other (422, or 413 for the cap)."""
    error = cast(StarletteHTTPException, exc)
    if error.status_code != 400:
        return await http_exception_handler(request, error)
    cause = error.__cause__
    if isinstance(cause, RequestError):
        return await _request_error(request, cause)
    reason = (str(cause).splitlines() or [""])[0] if cause is not None else ""
    rule = f"must be JSON in UTF-8 ({reason or error.detail})"
    return _problem(422, RequestError("body", rule, None))


async def _database_unavailable(request: Request, exc: Exception) -> JSONResponse:
    path = request.url.path
    log.warning("%s %s: the job database is unavailable: %s", request.method, path, exc)
    return JSONResponse({"detail": DATABASE_DOWN}, status_code=503, headers={"Retry-After": "10"})


async def _unauthorized(request: Request, exc: Exception) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"}
    return JSONResponse({"detail": str(exc)}, status_code=401, headers=headers)


def _message(status: int) -> Callable[[Request, Exception], Awaitable[JSONResponse]]:
    async def handler(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=status)

    return handler


def _problem(status: int, error: RequestError) -> JSONResponse:
    detail = {"field": error.field, "rule": error.rule, "value": json_safe(error.value)}
    return JSONResponse({"detail": detail}, status_code=status)


def json_safe(value: Any, budget: int = 200) -> Any:
    """`value` as plain JSON for an error body: at most `budget` values, long strings cut,
    anything JSON cannot hold shown by its repr."""
    left = [budget]

    def walk(item: Any) -> Any:
        left[0] -= 1
        if left[0] < 0:
            return "..."
        if item is None or isinstance(item, bool | int):
            return item
        if isinstance(item, float):
            return item if math.isfinite(item) else repr(item)
        if isinstance(item, str):
            return item if len(item) <= 1000 else item[:1000] + "..."
        if isinstance(item, dict):
            return {str(k)[:200]: walk(v) for k, v in list(item.items())[: left[0] + 1]}
        if isinstance(item, list | tuple):
            return [walk(v) for v in item[: left[0] + 1]]
        return repr(item)[:1000]

    return walk(value)


class BodyLimit:
    """Refuses request bodies over their cap while they stream in (413): a job submission
    with a model upload may carry the upload cap, every other body a request document."""

    def __init__(self, app: ASGIApp, max_upload_bytes: int) -> None:
        self.app = app
        self.max_upload_bytes = max_upload_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self._limit(scope)
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > limit:
            response = _problem(413, _too_large(limit))
            await response(scope, receive, send)
            return
        await self.app(scope, _capped(receive, limit), send)

    def _limit(self, scope: Scope) -> int:
        content_type = dict(scope["headers"]).get(b"content-type", b"").decode("latin-1")
        if scope["path"] == JOBS_PATH and _media_type(content_type) == MULTIPART_TYPE:
            return self.max_upload_bytes + MAX_DOCUMENT_BYTES + MULTIPART_SLACK_BYTES
        return MAX_DOCUMENT_BYTES


def _capped(receive: Receive, limit: int) -> Receive:
    received = 0

    async def capped() -> Message:
        nonlocal received
        message = await receive()
        received += len(message.get("body", b""))
        if received > limit:
            raise _too_large(limit)
        return message

    return capped


def _too_large(limit: int) -> UploadTooLarge:
    return UploadTooLarge("body", f"must be at most {limit} bytes", f"more than {limit} bytes")


# -- authentication ------------------------------------------------------------------------

bearer = HTTPBearer(auto_error=False, description="a token from `autotune token create`")


def _service(request: Request) -> Service:
    return cast(Service, request.app.state.service)


def _caller(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Principal:
    header = None if credentials is None else f"Bearer {credentials.credentials}"
    return authenticate(_service(request).db, header)


Caller = Annotated[Principal, Depends(_caller)]
BAD_INPUT: dict[int | str, dict[str, Any]] = {
    422: {"model": ProblemBody, "description": "bad input: the field, the rule and the value"},
}
ERRORS: dict[int | str, dict[str, Any]] = {
    **BAD_INPUT,
    404: {"model": MessageBody, "description": "no such job or watch visible to this token"},
}
ENDED: dict[int | str, dict[str, Any]] = {
    409: {"model": MessageBody, "description": "the job's state does not allow this"}
}
public = APIRouter()
router = APIRouter(
    prefix="/v1",
    responses={
        401: {"model": MessageBody, "description": "missing, unknown or revoked token"},
        503: {"model": MessageBody, "description": "the job database is unavailable"},
    },
)


def _docs(public: bool) -> APIRouter:
    """The OpenAPI document and its two renderings; without `public`, behind the token like
    every other route. (A browser sends no bearer token: a server whose docs should be
    browsable is started with `--public-docs`.)"""
    docs = APIRouter(include_in_schema=False, dependencies=[] if public else [Depends(_caller)])

    @docs.get(OPENAPI_PATH)
    def openapi(request: Request) -> JSONResponse:
        return JSONResponse(request.app.openapi())

    @docs.get("/docs")
    def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url=OPENAPI_PATH, title="autotune - Swagger UI")

    @docs.get("/redoc")
    def redoc() -> HTMLResponse:
        return get_redoc_html(openapi_url=OPENAPI_PATH, title="autotune - ReDoc")

    return docs


@public.get("/healthz", responses={503: {"model": Health}}, response_model_exclude_none=True)
def healthz(request: Request, response: Response) -> Health:
    """Status "ok": the database answers and, where this server runs job runners, they are
    alive. "degraded" (still 200): some of its runners are being restarted, or running jobs
    wait with an expired lease. "unavailable" (503): the database does not answer, or none
    of this server's runners is alive."""
    service = _service(request)
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


# -- jobs ----------------------------------------------------------------------------------

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


@router.post(
    "/jobs",
    status_code=202,
    openapi_extra=SUBMIT_BODY,
    responses={
        **BAD_INPUT,
        413: {"model": ProblemBody, "description": "the request or the upload is too large"},
        415: {"model": ProblemBody, "description": "an unsupported content type"},
    },
)
async def submit_job(request: Request, principal: Caller) -> Submitted:
    """Queue a tuning job; an identical submission answers with the existing job."""
    service = _service(request)
    media = _media_type(request.headers.get("content-type", ""))
    if media == MULTIPART_TYPE:
        async with _form(request) as form:
            raw, model = await _multipart(form)
            job, created = await run_in_threadpool(_submit, service, principal, raw, model)
    elif media == JSON_TYPE or media in YAML_TYPES:
        raw = _document(await request.body(), media)
        job, created = await run_in_threadpool(_submit, service, principal, raw, None)
    else:
        accepted = ", ".join((JSON_TYPE, *YAML_TYPES, MULTIPART_TYPE))
        problem = {"field": "content-type", "rule": f"must be one of {accepted}", "value": media}
        raise HTTPException(status_code=415, detail=problem)
    return Submitted(id=job.id, state=cast(JobState, job.state), created=created)


@asynccontextmanager
async def _form(request: Request) -> AsyncIterator[FormData]:
    try:
        form = await request.form(max_files=2, max_fields=2, max_part_size=MAX_DOCUMENT_BYTES)
    except StarletteHTTPException as error:  # what Starlette makes of a malformed body
        rule = f"must be well-formed multipart/form-data ({error.detail})"
        raise RequestError("body", rule, None) from None
    try:
        yield form
    finally:
        await form.close()


def _submit(
    service: Service, principal: Principal, raw: Any, model: BinaryIO | None
) -> tuple[Job, bool]:
    upload = None
    if model is not None:
        upload = service.models.put_upload(model, service.settings.max_upload_bytes)
    return service.jobs.submit(prepare_job(raw, principal, service.settings, upload))


def _media_type(content_type: str) -> str:
    return content_type.partition(";")[0].strip().lower()


async def _multipart(form: FormData) -> tuple[Any, BinaryIO | None]:
    names = [name for name, _ in form.multi_items()]
    if sorted(set(names)) != sorted(names) or not set(names) <= {"request", "model"}:
        rule = "must have a 'request' part and at most one 'model' part, nothing else"
        raise RequestError("multipart", rule, names)
    part = form.get("request")
    if part is None:
        raise RequestError("request", "part is required", None)
    text = await part.read(MAX_DOCUMENT_BYTES + 1) if isinstance(part, UploadFile) else part
    raw = _document(text.encode() if isinstance(text, str) else text, YAML_TYPES[0])
    model = form.get("model")
    if model is not None and not isinstance(model, UploadFile):
        raise RequestError("model", "must be a file part", json_safe(model))
    return raw, None if model is None else model.file


def _document(body: bytes, media: str) -> Any:
    if len(body) > MAX_DOCUMENT_BYTES:
        raise _too_large(MAX_DOCUMENT_BYTES)
    kind = "JSON" if media == JSON_TYPE else "YAML"
    try:
        text = body.decode("utf-8")
        raw = json.loads(text) if media == JSON_TYPE else yaml.safe_load(text)
    except (UnicodeDecodeError, ValueError, yaml.YAMLError, RecursionError) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise RequestError("request", f"must be valid {kind} ({reason})", None) from None
    check_document(raw)
    return raw


def check_document(raw: Any) -> None:
    """A request document is small and plain: bounded size and depth (YAML aliases count
    each time they are used), finite numbers."""
    pending: list[tuple[Any, int]] = [(raw, 1)]
    seen = 0
    while pending:
        item, depth = pending.pop()
        seen += 1
        if seen > MAX_DOCUMENT_VALUES:
            raise RequestError("request", f"must hold at most {MAX_DOCUMENT_VALUES} values", None)
        if depth > MAX_DOCUMENT_DEPTH:
            raise RequestError("request", f"must nest at most {MAX_DOCUMENT_DEPTH} levels", None)
        if isinstance(item, float) and not math.isfinite(item):
            raise RequestError("request", "numbers must be finite", repr(item))
        if isinstance(item, dict):
            pending.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list | tuple | set):
            pending.extend((v, depth + 1) for v in item)


@router.get("/jobs")
def list_jobs(request: Request, principal: Caller) -> JobList:
    """The jobs this token can see (its own and its team's), newest first."""
    jobs = _service(request).jobs.list(principal)
    return JobList(jobs=[_summary(job) for job in jobs])


@router.get("/jobs/{id}", responses=ERRORS)
def job_status(id: str, request: Request, principal: Caller) -> JobStatus:
    """A job's state, progress and best feasible configuration so far."""
    return _status(_service(request).jobs.get(principal, id))


@router.get("/jobs/{id}/result", responses={**ERRORS, **ENDED})
def job_result(id: str, request: Request, principal: Caller) -> TunedConfig:
    """The tuned configuration of a job that succeeded."""
    job = _service(request).jobs.get(principal, id)
    if job.state == "succeeded" and job.result is not None:
        return TunedConfig.model_validate(job.result)
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

    service = _service(request)
    job = service.jobs.get(principal, id)
    try:
        front = study_front(job.study_name, service.settings.storage)
    except RequestError:
        front = []  # no study yet
    trials = [
        ParetoTrial(trial_number=c.trial_number, config=c.config, metrics=c.metrics) for c in front
    ]
    return Pareto(trials=trials)


@router.delete("/jobs/{id}", status_code=202, responses={**ERRORS, **ENDED})
def cancel_job(id: str, request: Request, principal: Caller) -> JobStatus:
    """Cancel a queued job at once, or ask a running one to stop after its running trials."""
    return _status(_service(request).jobs.cancel(principal, id))


def _time(epoch: float | None) -> datetime | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, tz=UTC)


def _progress(job: Job) -> Progress:
    return Progress(trials_done=job.trials_done, budget=job.budget_trials)


def _summary(job: Job) -> JobSummary:
    return JobSummary(
        id=job.id,
        name=str(job.request.get("name", "")),
        state=cast(JobState, job.state),
        created_at=datetime.fromtimestamp(job.created_at, tz=UTC),
        finished_at=_time(job.finished_at),
        progress=_progress(job),
    )


def _status(job: Job) -> JobStatus:
    return JobStatus(
        id=job.id,
        state=cast(JobState, job.state),
        created_at=datetime.fromtimestamp(job.created_at, tz=UTC),
        started_at=_time(job.started_at),
        finished_at=_time(job.finished_at),
        progress=_progress(job),
        best=None if job.best is None else Best.model_validate(job.best),
        error=job.error,
        study=job.study_name,
        model=ModelInfo(source=job.model_source, sha256=job.model_sha256),
        registered_model=job.registered_model,
        watch_id=job.watch_id,
        warm_start_from=job.warm_start_from,
        attempts=job.attempts,
        cancel_requested=job.cancel_requested,
    )


# -- watches -------------------------------------------------------------------------------


@router.post("/watches", status_code=201, responses=BAD_INPUT)
def create_watch(body: WatchCreate, request: Request, principal: Caller) -> WatchOut:
    """Re-tune on a schedule (`every` or `cron`, exactly one) when the model or the
    hardware changed; the first check is due at once."""
    check_document(body.request)
    watches = _service(request).watches
    watch = watches.create(principal, body.request, body.every, body.cron, body.retune_trials)
    return _watch(watch)


@router.get("/watches")
def list_watches(request: Request, principal: Caller) -> WatchList:
    """The watches this token can see."""
    return WatchList(watches=[_watch(w) for w in _service(request).watches.list(principal)])


@router.get("/watches/{id}", responses=ERRORS)
def get_watch(id: str, request: Request, principal: Caller) -> WatchOut:
    return _watch(_service(request).watches.get(principal, id))


@router.delete("/watches/{id}", status_code=204, responses=ERRORS)
def delete_watch(id: str, request: Request, principal: Caller) -> None:
    """Stop a watch; the jobs it submitted stay."""
    _service(request).watches.delete(principal, id)


def _watch(watch: Watch) -> WatchOut:
    return WatchOut(
        id=watch.id,
        request=watch.request,
        every_s=watch.every_s,
        cron=watch.cron,
        retune_trials=watch.retune_trials,
        next_run_at=datetime.fromtimestamp(watch.next_run_at, tz=UTC),
        last_checked_at=_time(watch.last_checked_at),
        last_job_id=watch.last_job_id,
        created_at=datetime.fromtimestamp(watch.created_at, tz=UTC),
    )
