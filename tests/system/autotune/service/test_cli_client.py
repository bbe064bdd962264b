"""`autotune submit/status/watch/watches/token/serve` against a real HTTP server."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
import yaml
from typer.testing import CliRunner, Result

from autotune.cli import app, shared
from autotune.core.errors import Conflict, RequestError
from autotune.service import Database, JobRunner, JobStore, ServiceSettings, create_app
from autotune.service.client import ServiceClient
from autotune.service.settings import HardwareSurvey
from autotune.service.tokens import create_token
from autotune.service.watches import Scheduler
from autotune.space.hardware import load_profile
from tests.conftest import REPO
from tests.service_fixtures import tiny_onnx_bytes
from tests.service_support import (
    PROFILES,
    ReplacedNodes,
    due_now,
    service_request,
    sqlite_settings,
    wait_for,
)

runner = CliRunner()


@dataclass
class Server:
    url: str
    settings: ServiceSettings
    db: Database
    token: str
    home: Path  # an empty XDG_CONFIG_HOME: no token file unless a test writes one


class CurrentApp:
    """An ASGI app that hands each request to the app of the test running now: one uvicorn
    server serves the module's tests (its start and stop cost a fifth of a second), each test
    with an app and a database of its own."""

    def __init__(self) -> None:
        self.app: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        assert self.app is not None, "a request arrived between tests"
        await self.app(scope, receive, send)


@pytest.fixture(scope="module")
def http_server() -> Iterator[tuple[str, CurrentApp]]:
    """uvicorn on a free port, in a thread of this process."""
    current = CurrentApp()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    uvicorn_server = uvicorn.Server(uvicorn.Config(current, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=uvicorn_server.run, kwargs={"sockets": [sock]})
    thread.start()
    try:
        wait_for(lambda: uvicorn_server.started, 30, "the API server to start")
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", current
    finally:
        uvicorn_server.should_exit = True
        thread.join(30)
        sock.close()


@pytest.fixture
def server(tmp_path: Path, http_server: tuple[str, CurrentApp]) -> Iterator[Server]:
    """The API on a fresh service database, served over HTTP."""
    url, current = http_server
    settings = sqlite_settings(tmp_path)
    db = Database(settings.db)
    token = create_token(db, "cli", team="a")
    current.app = create_app(settings, db)
    try:
        (tmp_path / "config").mkdir()
        yield Server(url, settings, db, token, tmp_path / "config")
    finally:
        current.app = None
        db.close()


def autotune(server: Server, *args: str, token: str | None = "default") -> Result:
    """The CLI with the server's token in AUTOTUNE_TOKEN (None: no token variable)."""
    env = {
        "AUTOTUNE_TOKEN": server.token if token == "default" else token,
        "AUTOTUNE_SERVER": None,
        "XDG_CONFIG_HOME": str(server.home),
    }
    return runner.invoke(app, list(args), env=env)


@pytest.fixture
def request_file(tmp_path: Path) -> Path:
    path = tmp_path / "request.yaml"
    path.write_text(yaml.safe_dump(service_request()))
    return path


def submitted(result: Result) -> Any:
    """What a successful command printed as JSON."""
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# -- submit and status ---------------------------------------------------------------------


def test_submit_prints_the_job_and_an_identical_submission_is_the_existing_job(
    server: Server, request_file: Path
) -> None:
    first = autotune(server, "submit", str(request_file), "--server", server.url)
    assert first.exit_code == 0, first.output
    assert "queued" in first.output
    job_id = first.output.split()[1].rstrip(":")
    again = autotune(server, "submit", str(request_file), "--server", server.url)
    assert again.exit_code == 0
    assert f"job {job_id}: existing job (queued)" in again.output
    status = autotune(server, "status", job_id, "--server", server.url)
    assert status.exit_code == 0, status.output
    assert f"job {job_id}: queued" in status.output and "0/3" in status.output


def test_submit_and_status_as_json(server: Server, request_file: Path) -> None:
    job = submitted(autotune(server, "submit", str(request_file), "--server", server.url, "--json"))
    assert job["state"] == "queued" and job["created"] is True
    status = submitted(autotune(server, "status", job["id"], "--server", server.url, "--json"))
    assert (status["id"], status["progress"]) == (job["id"], {"trials_done": 0, "budget": 3})


