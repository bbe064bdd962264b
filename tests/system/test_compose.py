"""The compose cluster, checked without Docker: docker-compose.yml, the Dockerfiles, the
entry-point scripts in docker/, .env.example and .dockerignore.

What this guards: every service is health-checked and started in order; nothing but the API
is reachable from outside; every secret comes from .env and cannot be left empty; the
commands the services run parse with the real command-line tools; the images install the
right builds (CPU torch for the control plane, onnxruntime-gpu for the workers) and can
join one Ray cluster.
"""

from __future__ import annotations

import configparser
import http.server
import importlib.util
import os
import re
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.compose_file import (
    COMPOSE_FILE,
    REFERENCE,
    command,
    environment,
    interpolate,
    load_compose,
    option_value,
    resolved,
)
from tests.conftest import REPO

ENV_EXAMPLE = REPO / ".env.example"
DOCKER = REPO / "docker"
CONTROL_PLANE_DOCKERFILE = DOCKER / "control-plane.Dockerfile"
GPU_WORKER_DOCKERFILE = DOCKER / "gpu-worker.Dockerfile"

SERVICES = {"postgres", "mlflow", "ray-head", "ray-worker", "api", "runner"}
# Who waits for whom (all with condition: service_healthy).
DEPENDENCIES = {
    "postgres": set(),
    "ray-head": set(),
    "mlflow": {"postgres"},
    "ray-worker": {"ray-head"},
    "api": {"postgres", "mlflow", "ray-head", "ray-worker"},
    "runner": {"postgres", "mlflow", "ray-head", "ray-worker", "api"},
}
SECRET = re.compile(r"PASSWORD|TOKEN|SECRET|KEY")
REQUIRED_REFERENCE = re.compile(r"^\$\{[A-Za-z_][A-Za-z0-9_]*:\?[^}]+\}$")
# scheme://user:password@host... (a password may be a ${...} reference holding '?' or ':')
CREDENTIALS = re.compile(r"^[\w+.-]+://[^:/@]+:(?P<password>.*)@[^@]*$")


def env_example() -> dict[str, str]:
    values = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, _, value = line.partition("=")
            values[name.strip()] = value
    return values


def sample_env() -> dict[str, str]:
    """Values for every variable of .env.example: secrets filled, optional ones empty."""
    return {name: f"test-{name.lower()}" if SECRET.search(name) else "" for name in env_example()}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load_compose()


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


# --- services, health and start order --------------------------------------------------


def test_the_expected_services(services: dict[str, Any]) -> None:
    assert set(services) == SERVICES


def test_every_service_is_health_checked(services: dict[str, Any]) -> None:
    for name, service in services.items():
        check = service.get("healthcheck")
        assert check and not check.get("disable"), f"{name} has no healthcheck"
        test = check["test"]
        assert isinstance(test, list) and test[0] in ("CMD", "CMD-SHELL") and len(test) > 1, name
        assert service.get("restart") == "unless-stopped", name


def test_start_order_waits_for_health(services: dict[str, Any]) -> None:
    for name, service in services.items():
        depends = service.get("depends_on", {})
        assert isinstance(depends, dict), f"{name}: depends_on needs conditions"
        assert set(depends) == DEPENDENCIES[name], name
        for dependency, how in depends.items():
            assert how == {"condition": "service_healthy"}, (name, dependency)
            assert "healthcheck" in services[dependency]


def test_processes_run_under_an_init(services: dict[str, Any]) -> None:
    """Ray and uvicorn start child processes: PID 1 must reap them and pass signals on."""
    for name, service in services.items():
        if name != "postgres":  # the official image's entry point does both
            assert service.get("init") is True, name


# --- what is reachable -----------------------------------------------------------------


def published(service: dict[str, Any]) -> list[tuple[str | None, str]]:
    """(host interface or None for every interface, container port) per published port."""
    out = []
    for port in service.get("ports", []):
        if isinstance(port, dict):
            out.append((port.get("host_ip"), str(port["target"])))
            continue
        parts = interpolate(str(port), sample_env()).split(":")
        host_ip = parts[0] if len(parts) == 3 else None
        out.append((host_ip, parts[-1].split("/")[0]))
    return out


