"""How a service process is configured (`autotune serve` options and their variables)."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from autotune.core.errors import RequestError
from autotune.execution import registry
from autotune.execution.config import BaseExecutorConfig
from autotune.execution.ray_cluster import Workers

if TYPE_CHECKING:
    from autotune.core.contract import NodeKind

log = logging.getLogger("autotune.service")

# The longest URL a setting or a watch may give (a notice's address, the MLflow UI's).
MAX_URL_CHARS = 2000


def check_web_url(field: str, url: str) -> None:
    """An http or https URL naming a host, or a RequestError naming `field`."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or len(url) > MAX_URL_CHARS:
        rule = f"must be an http or https URL naming a host, at most {MAX_URL_CHARS} characters"
        raise RequestError(field, rule, url[:200])


def default_data_dir() -> Path:
    """The service's files when no data directory is given: $XDG_DATA_HOME/autotune
    (~/.local/share/autotune where that is unset or relative), never the working directory."""
    base = os.environ.get("XDG_DATA_HOME", "")
    root = Path(base) if Path(base).is_absolute() else Path.home() / ".local" / "share"
    return root / "autotune"


@dataclass
class ServiceSettings:
    db: str = "sqlite:///autotune-service.db"
    storage: str = "sqlite:///autotune.db"
    tracking_uri: str = "sqlite:///mlflow.db"
    experiment: str = "autotune"
    data_dir: Path = field(default_factory=default_data_dir)
    # The artifact root of a new MLflow experiment on a database tracking store (a directory
    # or a URI such as s3://bucket/prefix); default: <data_dir>/mlflow-artifacts.
    mlflow_artifacts: str | None = None
    # Where people open the MLflow UI on the tracking store (http:// or https://): answers
    # and notices show the tracking URI as this address, and link each job's run there.
    mlflow_ui_url: str | None = None
    # Requests may name model and data files by a path under this directory.
    models_root: Path | None = None
    # Module prefixes whose entry points requests may name (trusted server-side code).
    trusted_modules: tuple[str, ...] = ()
    max_upload_bytes: int = 1 << 30
    # A request body must arrive within this time, and a second more for each MiB of it (a
    # large upload on a slow link); past that it is refused (408).
    body_timeout_s: float = 30.0
    executor: str = "ray"  # 'ray', 'inprocess' or a plugin's executor type (`executor_config`)
    ray_address: str | None = None
    workers: Workers = 1  # trial slots on each kind of node, or 'auto'

    lease_s: float = 30.0
    poll_s: float = 1.0
    # A coordinator whose heartbeat is older than this has died; its trials are retried.
    stale_after_s: float = 60.0
    # On shutdown, how long runners get to stop their studies before they are killed.
    shutdown_grace_s: float = 60.0
    registered_alias: str = "tuned"
    # The shortest interval a watch may check at (`every`).
    min_watch_every_s: float = 60.0
    # How long a survey of the trial nodes' hardware is reused (dedupe keys, watch ticks).
    hardware_ttl_s: float = 60.0
    # Serve /docs, /redoc and /openapi.json without a token.
    public_docs: bool = False

    def __post_init__(self) -> None:
        self.executor_config()  # bad executor settings are refused before anything starts

    def executor_config(self) -> BaseExecutorConfig:
        """Where the jobs' trials run, as the executor settings configure it."""
        return registry.executor_config(self.executor, self.ray_address, self.workers)

    @property
    def uploads_dir(self) -> Path:
        return self.data_dir / "models"

    def job_dir(self, job_id: str) -> Path:
        return self.data_dir / "jobs" / job_id

    @property
    def mlflow_artifact_root(self) -> str:
        """Where a new MLflow experiment of this service keeps its artifacts, on any database
        store (SQLite or PostgreSQL alike; an MLflow server chooses its own): never the
        server's working directory, MLflow's own default."""
        if self.mlflow_artifacts is not None:
            return self.mlflow_artifacts
        return str((self.data_dir / "mlflow-artifacts").resolve())

    def __getstate__(self) -> dict[str, Any]:
        # A survey (its lock, its callable) stays in its process: a runner process asks its own.
        return {k: v for k, v in self.__dict__.items() if k != "hardware"}

    @cached_property
    def hardware(self) -> HardwareSurvey:
        """The hardware of the nodes that run this service's trials (the workers' probes)."""
        from autotune.execution.build import survey

        config = self.executor_config()
        return HardwareSurvey(lambda: survey(config), self.hardware_ttl_s)

    def job_hardware(self, target: str | None) -> str:
        """The fingerprint of the kind of node a job with this `target` runs on: identical
        submissions are deduplicated per hardware, and a watch re-tunes when it changes.
        Where the nodes are of several kinds, a job must name one (a `RequestError`)."""
        from autotune.space.hardware import one_kind

        return one_kind(self.hardware.kinds(), target).fingerprint


class HardwareSurvey:
    """The kinds of node `survey` reports (an executor's, probed on the nodes), asked again
    once the last answer is older than `ttl_s`: a node replaced by another model is seen
    within that time, without a survey for every request.

    On a cluster a survey costs seconds (Ray's start, a probe on each node), so no request
    should wait for one: the API `warm`s the survey as it starts (the first request waits
    for that survey, not for one of its own), and a request that finds the answer past half
    its time to live is answered from it while the next survey runs in the background.
    Nothing surveys an idle service's nodes (a probe would disturb their measurements); the
    first request after more than `ttl_s` without one waits for a survey."""

    def __init__(self, survey: Callable[[], list[NodeKind]], ttl_s: float) -> None:
        self._survey = survey
        self._ttl_s = ttl_s
        self._surveying = threading.Lock()  # one survey at a time
        self._answer: tuple[list[NodeKind], float] | None = None  # the kinds, and when

    def kinds(self) -> list[NodeKind]:
        answer = self._answer
        if answer is not None and self._age(answer) < self._ttl_s:
            if self._age(answer) >= self._ttl_s / 2:
                self.warm()
            return answer[0]
        with self._surveying:
            answer = self._answer  # surveyed by another thread while this one waited
            if answer is not None and self._age(answer) < self._ttl_s:
                return answer[0]
            return self._renew()

    def warm(self) -> None:
        """Survey in the background, unless a survey is under way."""
        if self._surveying.acquire(blocking=False):
            threading.Thread(
                target=self._renew_in_background, name="hardware-survey", daemon=True
            ).start()

    @staticmethod
    def _age(answer: tuple[list[NodeKind], float]) -> float:
        return time.monotonic() - answer[1]

    def _renew(self) -> list[NodeKind]:
        kinds = self._survey()
        self._answer = (kinds, time.monotonic())
        return kinds

    def _renew_in_background(self) -> None:
        try:
            self._renew()
        except Exception as error:  # noqa: BLE001 - a request that surveys again says what
            log.warning("surveying the trial nodes' hardware failed: %s", error)
        finally:
            self._surveying.release()
