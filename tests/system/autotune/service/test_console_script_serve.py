"""The README's service walk-through as a user runs it (markers: integration, slow): the
installed `autotune` console script, a clean environment (no PYTHONPATH, so not pytest's
sys.path), from a directory holding the example's package and a models root. The bundled
service request is accepted (202) and its job's runner imports the trusted entry points
from the same place the check found them."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import REPO, postgres_databases
from tests.console_scripts import BIN, clean_environment
from tests.ports import free_port
from tests.process_groups import end_group
from tests.service_support import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def checkout_copy(root: Path) -> Path:
    """What the walk-through needs of a clone: the example's package, nothing else."""
    work = root / "checkout"
    (work / "experiments").mkdir(parents=True)
    shutil.copy(REPO / "experiments" / "__init__.py", work / "experiments")
    shutil.copytree(
        REPO / "experiments" / "digits",
        work / "experiments" / "digits",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    return work


def run(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{args} exited {done.returncode}:\n{done.stdout}{done.stderr}"
    return done.stdout


@contextmanager
def serving(args: list[str], cwd: Path, env: dict[str, str], log: Path) -> Iterator[Any]:
    """A process in its own process group, killed at the end with whatever it started."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            args, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        yield process
    finally:
        end_group(process)


def healthy(process: Any, url: str, log: Path) -> bool:
    if process.poll() is not None:
        raise AssertionError(f"autotune serve exited {process.returncode}:\n{tail(log)}")
    try:
        return bool(httpx.get(f"{url}/healthz", timeout=5).json().get("status") == "ok")
    except httpx.TransportError:
        return False


def tail(log: Path, chars: int = 4000) -> str:
    return log.read_text(errors="replace")[-chars:]


def test_the_bundled_service_request_is_accepted_by_serve_from_the_console_script(
    tmp_path: Path,
) -> None:
    work = checkout_copy(tmp_path)
    env = clean_environment(tmp_path / "home")
    run(
        [str(BIN / "python"), "-m", "experiments.digits.model", "export-weights"]
        + ["models/digits.safetensors"],
        work,
        env,
    )
    with postgres_databases(3, "autotune_console") as (jobs_db, optuna_db, mlflow_db):
        token = run([str(BIN / "autotune"), "token", "create", "me", "--db", jobs_db], work, env)
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        serve = [
            *(str(BIN / "autotune"), "serve", "--db", jobs_db, "--storage", optuna_db),
            *("--tracking-uri", mlflow_db, "--models-root", "models"),
            *("--trust", "experiments.digits", "--port", str(port)),
            *("--data-dir", str(tmp_path / "data")),
        ]
        log = tmp_path / "serve.log"
        with serving(serve, work, env, log) as process:
            wait_for(lambda: healthy(process, url, log), 300, "serve", lambda: tail(log))
            client_env = {**env, "AUTOTUNE_TOKEN": token.strip(), "AUTOTUNE_SERVER": url}
            submit = [str(BIN / "autotune"), "submit", "experiments/digits/service-request.yaml"]
            submitted = json.loads(run([*submit, "--json"], work, client_env))
            assert submitted["created"] is True  # 202: a new job, not a 422

            def trials_done() -> int:
                status = [str(BIN / "autotune"), "status", submitted["id"], "--json"]
                job: dict[str, Any] = json.loads(run(status, work, client_env))
                assert job["state"] not in {"failed", "cancelled"}, (job, tail(log))
                return int(job["progress"]["trials_done"])

            # The runner imported the model and the data and measured a first trial.
            wait_for(lambda: trials_done() >= 1, 600, "a trial", lambda: tail(log))
