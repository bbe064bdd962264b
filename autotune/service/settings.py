"""How a service process is configured (`autotune serve` options and their variables)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path


@dataclass
class ServiceSettings:
    db: str = "sqlite:///autotune-service.db"
    storage: str = "sqlite:///autotune.db"
    tracking_uri: str = "sqlite:///mlflow.db"
    experiment: str = "autotune"
    data_dir: Path = Path("autotune-data")
    # Requests may name model and data files by a path under this directory.
    models_root: Path | None = None
    # Module prefixes whose entry points requests may name (trusted server-side code).
    trusted_modules: tuple[str, ...] = ()
    max_upload_bytes: int = 1 << 30
    executor: str = "ray"
    ray_address: str | None = None
    workers: int = 1
    lease_s: float = 30.0
    poll_s: float = 1.0
    # A coordinator whose heartbeat is older than this has died; its trials are retried.
    stale_after_s: float = 60.0
    # On shutdown, how long runners get to stop their studies before they are killed.
    shutdown_grace_s: float = 60.0
    registered_alias: str = "tuned"
    # The shortest interval a watch may check at (`every`).
    min_watch_every_s: float = 60.0
    # Serve /docs, /redoc and /openapi.json without a token.
    public_docs: bool = False

    @property
    def uploads_dir(self) -> Path:
        return self.data_dir / "models"

    def job_dir(self, job_id: str) -> Path:
        return self.data_dir / "jobs" / job_id

    @cached_property
    def hardware_fingerprint(self) -> str:
        """The hardware jobs run on, as far as this process can tell (identical submissions
        are deduplicated per hardware)."""
        from autotune.hardware import probe

        return probe().fingerprint
