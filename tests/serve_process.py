"""`autotune serve` as a real process for the service's system tests: started in its own
process group and always ended, its health, the tail of its log, and whether a process of it
is still alive."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psutil

from autotune.service.settings import ServiceSettings
from tests.conftest import REPO
from tests.ports import free_port
from tests.process_groups import end_group


@contextmanager
def serving(
    settings: ServiceSettings, log: Path, runners: int, env: dict[str, str] | None = None
) -> Iterator[Any]:
    """`autotune serve` with these settings (and `env` added to its environment), in its own
    process group (killed at the end if it is still there, with whatever it started)."""
    port = free_port()
    command = [
        *(sys.executable, "-m", "autotune", "serve", "--port", str(port)),
        *("--db", settings.db, "--storage", settings.storage),
        *("--tracking-uri", settings.tracking_uri, "--data-dir", str(settings.data_dir)),
        *("--models-root", str(settings.models_root), "--trust", "experiments.digits"),
        *("--executor", settings.executor, "--lease-s", str(settings.lease_s)),
        *("--poll-s", str(settings.poll_s), "--runners", str(runners), "--no-scheduler"),
        *(("--ray-address", settings.ray_address) if settings.ray_address else ()),
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    with log.open("wb") as out:  # run from the test's directory: MLflow writes ./mlruns
        process = subprocess.Popen(
            command,
            cwd=log.parent,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    process.url = f"http://127.0.0.1:{port}"  # type: ignore[attr-defined]
    try:
        yield process
    finally:
        end_group(process)


def health(process: Any, log: Path) -> dict[str, Any] | None:
    if process.poll() is not None:
        raise AssertionError(f"autotune serve exited with {process.returncode}:\n{tail(log)}")
    try:
        return dict(httpx.get(f"{process.url}/healthz", timeout=5).json())
    except httpx.TransportError:
        return None


def tail(log: Path, chars: int = 4000) -> str:
    return log.read_text(errors="replace")[-chars:]


def alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
