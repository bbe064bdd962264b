"""The tuning service: a REST API over a durable job queue, job runners and scheduled
re-tuning. Names are imported on first use, so importing one module of the package (the
settings, the database) does not load the web framework."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autotune.service.api import create_app
    from autotune.service.db import Database
    from autotune.service.jobs import JobStore
    from autotune.service.runner import JobRunner
    from autotune.service.server import serve
    from autotune.service.settings import ServiceSettings
    from autotune.service.watches import Scheduler, WatchStore

_EXPORTS = {
    "create_app": "autotune.service.api",
    "Database": "autotune.service.db",
    "JobStore": "autotune.service.jobs",
    "JobRunner": "autotune.service.runner",
    "serve": "autotune.service.server",
    "ServiceSettings": "autotune.service.settings",
    "Scheduler": "autotune.service.watches",
    "WatchStore": "autotune.service.watches",
}

__all__ = [
    "Database",
    "JobRunner",
    "JobStore",
    "Scheduler",
    "ServiceSettings",
    "WatchStore",
    "create_app",
    "serve",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)
