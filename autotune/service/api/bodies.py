"""Reading request bodies: who may send one (a token first), how long it may take and how
large it may be (enforced while it streams in), its media type, and the request document
in JSON, YAML or a multipart form beside a model upload."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, BinaryIO

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from starlette.datastructures import FormData, UploadFile
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from autotune.core.errors import RequestError, Unauthorized
from autotune.service.api.errors import (
    CLOSED,
    UNAVAILABLE,
    BodyTimeout,
    database_unavailable,
    json_safe,
    problem,
    unauthorized,
)
from autotune.service.db import Database
from autotune.service.documents import (
    JSON_TYPE,
    MAX_DOCUMENT_BYTES,
    YAML_TYPES,
    DocumentParser,
    too_large,
)
from autotune.service.tokens import authenticate

# Room for multipart boundaries and part headers around the request and the model.
MULTIPART_SLACK_BYTES = 64 << 10
MULTIPART_TYPE = "multipart/form-data"
JOBS_PATH = "/v1/jobs"
PROTECTED_PREFIX = "/v1/"
# A body gets a second more to arrive for each this many bytes of it.
BYTES_PER_EXTRA_SECOND = 1 << 20


class TokenBeforeBody:
    """Refuses a request for a route behind the token that carries a body without a valid
    token (401), before any of its body is read: a route may read its body before it asks
    for the token, and nobody without one may hold a connection open by sending it slowly.
    The principal found is the request's (`request.state.principal`)."""

    def __init__(self, app: ASGIApp, db: Database) -> None:
        self.app = app
        self.db = db

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _protected_with_body(scope):
            await self.app(scope, receive, send)
            return
        header = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
        try:
            principal = await run_in_threadpool(authenticate, self.db, header or None)
        except Unauthorized as error:
            await unauthorized(error, headers=CLOSED)(scope, receive, send)
            return
        except UNAVAILABLE as error:
            response = database_unavailable(scope["method"], scope["path"], error, CLOSED)
            await response(scope, receive, send)
            return
        scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, receive, send)


def _protected_with_body(scope: Scope) -> bool:
    headers = dict(scope["headers"])
    declared = headers.get(b"content-length", b"0")
    has_body = b"transfer-encoding" in headers or not declared.isdigit() or int(declared) > 0
    return has_body and scope["path"].startswith(PROTECTED_PREFIX)


class BodyDeadline:
    """A request body must arrive within `timeout_s` of its request, and a second more for
    each MiB of it (a large upload on a slow link): a body that is still arriving past that
    is refused (408) and its connection closed."""

    def __init__(self, app: ASGIApp, timeout_s: float) -> None:
        self.app = app
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.app(scope, _deadlined(receive, self.timeout_s), send)


def _deadlined(receive: Receive, timeout_s: float) -> Receive:
    start = time.monotonic()
    received = 0
    complete = False  # once the body is in, what the app waits for (a disconnect) may take long

    async def deadlined() -> Message:
        nonlocal received, complete
        if complete:
            return await receive()
        left = start + timeout_s + received / BYTES_PER_EXTRA_SECOND - time.monotonic()
        try:
            async with asyncio.timeout(max(left, 0.0)):
                message = await receive()
        except TimeoutError:
            raise body_timeout(timeout_s, received) from None
        received += len(message.get("body", b""))
        complete = message["type"] != "http.request" or not message.get("more_body", False)
        return message

    return deadlined


def body_timeout(timeout_s: float, received: int) -> BodyTimeout:
    rule = f"must arrive within {timeout_s:g} s, and 1 s more for each MiB of it"
    return BodyTimeout("body", rule, f"{received} bytes arrived in that time")


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
            response = problem(413, too_large(limit))
            await response(scope, receive, send)
            return
        await self.app(scope, _capped(receive, limit), send)

    def _limit(self, scope: Scope) -> int:
        content_type = dict(scope["headers"]).get(b"content-type", b"").decode("latin-1")
        if scope["path"] == JOBS_PATH and media_type(content_type) == MULTIPART_TYPE:
            return self.max_upload_bytes + MAX_DOCUMENT_BYTES + MULTIPART_SLACK_BYTES
        return MAX_DOCUMENT_BYTES


def _capped(receive: Receive, limit: int) -> Receive:
    received = 0

    async def capped() -> Message:
        nonlocal received
        message = await receive()
        received += len(message.get("body", b""))
        if received > limit:
            raise too_large(limit)
        return message

    return capped


def media_type(content_type: str) -> str:
    return content_type.partition(";")[0].strip().lower()


@asynccontextmanager
async def read_form(request: Request) -> AsyncIterator[FormData]:
    try:
        form = await request.form(max_files=2, max_fields=2, max_part_size=MAX_DOCUMENT_BYTES)
    except StarletteHTTPException as error:  # what Starlette makes of a malformed body
        rule = f"must be well-formed multipart/form-data ({error.detail})"
        raise RequestError("body", rule, None) from None
    try:
        yield form
    finally:
        await form.close()


async def multipart_parts(form: FormData, documents: DocumentParser) -> tuple[Any, BinaryIO | None]:
    """The request document of a multipart submission (JSON where its part says so, else
    YAML), and its model upload if it has one."""
    names = [name for name, _ in form.multi_items()]
    if sorted(set(names)) != sorted(names) or not set(names) <= {"request", "model"}:
        rule = "must have a 'request' part and at most one 'model' part, nothing else"
        raise RequestError("multipart", rule, names)
    part = form.get("request")
    if part is None:
        raise RequestError("request", "part is required", None)
    media = YAML_TYPES[0]
    if isinstance(part, UploadFile):
        text: str | bytes = await part.read(MAX_DOCUMENT_BYTES + 1)
        media = JSON_TYPE if media_type(part.content_type or "") == JSON_TYPE else media
    else:
        text = part
    raw = await documents.parse(text.encode() if isinstance(text, str) else text, media)
    model = form.get("model")
    if model is not None and not isinstance(model, UploadFile):
        raise RequestError("model", "must be a file part", json_safe(model))
    return raw, None if model is None else model.file