def test_trials_replace_the_request_budget_from_the_flag_or_the_environment(
    server: Server, request_file: Path
) -> None:
    flag = submitted(
        autotune(
            server, "submit", str(request_file), "--server", server.url, "--trials", "5", "--json"
        )
    )
    status = submitted(autotune(server, "status", flag["id"], "--server", server.url, "--json"))
    assert status["progress"]["budget"] == 5
    runner_env = {"AUTOTUNE_TOKEN": server.token, "XDG_CONFIG_HOME": str(server.home)}
    args = ["submit", str(request_file), "--server", server.url, "--json"]
    by_env = submitted(runner.invoke(app, args, env={**runner_env, "AUTOTUNE_TRIALS": "4"}))
    status = submitted(autotune(server, "status", by_env["id"], "--server", server.url, "--json"))
    assert status["progress"]["budget"] == 4 and by_env["id"] != flag["id"]
    refused = autotune(server, "submit", str(request_file), "--server", server.url, "--trials", "0")
    assert refused.exit_code == 2 and "--trials" in refused.output


def test_the_request_name_defaults_to_the_file_name(server: Server, tmp_path: Path) -> None:
    request = service_request()
    del request["name"]
    path = tmp_path / "my-model.yaml"
    path.write_text(yaml.safe_dump(request))
    job = submitted(autotune(server, "submit", str(path), "--server", server.url, "--json"))
    headers = {"Authorization": f"Bearer {server.token}"}
    [listed] = httpx.get(f"{server.url}/v1/jobs", headers=headers).json()["jobs"]
    assert (listed["id"], listed["name"]) == (job["id"], "my-model")


def test_a_model_file_is_uploaded(server: Server, tmp_path: Path) -> None:
    request = service_request()
    del request["model"]
    path = tmp_path / "request.yaml"
    path.write_text(yaml.safe_dump(request))
    model = tmp_path / "tiny.onnx"
    model.write_bytes(tiny_onnx_bytes())
    args = ("submit", str(path), "--server", server.url, "--model", str(model), "--json")
    job = submitted(autotune(server, *args))
    status = submitted(autotune(server, "status", job["id"], "--server", server.url, "--json"))
    assert status["model"]["source"]["kind"] == "upload"


def test_a_bad_request_exits_2_naming_field_rule_and_value(server: Server, tmp_path: Path) -> None:
    path = tmp_path / "request.yaml"
    path.write_text(yaml.safe_dump(service_request(constraints={"max_latency_p95_ms": -3})))
    result = autotune(server, "submit", str(path), "--server", server.url)
    assert result.exit_code == 2, result.output
    assert "constraints.max_latency_p95_ms" in result.output
    assert "greater than 0" in result.output and "-3" in result.output


def test_a_request_naming_the_storage_exits_2(server: Server, tmp_path: Path) -> None:
    path = tmp_path / "request.yaml"
    path.write_text(yaml.safe_dump(service_request(storage="sqlite:///mine.db")))
    result = autotune(server, "submit", str(path), "--server", server.url)
    assert result.exit_code == 2
    assert "storage: is chosen by the service" in result.output


def test_a_missing_request_file_exits_2(server: Server, tmp_path: Path) -> None:
    result = autotune(server, "submit", str(tmp_path / "nope.yaml"), "--server", server.url)
    assert result.exit_code == 2 and "nope.yaml" in result.output


def test_the_token_comes_from_the_config_file(server: Server, request_file: Path) -> None:
    result = autotune(server, "submit", str(request_file), "--server", server.url, token=None)
    assert result.exit_code == 2
    assert "token: is required" in result.output
    (server.home / "autotune").mkdir()
    (server.home / "autotune" / "token").write_text(server.token + "\n")
    result = autotune(server, "submit", str(request_file), "--server", server.url, token=None)
    assert result.exit_code == 0, result.output


def test_a_bad_token_exits_2(server: Server, request_file: Path) -> None:
    result = autotune(server, "submit", str(request_file), "--server", server.url, token="nope")
    assert result.exit_code == 2
    assert "unauthorized" in result.output and "not known" in result.output


def test_the_token_option_wins_over_the_variable(server: Server, request_file: Path) -> None:
    args = ("submit", str(request_file), "--server", server.url, "--token", server.token)
    assert autotune(server, *args, token="nope").exit_code == 0


