"""The application: its routes, error handlers and body caps over one service."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI

from autotune.requests.request import TuningRequest
from autotune.requests.uploads import ModelStore
from autotune.service.api import health, jobs, watches
from autotune.service.api.bodies import BodyDeadline, BodyLimit, TokenBeforeBody
from autotune.service.api.dependencies import Service
from autotune.service.api.docs import docs_router
from autotune.service.api.errors import add_error_handlers
from autotune.service.api.schemas import PROTECTED
from autotune.service.client_paths import ClientPaths
from autotune.service.db import Database
from autotune.service.documents import DocumentParser
from autotune.service.jobs import JobStore
from autotune.service.settings import ServiceSettings
from autotune.service.submission import SERVICE_FIELDS
from autotune.service.supervisor import RunnerCounts
from autotune.service.watches import WatchStore


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
    documents = DocumentParser()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # The first submission (its dedupe key is the kind of node) finds the survey done.
        settings.hardware.warm()
        yield
        documents.close()

    app = ServiceApp(
        title="autotune",
        summary="Hardware-aware tuning of ML models, as a service.",
        version="1",
        # Served by `docs_router` instead, behind the token unless settings.public_docs.
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.service = Service(
        settings=settings,
        db=db,
        jobs=JobStore(db),
        watches=WatchStore(db, settings),
        models=ModelStore(settings.uploads_dir),
        documents=documents,
        paths=ClientPaths.of(settings),
        runner_counts=runner_counts,
    )
    app.include_router(health.router)
    app.include_router(_v1())
    app.include_router(docs_router(settings.public_docs))
    add_error_handlers(app)
    app.add_middleware(BodyLimit, max_upload_bytes=settings.max_upload_bytes)
    app.add_middleware(BodyDeadline, timeout_s=settings.body_timeout_s)
    app.add_middleware(TokenBeforeBody, db=db)  # the outermost: before anything is read
    return app


@functools.cache
def _v1() -> APIRouter:
    """Jobs and watches, behind the token; built once, included (copied) into each app."""
    v1 = APIRouter(prefix="/v1", responses=PROTECTED)
    v1.include_router(jobs.router)
    v1.include_router(watches.router)
    return v1