def test_only_the_api_is_published(services: dict[str, Any]) -> None:
    for name, service in services.items():
        assert service.get("network_mode") != "host", name
        assert not service.get("privileged"), name
        for host_ip, target in published(service):
            if name == "api":
                assert target == "8000"
            else:
                assert host_ip == "127.0.0.1", f"{name} publishes {target} beyond loopback"
    assert published(services["api"]), "the API must be reachable"
    for internal in ("postgres", "ray-head", "ray-worker", "runner"):
        assert "ports" not in services[internal], f"{internal} must publish nothing"


def test_ray_head_has_no_dashboard_and_token_auth(services: dict[str, Any]) -> None:
    head = command(services["ray-head"])
    assert head[:3] == ["ray", "start", "--head"]
    assert "--include-dashboard=false" in head and "--block" in head
    for name in ("ray-head", "ray-worker", "runner", "api"):
        env = environment(services[name])
        assert env["RAY_AUTH_MODE"] == "token", name
        assert REQUIRED_REFERENCE.match(env["RAY_AUTH_TOKEN"]), name


def test_ray_nodes_join_the_head(services: dict[str, Any]) -> None:
    port = option_value(command(services["ray-head"]), "--port")
    assert option_value(command(services["ray-worker"]), "--address") == f"ray-head:{port}"
    runner = command(services["runner"])
    assert runner[0] == "/app/docker/ray-join.sh"
    assert option_value(runner, "--ray-address") == f"ray-head:{port}"
    # Trials never run on the head (or the runner's node): they offer no resources.
    assert {"--num-cpus=0", "--num-gpus=0"} <= set(command(services["ray-head"]))