def test_an_unknown_job_exits_1_and_reads_as_no_such_job(server: Server) -> None:
    result = autotune(server, "status", "nope", "--server", server.url)
    assert result.exit_code == 1 and "not found: no such job 'nope'" in result.output
    assert "failed" not in result.output  # nothing failed: there is no such job


def test_an_unreachable_server_exits_1(server: Server, request_file: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    result = autotune(server, "submit", str(request_file), "--server", url)
    assert result.exit_code == 1
    assert f"cannot reach the server at {url}" in result.output


def test_the_server_comes_from_the_variable(server: Server, request_file: Path) -> None:
    env = {"AUTOTUNE_TOKEN": server.token, "AUTOTUNE_SERVER": server.url}
    result = runner.invoke(app, ["submit", str(request_file)], env=env)
    assert result.exit_code == 0, result.output


# -- following a job -----------------------------------------------------------------------


@pytest.mark.parametrize(("state", "code"), [("infeasible", 3), ("failed", 1)])
def test_status_wait_exits_with_the_outcome(
    server: Server, request_file: Path, state: str, code: int
) -> None:
    job = submitted(autotune(server, "submit", str(request_file), "--server", server.url, "--json"))
    store = JobStore(server.db)
    assert store.claim("test-runner", 60).id == job["id"]  # type: ignore[union-attr]
    store.finish(job["id"], "test-runner", state, error="what happened")  # type: ignore[arg-type]
    result = autotune(server, "status", job["id"], "--server", server.url, "--wait", "--json")
    assert result.exit_code == code, result.output
    outcome = json.loads(result.stdout)
    assert outcome["job"]["state"] == state and outcome["result"] is None
    human = autotune(server, "status", job["id"], "--server", server.url, "--wait")
    assert human.exit_code == code
    assert "what happened" in human.output


def test_a_cancelled_job_waited_for_exits_1(server: Server, request_file: Path) -> None:
    job = submitted(autotune(server, "submit", str(request_file), "--server", server.url, "--json"))
    with ServiceClient(server.url, server.token) as client:
        assert client.cancel(job["id"])["state"] == "cancelled"
        assert client.pareto(job["id"]) == []
        with pytest.raises(Conflict, match="cancelled"):
            client.result(job["id"])
    result = autotune(server, "submit", str(request_file), "--server", server.url)
    assert "queued" in result.output, "a cancelled job does not answer a new submission"
    human = autotune(server, "status", job["id"], "--server", server.url, "--wait")
    assert human.exit_code == 1 and "cancelled" in human.output


@pytest.mark.slow
def test_submit_wait_follows_a_job_to_its_tuned_config(server: Server, request_file: Path) -> None:
    job_runner = JobRunner(server.db, server.settings)
    thread = threading.Thread(target=job_runner.run_forever)
    thread.start()
    try:
        args = ("submit", str(request_file), "--server", server.url, "--wait", "--poll-s", "0.2")
        result = autotune(server, *args)
    finally:
        job_runner.shutdown()
        thread.join(120)
    assert result.exit_code == 0, result.output
    assert "Chosen configuration" in result.output
    assert "Registered as:   models:/digits-svc@tuned" in result.output
    assert "Head to head: the baseline and finalists" in result.output
    assert "interleaved rounds; chosen #" in result.output
    job_id = result.output.split()[1].rstrip(":")
    with ServiceClient(server.url, server.token) as client:
        assert client.pareto(job_id)
        mlflow = client.result(job_id)["mlflow"]
        run = f"MLflow run:      {mlflow['run_id']} (experiment {mlflow['experiment_id']})"
        assert run in result.output.splitlines()
        assert client.result(job_id)["study"]["name"] == f"digits-svc (job {job_id[:8]})"


# -- watches -------------------------------------------------------------------------------


@pytest.fixture
def watch_file(server: Server, tmp_path: Path) -> Path:
    assert server.settings.models_root is not None
    (server.settings.models_root / "tiny.onnx").write_bytes(tiny_onnx_bytes())
    path = tmp_path / "watch.yaml"
    path.write_text(yaml.safe_dump(service_request(model={"onnx": "tiny.onnx"})))
    return path


def test_watch_creates_a_watch_that_watches_lists(server: Server, watch_file: Path) -> None:
    result = autotune(server, "watch", str(watch_file), "--server", server.url, "--every", "30m")
    assert result.exit_code == 0, result.output
    assert "every 30m, first check now" in result.output
    watch_id = result.output.split()[1].rstrip(":")
    cron = ("--cron", "0 3 * * *", "--retune-trials", "2", "--json")
    created = submitted(autotune(server, "watch", str(watch_file), "--server", server.url, *cron))
    assert (created["cron"], created["retune_trials"]) == ("0 3 * * *", 2)
    listed = submitted(autotune(server, "watches", "--server", server.url, "--json"))
    assert [w["id"] for w in listed] == [watch_id, created["id"]]
    table = autotune(server, "watches", "--server", server.url)
    assert watch_id[:8] in table.output and "cron 0 3 * * *" in table.output


def test_watch_trials_replace_the_request_budget(server: Server, watch_file: Path) -> None:
    args = ("watch", str(watch_file), "--server", server.url, "--every", "1h", "--json")
    created = submitted(autotune(server, *args, "--trials", "2"))
    assert created["request"]["budget"]["trials"] == 2


@pytest.mark.parametrize(
    ("schedule", "field"),
    [
        (("--cron", "61 * * * *"), "cron"),
        (("--every", "soon"), "every"),
        (("--every", "1h", "--cron", "0 3 * * *"), "schedule"),
        ((), "schedule"),
    ],
)
def test_a_bad_schedule_exits_2(
    server: Server, watch_file: Path, schedule: tuple[str, ...], field: str
) -> None:
    result = autotune(server, "watch", str(watch_file), "--server", server.url, *schedule)
    assert result.exit_code == 2, result.output
    assert f"{field}:" in result.output


def test_a_watch_without_a_model_file_exits_2(server: Server, request_file: Path) -> None:
    result = autotune(server, "watch", str(request_file), "--server", server.url, "--every", "1h")
    assert result.exit_code == 2 and "model:" in result.output


def test_the_client_maps_422_to_a_request_error(server: Server, watch_file: Path) -> None:
    with ServiceClient(server.url, server.token) as client:
        with pytest.raises(RequestError) as raised:
            client.create_watch(watch_file, every="soon")
        assert (raised.value.field, raised.value.value) == ("every", "soon")
        assert client.list_watches() == []


def test_status_takes_a_unique_prefix_of_the_job_s_id(server: Server, request_file: Path) -> None:
    job = submitted(autotune(server, "submit", str(request_file), "--server", server.url, "--json"))
    shown = autotune(server, "status", job["id"][:4], "--server", server.url)
    assert shown.exit_code == 0, shown.output
    assert f"job {job['id']}: queued" in shown.output
    for unknown in ("abc", "ffff" if not job["id"].startswith("ffff") else "0000"):
        result = autotune(server, "status", unknown, "--server", server.url)
        assert result.exit_code == 1 and f"no such job '{unknown}'" in result.output


@pytest.fixture
def nodes(server: Server) -> ReplacedNodes:
    """The trial nodes the server's hardware survey reports, which a test may replace."""
    replaced = ReplacedNodes()
    server.settings.hardware = HardwareSurvey(replaced.kinds, ttl_s=0)
    return replaced


def test_a_retune_says_what_it_re_tunes_and_watches_show_each_check(
    server: Server, watch_file: Path, nodes: ReplacedNodes, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ("--server", server.url)
    every = ("--every", "1h", "--json")
    created = submitted(autotune(server, "watch", str(watch_file), *args, *every))
    scheduler = Scheduler(server.db, server.settings)
    (first,) = scheduler.tick()
    before = nodes.profile.fingerprint
    nodes.profile = load_profile(PROFILES / "h200x8.json")
    due_now(server.db, created["id"])
    (retune,) = scheduler.tick()

    shown = autotune(server, "status", retune, *args)
    assert shown.exit_code == 0, shown.output
    assert shown.output.splitlines()[0] == (
        f"re-tune of {first[:8]} (watch {created['id'][:8]}): hardware changed "
        f"({before[:8]}… → {nodes.profile.fingerprint[:8]}…)"
    )
    assert "re-tune" not in autotune(server, "status", first, *args).output

    listed = submitted(autotune(server, "watches", *args, "--json"))
    assert [c["job_id"] for c in listed[0]["checks"]] == [retune, first]
    monkeypatch.setattr(shared.out, "width", 80)
    table = autotune(server, "watches", *args)
    assert table.exit_code == 0, table.output
    assert all(len(line) <= 80 for line in table.output.splitlines()), table.output
    assert created["id"][:8] in table.output and f"job {retune[:8]}" in table.output
    assert "hardware changed" in table.output and "first check: model file" in table.output


def test_watch_notify_is_sent_to_the_server(server: Server, watch_file: Path) -> None:
    hook = "https://hooks.example.org/autotune"
    args = ("--server", server.url, "--every", "1h", "--notify", hook, "--json")
    created = submitted(autotune(server, "watch", str(watch_file), *args))
    assert created["notify"] == hook
    bad = autotune(server, "watch", str(watch_file), *args[:-3], "--notify", "hooks", "--json")
    assert bad.exit_code == 2 and "notify:" in bad.output


# -- tokens and serve ----------------------------------------------------------------------


def test_tokens_are_created_listed_and_revoked(tmp_path: Path) -> None:
    db = ["--db", f"sqlite:///{tmp_path / 'service.db'}"]
    created = runner.invoke(app, ["token", "create", "alice", "--team", "ml", *db])
    assert created.exit_code == 0, created.output
    secret = created.stdout.strip()
    assert secret.startswith("at_") and "AUTOTUNE_TOKEN" in created.stderr
    listed = json.loads(runner.invoke(app, ["token", "list", "--json", *db]).stdout)
    assert [(t["name"], t["team"], t["revoked"]) for t in listed] == [("alice", "ml", False)]
    assert secret not in json.dumps(listed)
    assert runner.invoke(app, ["token", "create", "alice", *db]).exit_code == 2
    assert runner.invoke(app, ["token", "revoke", "alice", *db]).exit_code == 0
    listed = json.loads(runner.invoke(app, ["token", "list", "--json", *db]).stdout)
    assert listed[0]["revoked"] is True
    assert "alice" in runner.invoke(app, ["token", "list", *db]).output
    assert runner.invoke(app, ["token", "revoke", "bob", *db]).exit_code == 2


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--no-api", "--runners", "0", "--no-scheduler"], "serve"),
        (["--executor", "gpu"], "executor"),
        (["--mlflow-ui-url", "mlflow.example.com"], "mlflow-ui-url"),
    ],
)
def test_serve_refuses_bad_options(args: list[str], field: str) -> None:
    result = runner.invoke(app, ["serve", *args])
    assert result.exit_code == 2 and f"{field}:" in result.output


