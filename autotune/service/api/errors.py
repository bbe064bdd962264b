"""How the API answers an error: bad input as `{"detail": {"field", "rule", "value"}}`, every
other error as `{"detail": message}` with its status."""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any, cast

from fastapi import FastAPI, Request, Response
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DisconnectionError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException

from autotune.core.errors import (
    Conflict,
    NotFound,
    NoTrialNodes,
    RequestError,
    TooLarge,
    Unauthorized,
)
from autotune.service.api.dependencies import service_of
from autotune.service.documents import ParserBusy

DATABASE_DOWN = "the service's job database is unavailable; try again later"
# What the job database raises when it cannot be reached (refused, gone, timed out): the
# service is unavailable (503), not broken (500).
UNAVAILABLE = (OperationalError, InterfaceError, DisconnectionError, PoolTimeout)

log = logging.getLogger("autotune.api")
# What a client is told of a request whose connection the server closes after answering.
CLOSED = {"Connection": "close"}


class BodyTimeout(RequestError):
    """The request body did not arrive in time (408); the connection is closed."""


def add_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RequestError, _request_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(Unauthorized, _unauthorized)
    app.add_exception_handler(NotFound, _message(404))
    app.add_exception_handler(Conflict, _message(409))
    app.add_exception_handler(ParserBusy, _retry_later(5))
    app.add_exception_handler(NoTrialNodes, _retry_later(10, "retry once a node has joined"))
    app.add_exception_handler(StarletteHTTPException, _http_error)
    for unavailable in UNAVAILABLE:
        app.add_exception_handler(unavailable, _database_unavailable)


async def _request_error(request: Request, exc: Exception) -> JSONResponse:
    error = cast(RequestError, exc)
    if isinstance(error, BodyTimeout):
        return problem(408, error, headers=CLOSED)
    status = 413 if isinstance(error, TooLarge) else 422
    return problem(status, service_of(request).paths.error(error))


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    first = cast(RequestValidationError, exc).errors()[0]
    loc = [str(part) for part in first.get("loc", ())]
    # ("body", "every") names the field "every"; a body that is not JSON names "body".
    field = "body" if first.get("type") == "json_invalid" else ".".join(loc[1:]) or loc[0]
    return problem(422, RequestError(field, first.get("msg", "invalid"), first.get("input")))


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
    return problem(422, RequestError("body", rule, None))


def _retry_later(
    after_s: int, hint: str = ""
) -> Callable[[Request, Exception], Awaitable[JSONResponse]]:
    """503 with Retry-After: the service cannot take the call now, and will."""

    async def handler(request: Request, exc: Exception) -> JSONResponse:
        detail = f"{exc}; {hint}" if hint else str(exc)
        headers = {"Retry-After": str(after_s)}
        return JSONResponse({"detail": detail}, status_code=503, headers=headers)

    return handler


async def _database_unavailable(request: Request, exc: Exception) -> JSONResponse:
    return database_unavailable(request.method, request.url.path, exc)


def database_unavailable(
    method: str, path: str, exc: Exception, headers: dict[str, str] | None = None
) -> JSONResponse:
    log.warning("%s %s: the job database is unavailable: %s", method, path, exc)
    headers = {"Retry-After": "10", **(headers or {})}
    return JSONResponse({"detail": DATABASE_DOWN}, status_code=503, headers=headers)


async def _unauthorized(request: Request, exc: Exception) -> JSONResponse:
    return unauthorized(cast(Unauthorized, exc))


def unauthorized(exc: Unauthorized, headers: dict[str, str] | None = None) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer", **(headers or {})}
    return JSONResponse({"detail": str(exc)}, status_code=401, headers=headers)


def _message(status: int) -> Callable[[Request, Exception], Awaitable[JSONResponse]]:
    async def handler(request: Request, exc: Exception) -> JSONResponse:
        # A conflict may quote a job's error, which may name server files.
        return JSONResponse({"detail": service_of(request).paths.text(str(exc))}, status)

    return handler


def problem(
    status: int, error: RequestError, headers: dict[str, str] | None = None
) -> JSONResponse:
    detail = {"field": error.field, "rule": error.rule, "value": json_safe(error.value)}
    return JSONResponse({"detail": detail}, status_code=status, headers=headers)


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