def test_gpu_worker_reserves_nvidia_gpus(services: dict[str, Any]) -> None:
    devices = services["ray-worker"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
    assert "container_name" not in services["ray-worker"]  # `--scale ray-worker=N` works
    assert "ports" not in services["ray-worker"]


def test_mlflow_has_basic_auth_and_its_own_stores(services: dict[str, Any]) -> None:
    mlflow = services["mlflow"]
    args = command(mlflow)
    assert args[:2] == ["python", "/app/docker/mlflow-server.py"]
    assert option_value(args, "--app-name") == "basic-auth"
    artifacts = option_value(args, "--artifacts-destination")
    assert f"mlflow-artifacts:{artifacts}" in mlflow["volumes"]
    env = environment(mlflow)
    assert REQUIRED_REFERENCE.match(env["MLFLOW_ADMIN_PASSWORD"])
    assert env["MLFLOW_BACKEND_STORE_URI"].startswith("postgresql+psycopg://")
    # The clients log in with the admin's credentials.
    for name in ("api", "runner"):
        client = environment(services[name])
        assert client["MLFLOW_TRACKING_USERNAME"] == env["MLFLOW_ADMIN_USERNAME"]
        assert client["MLFLOW_TRACKING_PASSWORD"] == env["MLFLOW_ADMIN_PASSWORD"]
        tracking = urlsplit(client["AUTOTUNE_TRACKING_URI"])
        assert (tracking.hostname, str(tracking.port)) == ("mlflow", option_value(args, "--port"))


def database(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


def test_each_store_has_its_own_database(services: dict[str, Any]) -> None:
    api = resolved(environment(services["api"]), sample_env())
    mlflow = resolved(environment(services["mlflow"]), sample_env())
    stores = {
        "jobs": api["AUTOTUNE_DB"],
        "optuna": api["AUTOTUNE_STORAGE"],
        "mlflow": mlflow["MLFLOW_BACKEND_STORE_URI"],
        "mlflow auth": mlflow["MLFLOW_AUTH_DATABASE_URI"],
    }
    names = {store: database(url) for store, url in stores.items()}
    assert len(set(names.values())) == len(names), names
    created = re.findall(
        r"CREATE DATABASE (\w+);", (DOCKER / "postgres/init-databases.sql").read_text()
    )
    assert set(names.values()) <= set(created)
    for url in stores.values():
        assert urlsplit(url).hostname == "postgres"
    assert (
        resolved(environment(services["runner"]), sample_env())["AUTOTUNE_DB"] == api["AUTOTUNE_DB"]
    )


def test_named_volumes(compose: dict[str, Any], services: dict[str, Any]) -> None:
    assert set(compose["volumes"]) == {"postgres-data", "mlflow-artifacts", "autotune-data"}
    assert "postgres-data:/var/lib/postgresql/data" in services["postgres"]["volumes"]
    data_dir = environment(services["api"])["AUTOTUNE_DATA_DIR"]
    # Uploads (API), job outputs (runner) and optimized models exported on a worker.
    for name in ("api", "runner", "ray-worker"):
        assert f"autotune-data:{data_dir}" in services[name]["volumes"], name
    assert environment(services["runner"])["AUTOTUNE_DATA_DIR"] == data_dir


def test_ports_agree(services: dict[str, Any]) -> None:
    api = command(services["api"])
    port = option_value(api, "--port")
    assert published(services["api"])[0][1] == port
    assert f"127.0.0.1:{port}/healthz" in " ".join(services["api"]["healthcheck"]["test"])
    assert option_value(api, "--host") == "0.0.0.0"
    mlflow_port = option_value(command(services["mlflow"]), "--port")
    assert f"127.0.0.1:{mlflow_port}/health" in " ".join(services["mlflow"]["healthcheck"]["test"])


def test_api_and_runner_split_the_work(services: dict[str, Any]) -> None:
    api, runner = command(services["api"]), command(services["runner"])
    assert api[1:3] == ["autotune", "serve"] and runner[1:3] == ["autotune", "serve"]
    assert "--api" in api and option_value(api, "--runners") == "0" and "--no-scheduler" in api
    assert "--no-api" in runner and "--scheduler" in runner
    # Both ask the cluster for the workers' hardware (the API for its dedupe keys).
    for served in (api, runner):
        assert served[0] == "/app/docker/ray-join.sh"
        assert option_value(served, "--executor") == "ray"
        assert option_value(served, "--ray-address") == option_value(runner, "--ray-address")


# --- secrets ---------------------------------------------------------------------------


def references() -> list[re.Match[str]]:
    return list(REFERENCE.finditer(COMPOSE_FILE.read_text()))


def test_every_secret_is_required_from_env() -> None:
    text = COMPOSE_FILE.read_text()
    assert not re.search(r"\$(?![{$])", text), "use ${NAME} references only"
    secrets = set()
    for match in references():
        if SECRET.search(match["name"]):
            secrets.add(match["name"])
            assert match["op"] == ":?" and match["arg"].strip(), match[0]
        else:
            assert match["op"] == ":-", f"{match[0]}: an optional setting needs a default"
    assert secrets == {
        "POSTGRES_PASSWORD",
        "MLFLOW_ADMIN_PASSWORD",
        "MLFLOW_FLASK_SERVER_SECRET_KEY",
        "RAY_AUTH_TOKEN",
    }


def test_no_secret_has_a_literal_value(services: dict[str, Any]) -> None:
    for name, service in services.items():
        for key, value in environment(service).items():
            if SECRET.search(key):
                assert REQUIRED_REFERENCE.match(value), f"{name}: {key} is not from .env"
            credentials = CREDENTIALS.match(value)
            if credentials:
                password = credentials["password"]
                assert REQUIRED_REFERENCE.match(password), f"{name}: {key} has a literal password"
        for arg in command(service):
            assert not re.search(r"(?i)(password|token|secret)=\w", arg), (name, arg)


def test_env_example_lists_every_variable_empty() -> None:
    example = env_example()
    assert set(example) == {match["name"] for match in references()}
    assert all(value == "" for value in example.values()), "no value in .env.example"
    text = ENV_EXAMPLE.read_text()
    assert "openssl rand -hex 32" in text
    # Each variable has a comment right above it.
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line and not line.startswith("#"):
            assert lines[i - 1].startswith("#"), f"{line}: say what it is"


def test_compose_refuses_to_start_without_a_secret(compose: dict[str, Any]) -> None:
    env = sample_env()
    resolved(compose, env)  # every reference resolves
    for name in [n for n in env if SECRET.search(n)]:
        with pytest.raises(KeyError, match=name):
            resolved(compose, {**env, name: ""})


# --- what the services run -------------------------------------------------------------


def scripts_in(services: dict[str, Any]) -> set[str]:
    paths = set()
    for service in services.values():
        for part in command(service) + service.get("healthcheck", {}).get("test", []):
            if str(part).startswith("/app/docker/"):
                paths.add(str(part).removeprefix("/app/"))
    return paths


def test_scripts_exist(services: dict[str, Any]) -> None:
    paths = scripts_in(services)
    assert paths == {"docker/mlflow-server.py", "docker/healthcheck.py", "docker/ray-join.sh"}
    for path in paths:
        assert (REPO / path).is_file(), path
    assert os.access(DOCKER / "ray-join.sh", os.X_OK)
    subprocess.run(["sh", "-n", str(DOCKER / "ray-join.sh")], check=True)
    for volume in services["postgres"]["volumes"]:
        source = volume.split(":")[0]
        if source.startswith("./"):
            assert (REPO / source).is_file(), source


def test_builds_point_at_dockerfiles(services: dict[str, Any]) -> None:
    built = {}
    for name, service in services.items():
        if "build" in service:
            build = service["build"]
            context = REPO / build["context"]
            assert context.resolve() == REPO
            dockerfile = context / build["dockerfile"]
            assert dockerfile.is_file(), f"{name}: {dockerfile}"
            built[name] = dockerfile.resolve()
            assert service.get("image"), f"{name}: name the image so services share it"
    assert set(built) == SERVICES - {"postgres"}
    assert built["ray-worker"] == GPU_WORKER_DOCKERFILE
    assert {built[n] for n in ("mlflow", "ray-head", "api", "runner")} == {CONTROL_PLANE_DOCKERFILE}
    assert services["postgres"]["image"].startswith("postgres:")


def click_command(args: list[str]) -> tuple[Any, list[str]]:
    """The command that `args` (from its program name on) invokes, and its arguments: a
    click command (Typer's own copy of click for autotune)."""
    program = args[0]
    if program == "autotune":
        import typer.main

        from autotune.cli import app

        cmd: Any = typer.main.get_command(app)
    elif program == "ray":
        from ray.scripts.scripts import cli as cmd
    else:
        raise AssertionError(f"unexpected program {program}")
    rest = args[1:]
    while hasattr(cmd, "commands") and rest and not rest[0].startswith("-"):
        sub = cmd.get_command(cmd.context_class(cmd), rest[0])
        assert sub is not None, f"{program}: no command {rest[0]!r} in {args}"
        cmd, rest = sub, rest[1:]
    return cmd, rest


def parse(args: list[str]) -> None:
    """Parse (and type-check) the arguments as the real command line would; invoke nothing."""
    cmd, rest = click_command(args)
    cmd.make_context(args[0], rest)


def service_commands(services: dict[str, Any]) -> dict[str, list[str]]:
    env = sample_env()
    out = {}
    for name, service in services.items():
        if name == "postgres":
            continue
        args = resolved(command(service), env)
        if args[0] == "/app/docker/ray-join.sh":
            args = args[1:]
        out[name] = args
    return out


def test_ray_commands_parse(services: dict[str, Any]) -> None:
    for name in ("ray-head", "ray-worker"):
        parse(service_commands(services)[name])
    # the runner's node, as docker/ray-join.sh starts it
    parse(["ray", "start", "--address=ray-head:6379", "--num-cpus=0", "--num-gpus=0"])
    parse(["ray", "health-check", "--address", "127.0.0.1:6379"])


def test_autotune_commands_parse(services: dict[str, Any]) -> None:
    commands = service_commands(services)
    for name in ("api", "runner"):
        parse(commands[name])
    parse(["autotune", "token", "create", "alice", "--team", "ml"])
    for args in (["serve", "--help"], ["token", "create", "--help"]):
        done = subprocess.run(
            [sys.executable, "-m", "autotune", *args], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr


@pytest.mark.slow  # importing MLflow's command line takes seconds
def test_mlflow_command_parses(services: dict[str, Any]) -> None:
    from mlflow.cli import server

    args = service_commands(services)["mlflow"]
    assert args[:2] == ["python", "/app/docker/mlflow-server.py"]
    server.make_context("server", args[2:])


# --- the entry-point scripts -------------------------------------------------------------


def load_script(name: str) -> ModuleType:
    path = DOCKER / name
    spec = importlib.util.spec_from_file_location(path.stem.replace("-", "_"), path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MLFLOW_ENV = {
    "MLFLOW_ADMIN_USERNAME": "admin",
    "MLFLOW_ADMIN_PASSWORD": "0123456789abcdef%$x",
    "MLFLOW_AUTH_DATABASE_URI": "postgresql+psycopg://autotune:p%40ss@postgres:5432/auth",
    "MLFLOW_FLASK_SERVER_SECRET_KEY": "k",
}
BASIC_AUTH = ["--app-name", "basic-auth"]


def test_mlflow_entry_point_renders_the_auth_config() -> None:
    script = load_script("mlflow-server.py")
    text = script.render(script.settings(MLFLOW_ENV, BASIC_AUTH))
    config = configparser.ConfigParser()
    config.read_string(text)
    section = config["mlflow"]
    assert section["admin_username"] == "admin"
    assert section["admin_password"] == MLFLOW_ENV["MLFLOW_ADMIN_PASSWORD"]
    assert section["database_uri"] == MLFLOW_ENV["MLFLOW_AUTH_DATABASE_URI"]
    assert section["default_permission"] == "NO_PERMISSIONS"


@pytest.mark.parametrize(
    ("change", "argv", "message"),
    [
        ({"MLFLOW_ADMIN_PASSWORD": "password1234"}, BASIC_AUTH, "public default"),
        ({"MLFLOW_ADMIN_PASSWORD": "short"}, BASIC_AUTH, "at least 12"),
        ({"MLFLOW_ADMIN_PASSWORD": ""}, BASIC_AUTH, "MLFLOW_ADMIN_PASSWORD"),
        ({"MLFLOW_FLASK_SERVER_SECRET_KEY": ""}, BASIC_AUTH, "MLFLOW_FLASK_SERVER_SECRET_KEY"),
        ({"MLFLOW_ADMIN_USERNAME": "admin\nx = y"}, BASIC_AUTH, "single line"),
        ({}, [], "basic-auth"),
    ],
)
def test_mlflow_entry_point_refuses(change: dict[str, str], argv: list[str], message: str) -> None:
    script = load_script("mlflow-server.py")
    with pytest.raises(script.ConfigError, match=message):
        script.settings({**MLFLOW_ENV, **change}, argv)


def test_mlflow_entry_point_writes_a_private_file() -> None:
    script = load_script("mlflow-server.py")
    path = script.write_private("x")
    try:
        assert path.stat().st_mode & 0o077 == 0 and path.parent.stat().st_mode & 0o077 == 0
    finally:
        path.unlink()
        path.parent.rmdir()


def test_ray_join_starts_a_node_without_resources_then_runs_the_command(tmp_path: Path) -> None:
    fake = tmp_path / "ray"
    fake.write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/ray-args\n')
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    env.pop("AUTOTUNE_RAY_ADDRESS", None)
    script = str(DOCKER / "ray-join.sh")
    done = subprocess.run(
        [script, "echo", "serving", "--ray-address", "head:6379"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "serving --ray-address head:6379"
    ray_args = (tmp_path / "ray-args").read_text().split()
    assert ray_args[:2] == ["start", "--address=head:6379"]
    assert {"--num-cpus=0", "--num-gpus=0"} <= set(ray_args)
    missing = subprocess.run([script, "echo"], env=env, capture_output=True, text=True)
    assert missing.returncode == 2 and "--ray-address" in missing.stderr


@pytest.fixture
def http_server() -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/healthz" else 503)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_http_healthcheck(http_server: str) -> None:
    check = load_script("healthcheck.py")
    assert check.main(["http", f"{http_server}/healthz"]) == 0
    assert check.main(["http", f"{http_server}/down"]) == 1
    assert check.main(["nonsense"]) == 2


def test_ray_node_healthcheck_needs_a_local_raylet(monkeypatch: pytest.MonkeyPatch) -> None:
    import psutil

    check = load_script("healthcheck.py")
    monkeypatch.setattr(psutil, "process_iter", lambda attrs: iter([]))
    assert check.main(["ray-node", "127.0.0.1:1"]) == 1


# --- images ----------------------------------------------------------------------------


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out, pending = [], ""
    for line in dockerfile.read_text().splitlines():
        if not pending and line.lstrip().startswith("#"):
            continue
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        if pending.strip():
            keyword, _, rest = pending.strip().partition(" ")
            out.append((keyword.upper(), " ".join(rest.split())))
        pending = ""
    return out


def arg_default(dockerfile: Path, name: str) -> str:
    for keyword, rest in instructions(dockerfile):
        if keyword == "ARG" and rest.startswith(f"{name}="):
            return rest.partition("=")[2]
    raise AssertionError(f"{dockerfile.name}: no ARG {name}")


def runs(dockerfile: Path) -> str:
    return "\n".join(rest for keyword, rest in instructions(dockerfile) if keyword == "RUN")


def test_control_plane_installs_cpu_torch_only() -> None:
    run = runs(CONTROL_PLANE_DOCKERFILE)
    assert arg_default(CONTROL_PLANE_DOCKERFILE, "TORCH_CPU_INDEX") == (
        "https://download.pytorch.org/whl/cpu"
    )
    first_torch = run.index("torch==")
    assert '--index-url "${TORCH_CPU_INDEX}" "torch==${TORCH_VERSION}+cpu"' in run
    assert run.index("--index-url") < first_torch < run.index('".[cpu,hf]"')
    assert "[gpu]" not in run and "onnxruntime-gpu" not in run
    assert '"mlflow[auth]"' in run  # Flask-WTF, which the basic-auth server needs
    assert arg_default(CONTROL_PLANE_DOCKERFILE, "PYTHON_IMAGE").startswith("python:3.11")
    assert "-slim" in arg_default(CONTROL_PLANE_DOCKERFILE, "PYTHON_IMAGE")


def test_gpu_worker_installs_cuda_builds() -> None:
    run = runs(GPU_WORKER_DOCKERFILE)
    assert arg_default(GPU_WORKER_DOCKERFILE, "CUDA_IMAGE").startswith("nvidia/cuda:")
    assert "runtime" in arg_default(GPU_WORKER_DOCKERFILE, "CUDA_IMAGE")
    assert '".[gpu,hf]"' in run and "[cpu]" not in run and "+cpu" not in run
    assert "whl/cpu" not in GPU_WORKER_DOCKERFILE.read_text()
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert any(req.startswith("onnxruntime-gpu") for req in extras["gpu"])


def test_images_can_join_one_ray_cluster() -> None:
    """Ray refuses a node whose Python (to the patch release) or Ray differs from the head's."""
    python_image = arg_default(CONTROL_PLANE_DOCKERFILE, "PYTHON_IMAGE")
    assert re.fullmatch(r"python:3\.11\.\d+-slim-\w+", python_image), "pin the patch release"
    assert arg_default(GPU_WORKER_DOCKERFILE, "PYTHON_IMAGE") == python_image
    assert "COPY --from=python /usr/local/lib/ /usr/local/lib/" in [
        f"{k} {r}" for k, r in instructions(GPU_WORKER_DOCKERFILE)
    ]
    constraints = (DOCKER / "constraints.txt").read_text()
    assert re.search(r"^ray==\d+\.\d+\.\d+$", constraints, re.M)
    assert re.search(r"^mlflow==\d+\.\d+\.\d+$", constraints, re.M)
    makefile = (REPO / "Makefile").read_text()
    torch = re.search(r"^TORCH_VERSION \?= (\S+)$", makefile, re.M)
    assert torch
    for dockerfile in (CONTROL_PLANE_DOCKERFILE, GPU_WORKER_DOCKERFILE):
        assert "-c docker/constraints.txt" in runs(dockerfile), dockerfile.name
        assert arg_default(dockerfile, "TORCH_VERSION") == torch[1], dockerfile.name


def test_images_run_unprivileged_and_hold_no_secret() -> None:
    for dockerfile in (CONTROL_PLANE_DOCKERFILE, GPU_WORKER_DOCKERFILE):
        steps = instructions(dockerfile)
        users = [rest for keyword, rest in steps if keyword == "USER"]
        assert users and users[-1] not in ("root", "0"), dockerfile.name
        for keyword, rest in steps:
            if keyword in ("COPY", "ADD"):
                sources = [p for p in rest.split()[:-1] if not p.startswith("--")]
                assert not any(".env" in Path(s).name for s in sources), (dockerfile.name, rest)
            if keyword in ("ENV", "ARG"):
                for name in re.findall(r"(\w+)=", rest):
                    assert not SECRET.search(name), (dockerfile.name, name)


def dockerignore_regex(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern (anchored at the context's root; `**` spans directories)."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def ignored(path: str, patterns: list[str]) -> bool:
    """Whether the build context leaves `path` out (the last matching pattern decides; a
    directory's pattern covers what is inside it)."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    verdict = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        regex = dockerignore_regex(pattern.removeprefix("!").strip("/"))
        if any(regex.fullmatch(prefix) for prefix in prefixes):
            verdict = not negate
    return verdict


def test_dockerignore_keeps_secrets_and_local_state_out() -> None:
    lines = (REPO / ".dockerignore").read_text().splitlines()
    patterns = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    for path in (
        ".env",
        ".env.local",
        ".venv/bin/python",
        ".git/config",
        "autotune.db",
        "mlflow.db",
        "autotune.db.lock",
        "autotune-out/digits/tuned.yaml",
        "mlruns/0/meta.yaml",
        "experiments/digits/.cache/cnn.safetensors",
    ):
        assert ignored(path, patterns), path
    for path in (
        "pyproject.toml",
        "autotune/cli/__init__.py",
        "docker/constraints.txt",
        "search_spaces",
    ):
        assert not ignored(path, patterns), path
