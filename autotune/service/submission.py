"""From what a client sent to a job the service can run: every path confined, every entry
point trusted, the model identified by its content, and the service's own storage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autotune.core.errors import RequestError
from autotune.core.model_files import workload_python_path
from autotune.requests.checks import check_entry_point_source, resolve_under_root
from autotune.requests.request import parse_request
from autotune.requests.sources import download_registered
from autotune.requests.uploads import ModelStore, StoredModel, directory_sha256, model_file_sha256
from autotune.service.jobs import JobDraft
from autotune.service.settings import ServiceSettings
from autotune.service.tokens import Principal
from autotune.tracking.registry import resolve_registered

# Where the service keeps studies and runs is its own business, not the client's.
SERVICE_FIELDS = ("storage", "tracking")


def prepare_job(
    raw: Any,
    principal: Principal,
    settings: ServiceSettings,
    upload: StoredModel | None = None,
    watch_id: str | None = None,
    warm_start_from: str | None = None,
) -> JobDraft:
    """Check and resolve a submitted request; raise RequestError naming what is wrong."""
    if not isinstance(raw, dict):
        raise RequestError("request", "must be a mapping", type(raw).__name__)
    request = dict(raw)
    for key in SERVICE_FIELDS:
        if key in request:
            raise RequestError(key, "is chosen by the service, leave it out", request[key])
    _check_space_name(request.get("search_space"))
    model, source, model_sha256 = _resolve_model(
        request.get("model"), upload, settings, principal.namespace
    )
    request["model"] = model
    request["data"] = _resolve_data(request.get("data"), settings)
    _check_metric(request.get("metric"), settings)
    request["storage"] = settings.storage
    request["tracking"] = {"uri": settings.tracking_uri, "experiment": settings.experiment}
    validated = parse_request(request).model_dump(mode="json", exclude_none=True)
    return JobDraft(
        principal=principal,
        request=validated,
        base_dir=str(base_dir(settings)),
        model_source=source,
        model_sha256=model_sha256,
        hardware_fingerprint=settings.job_hardware(validated.get("target")),
        watch_id=watch_id,
        warm_start_from=warm_start_from,
    )


def base_dir(settings: ServiceSettings) -> Path:
    """The directory a job's request paths are relative to, and its entry points import
    from after the server's working directory (`workload_python_path`): the models root,
    else the server's working directory."""
    return (settings.models_root or Path.cwd()).resolve()


def _check_space_name(space: Any) -> None:
    """A space the job can be searched in, checked as `autotune tune` checks it before
    anything starts: a file of search_spaces/ (no path) that exists and validates."""
    from autotune.space.search_space import load_space, resolve_space_path

    if space is None:
        return
    if not isinstance(space, str) or "/" in space or "\\" in space or space.startswith("."):
        raise RequestError("search_space", "must name a file in search_spaces/ (no path)", space)
    load_space(resolve_space_path(space))


def _resolve_model(
    model: Any, upload: StoredModel | None, settings: ServiceSettings, namespace: str
) -> tuple[dict[str, Any], dict[str, Any], str]:
    """The server-side model reference, how it was given, and its content hash; a registered
    model is looked up among the caller's team's (`namespace`)."""
    model = _mapping(model, "model")
    if upload is not None:
        return _uploaded(model, upload, settings)
    if not model:
        raise RequestError("model", "is required (or upload a model file)", None)
    if "weights" in model:
        path = _under_root(model["weights"], settings, "model.weights")
        model["weights"] = str(path)
        _check_trusted(model.get("entry_point"), settings, "model.entry_point")
        sha256 = model_file_sha256(path)
        return model, {"kind": "path", "weights": str(path)}, f"{model['entry_point']}|{sha256}"
    if "onnx" in model:
        path = _under_root(model["onnx"], settings, "model.onnx")
        return {"onnx": str(path)}, {"kind": "path", "onnx": str(path)}, model_file_sha256(path)
    if "hf" in model:
        path = _under_root(model["hf"], settings, "model.hf", directory=True)
        resolved = {**model, "hf": str(path)}
        return resolved, {"kind": "path", "hf": str(path)}, directory_sha256(path)
    if "registered" in model:
        return _registered(str(model["registered"]), settings, namespace)
    _check_trusted(model.get("entry_point"), settings, "model.entry_point")
    entry_point = str(model.get("entry_point"))
    return model, {"kind": "entry_point", "entry_point": entry_point}, entry_point


def _uploaded(
    model: dict[str, Any], upload: StoredModel, settings: ServiceSettings
) -> tuple[dict[str, Any], dict[str, Any], str]:
    source = {"kind": "upload", "format": upload.kind, "sha256": upload.sha256}
    if upload.kind == "onnx":
        if model:
            raise RequestError("model", "must be left out when an ONNX model is uploaded", model)
        return {"onnx": str(upload.path)}, source, upload.sha256
    if set(model) != {"entry_point"}:
        raise RequestError(
            "model", "must name only the architecture's entry_point for uploaded weights", model
        )
    _check_trusted(model["entry_point"], settings, "model.entry_point")
    resolved = {"entry_point": model["entry_point"], "weights": str(upload.path)}
    return resolved, source, f"{model['entry_point']}|{upload.sha256}"


def _registered(
    uri: str, settings: ServiceSettings, namespace: str
) -> tuple[dict[str, Any], dict[str, Any], str]:
    version = resolve_registered(uri, settings.tracking_uri, namespace)
    stored = download_registered(version, settings.tracking_uri, ModelStore(settings.uploads_dir))
    name = uri.removeprefix("models:/").split("@")[0].split("/")[0]  # as the client wrote it
    source = {"kind": "registered", "uri": uri, "name": name, "version": version.version}
    return {"onnx": str(stored.path)}, source, stored.sha256


def _resolve_data(data: Any, settings: ServiceSettings) -> dict[str, Any]:
    data = _mapping(data, "data")
    for field in ("npz", "text", "labels", "images"):
        if field in data:
            path = _under_root(data[field], settings, f"data.{field}", directory=field == "images")
            data[field] = str(path)
    if "entry_point" in data:
        _check_trusted(data["entry_point"], settings, "data.entry_point")
    return data


def _mapping(value: Any, field: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RequestError(field, "must be a mapping", value)
    return dict(value)


def _check_metric(metric: Any, settings: ServiceSettings) -> None:
    if isinstance(metric, dict) and metric.get("entry_point") is not None:
        _check_trusted(metric["entry_point"], settings, "metric.entry_point")


def _under_root(path: Any, settings: ServiceSettings, field: str, directory: bool = False) -> Path:
    if settings.models_root is None:
        raise RequestError(field, "names a server file, but this server has no models root", path)
    return resolve_under_root(str(path), settings.models_root, field, directory)


def _check_trusted(entry_point: Any, settings: ServiceSettings, field: str) -> None:
    """Entry points run code in the server: only modules its operator trusts, found where
    the job will import them from and defining the name (as `autotune tune` checks them
    before anything starts)."""
    if not isinstance(entry_point, str):
        raise RequestError(field, "must be a 'package.module:function' string", entry_point)
    module = entry_point.split(":", 1)[0]
    trusted = any(
        module == prefix or module.startswith(prefix + ".") for prefix in settings.trusted_modules
    )
    if not trusted:
        trusted_list = ", ".join(settings.trusted_modules) or "none"
        rule = f"must be in a module this server trusts ({trusted_list})"
        raise RequestError(field, rule, entry_point)
    check_entry_point_source(entry_point, workload_python_path(base_dir(settings)), field)
