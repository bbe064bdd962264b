"""What the routes depend on: the service they serve and the caller's bearer token."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, cast

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from autotune.requests.uploads import ModelStore
from autotune.service.client_paths import ClientPaths
from autotune.service.db import Database
from autotune.service.documents import DocumentParser
from autotune.service.jobs import JobStore
from autotune.service.settings import ServiceSettings
from autotune.service.supervisor import RunnerCounts
from autotune.service.tokens import Principal, authenticate
from autotune.service.watches import WatchStore


@dataclass(frozen=True)
class Service:
    settings: ServiceSettings
    db: Database
    jobs: JobStore
    watches: WatchStore
    models: ModelStore
    documents: DocumentParser
    # What the client is shown of the server's paths, in every answer.
    paths: ClientPaths
    runner_counts: Callable[[], RunnerCounts] | None = None


bearer = HTTPBearer(auto_error=False, description="a token from `autotune token create`")


def service_of(request: Request) -> Service:
    return cast(Service, request.app.state.service)


def caller(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Principal:
    """The token's principal; a request with a body had its token checked before its body
    was read (`TokenBeforeBody`)."""
    checked: Principal | None = getattr(request.state, "principal", None)
    if checked is not None:
        return checked
    header = None if credentials is None else f"Bearer {credentials.credentials}"
    return authenticate(service_of(request).db, header)


Caller = Annotated[Principal, Depends(caller)]
