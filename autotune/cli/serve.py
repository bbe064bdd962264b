"""`autotune serve`: the REST API, job runners and watch scheduler."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from autotune.cli.shared import ServiceDb, _exit_codes
from autotune.core.errors import RequestError
from autotune.execution.registry import executor_names


def serve_command(
    host: Annotated[str, typer.Option(help="address the API listens on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="port the API listens on")] = 8000,
    db: ServiceDb = None,
    storage: Annotated[
        str | None,
        typer.Option(envvar="AUTOTUNE_STORAGE", help="SQLAlchemy URL of the studies"),
    ] = None,
    tracking_uri: Annotated[
        str | None, typer.Option(envvar="AUTOTUNE_TRACKING_URI", help="MLflow tracking URI")
    ] = None,
    experiment: Annotated[
        str | None, typer.Option(envvar="AUTOTUNE_EXPERIMENT", help="MLflow experiment")
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(
            envvar="AUTOTUNE_DATA_DIR",
            show_default=False,
            help="where uploads and job outputs are kept (default: $XDG_DATA_HOME/autotune, "
            "~/.local/share/autotune)",
        ),
    ] = None,
    mlflow_artifacts: Annotated[
        str | None,
        typer.Option(
            envvar="AUTOTUNE_MLFLOW_ARTIFACTS",
            metavar="DIR|URI",
            help="where new MLflow experiments keep their artifacts on a database tracking "
            "store (default: <data-dir>/mlflow-artifacts; an MLflow server chooses its own)",
        ),
    ] = None,
    mlflow_ui_url: Annotated[
        str | None,
        typer.Option(
            envvar="AUTOTUNE_MLFLOW_UI_URL",
            metavar="URL",
            help="where people open the MLflow UI on the tracking store: answers and notices "
            "link each job's run there (otherwise they show the store by its scheme only)",
        ),
    ] = None,
    models_root: Annotated[
        Path | None,
        typer.Option(
            envvar="AUTOTUNE_MODELS_ROOT",
            help="requests may name model and data files under this directory "
            "(without it: uploads, registered models and entry points only)",
        ),
    ] = None,
    trust: Annotated[
        list[str] | None,
        typer.Option(
            "--trust",
            envvar="AUTOTUNE_TRUST",
            help="a module prefix whose entry points requests may name; repeatable "
            "(the variable is comma-separated)",
        ),
    ] = None,
    max_upload_mb: Annotated[
        int | None, typer.Option(min=1, help="largest model upload, MiB (default 1024)")
    ] = None,
    body_timeout_s: Annotated[
        float | None,
        typer.Option(
            min=0.1,
            envvar="AUTOTUNE_BODY_TIMEOUT_S",
            help="seconds a request body may take to arrive, one more per MiB (default 30)",
        ),
    ] = None,
    api: Annotated[bool, typer.Option("--api/--no-api", help="serve the REST API")] = True,
    runners: Annotated[int, typer.Option(min=0, help="job runner processes (0: none here)")] = 1,
    scheduler: Annotated[
        bool, typer.Option("--scheduler/--no-scheduler", help="run the watch scheduler")
    ] = True,
    executor: Annotated[
        str | None,
        typer.Option(
            help="where trials run: 'ray' (default), 'inprocess' or an installed plugin's "
            f"executor; one of: {', '.join(executor_names())}"
        ),
    ] = None,
    ray_address: Annotated[
        str | None, typer.Option(envvar="AUTOTUNE_RAY_ADDRESS", help="join this Ray cluster")
    ] = None,
    workers: Annotated[
        str | None,
        typer.Option(
            help="trial slots of each job on each kind of node, or 'auto': one per GPU on a GPU "
            "node, one per CPU node"
        ),
    ] = None,
    lease_s: Annotated[
        float | None, typer.Option(min=0.1, help="seconds a runner's claim on a job lasts")
    ] = None,
    poll_s: Annotated[
        float | None, typer.Option(min=0.01, help="seconds between queue and schedule checks")
    ] = None,
    min_watch_every: Annotated[
        float | None,
        typer.Option(min=1.0, help="shortest interval, seconds, a watch may check at (default 60)"),
    ] = None,
    public_docs: Annotated[
        bool,
        typer.Option(
            "--public-docs",
            help="serve /docs, /redoc and /openapi.json without a token (a browser sends none)",
        ),
    ] = False,
) -> None:
    """Run the service: REST API, job runners and watch scheduler.

    Each of the three can be left out."""
    from autotune.execution.ray_cluster import parse_workers
    from autotune.service.server import serve
    from autotune.service.settings import ServiceSettings, check_web_url

    given: dict[str, Any] = {
        "db": db,
        "storage": storage,
        "tracking_uri": tracking_uri,
        "experiment": experiment,
        "data_dir": data_dir,
        "mlflow_artifacts": mlflow_artifacts,
        "mlflow_ui_url": mlflow_ui_url,
        "models_root": models_root,
        "executor": executor,
        "ray_address": ray_address,
        "workers": None,
        "lease_s": lease_s,
        "poll_s": poll_s,
        "max_upload_bytes": None if max_upload_mb is None else max_upload_mb << 20,
        "body_timeout_s": body_timeout_s,
        "min_watch_every_s": min_watch_every,
        "public_docs": public_docs,
    }
    trusted = tuple(p.strip() for item in trust or [] for p in item.split(",") if p.strip())
    with _exit_codes():
        if mlflow_ui_url is not None:
            check_web_url("mlflow-ui-url", mlflow_ui_url)
        if workers is not None:
            given["workers"] = parse_workers(workers)
        if not (api or runners or scheduler):
            raise RequestError("serve", "must run the API, a job runner or the scheduler", None)
        settings = ServiceSettings(
            **{k: v for k, v in given.items() if v is not None}, trusted_modules=trusted
        )
        serve(settings, host, port, api=api, runners=runners, scheduler=scheduler)