@pytest.mark.parametrize(
    "command",
    [["serve"], ["submit"], ["status"], ["watch"], ["watches"], ["token"], ["token", "create"]],
)
def test_every_service_command_has_help(command: list[str]) -> None:
    result = runner.invoke(app, [*command, "--help"])
    assert result.exit_code == 0 and "Usage" in result.output


@pytest.mark.slow
def test_serve_runs_an_api_only_process_configured_by_variables(
    tmp_path: Path, request_file: Path
) -> None:
    """`autotune serve --runners 0 --no-scheduler` in its own process, as the cluster runs it."""
    db_url = f"sqlite:///{tmp_path / 'service.db'}"
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "AUTOTUNE_DB": db_url,
        "AUTOTUNE_STORAGE": f"sqlite:///{tmp_path / 'studies.db'}",
        "AUTOTUNE_DATA_DIR": str(tmp_path / "data"),
        "AUTOTUNE_TRUST": "tests,experiments.digits",
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
    }
    token = runner.invoke(app, ["token", "create", "ci", "--db", db_url]).stdout.strip()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [sys.executable, "-m", "autotune", "serve", "--port", str(port), "--runners", "0"]
    process = subprocess.Popen(
        [*command, "--no-scheduler"], env=env, cwd=tmp_path, stderr=subprocess.PIPE, text=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _healthy(url, process), 90, "autotune serve to answer /healthz")
        args = ["submit", str(request_file), "--server", url, "--json"]
        result = runner.invoke(app, args, env={"AUTOTUNE_TOKEN": token})
        job = submitted(result)
        assert job["state"] == "queued"
        with ServiceClient(url, token) as client:
            assert client.status(job["id"])["state"] == "queued", "no runner runs here"
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=60)
    # uvicorn shuts down cleanly on SIGTERM, then ends by the signal it caught
    assert process.returncode in (0, -signal.SIGTERM), stderr
    assert "Finished server process" in stderr


def _healthy(url: str, process: subprocess.Popen[str]) -> bool:
    if process.poll() is not None:
        raise AssertionError(f"autotune serve exited with {process.returncode}")
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False
