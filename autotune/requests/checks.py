"""What can be told about a workload before a worker starts, and client-named paths confined to
a root."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from autotune.core.contract import Workload
from autotune.core.contract.refs import local_path
from autotune.core.errors import RequestError
from autotune.requests.uploads import describe_file

if TYPE_CHECKING:
    pass


def check_workload(workload: Workload) -> None:
    """What can be told about a workload without a worker, checked before one starts, so
    that bad input is answered in seconds: its files exist, an ONNX file holds an ONNX graph
    (external data inside its directory), entry points import and name an attribute.
    Raises RequestError naming the field; what only loading can tell (a factory that fails,
    data that does not fit the model) is left to the worker's inspection."""
    model, data = workload.model, workload.data
    if model.onnx is not None:
        _check_onnx_file(model.onnx, "model.onnx")
    if model.weights is not None and not Path(model.weights).is_file():
        raise RequestError("model.weights", "file must exist", model.weights)
    if data.npz is not None and not Path(data.npz).is_file():
        raise RequestError("data.npz", "file must exist", data.npz)
    entry_points = {
        "model.entry_point": model.entry_point,
        "data.entry_point": data.entry_point,
        "metric.entry_point": workload.metric.entry_point,
    }
    for field, entry_point in entry_points.items():
        if entry_point is not None:
            _check_entry_point(entry_point, workload.python_path, field)


def _check_onnx_file(path: str, field: str) -> None:
    import onnx

    from autotune.core.model_files import external_data_files

    file = Path(path)
    if not file.is_file():
        raise RequestError(field, "file must exist", path)
    try:
        model = onnx.load_model(str(file), load_external_data=False)
    except Exception as error:
        raise RequestError(field, f"must be an ONNX model ({describe_file(file)})", path) from error
    if not model.graph.node:
        raise RequestError(field, f"must be an ONNX model ({describe_file(file)})", path)
    external_data_files(model, file, field)


def _check_entry_point(entry_point: str, python_path: list[str], field: str) -> None:
    """Import the entry point's module as a worker would (`python_path` first on sys.path);
    sys.path is left as it was."""
    from autotune.core.model_files import resolve_entry_point

    saved = list(sys.path)
    try:
        resolve_entry_point(entry_point, python_path, field)
    finally:
        sys.path[:] = saved


def resolve_under_root(path: str, root: Path, field: str, directory: bool = False) -> Path:
    """A client-named file (or, with `directory`, a directory whose every file stays inside
    `root` too): a relative path that resolves (links followed) to an existing file inside
    `root`."""
    try:
        local_path(path)
    except ValueError as error:
        raise RequestError(field, str(error), path) from None
    if Path(path).is_absolute():
        raise RequestError(field, "must be a relative path", path)
    base = root.resolve()
    try:
        resolved = (base / path).resolve()
    except (OSError, ValueError, RuntimeError) as error:
        raise RequestError(field, f"must be a valid path ({error})", path) from error
    if not resolved.is_relative_to(base):
        raise RequestError(field, "must stay inside the directory it is relative to", path)
    if directory:
        if not resolved.is_dir():
            raise RequestError(field, "must name an existing directory", path)
        outside = [f for f in resolved.rglob("*") if not f.resolve().is_relative_to(base)]
        if outside:
            raise RequestError(field, "must hold no link that leads outside it", str(outside[0]))
        return resolved
    if not resolved.is_file():
        raise RequestError(field, "must name an existing file", path)
    return resolved
