"""The OpenAPI document and its two renderings."""

from __future__ import annotations

import functools

from fastapi import APIRouter, Depends, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse

from autotune.service.api.dependencies import caller

OPENAPI_PATH = "/openapi.json"


@functools.cache
def docs_router(public: bool) -> APIRouter:
    """The documentation routes; without `public`, behind the token like every other route.
    (A browser sends no bearer token: a server whose docs should be browsable is started
    with `--public-docs`.) Built once per choice, included (copied) into each app."""
    router = APIRouter(include_in_schema=False, dependencies=[] if public else [Depends(caller)])

    @router.get(OPENAPI_PATH)
    def openapi(request: Request) -> JSONResponse:
        return JSONResponse(request.app.openapi())

    @router.get("/docs")
    def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url=OPENAPI_PATH, title="autotune - Swagger UI")

    @router.get("/redoc")
    def redoc() -> HTMLResponse:
        return get_redoc_html(openapi_url=OPENAPI_PATH, title="autotune - ReDoc")

    return router
