"""What can be told about a workload before a worker starts, and client-named paths confined to
a root."""

from __future__ import annotations

import ast
import sys
import threading
from collections.abc import Sequence
from importlib.machinery import ModuleSpec, PathFinder
from pathlib import Path

from autotune.core.contract import Workload
from autotune.core.contract.refs import local_path
from autotune.core.errors import RequestError
from autotune.core.model_files import entry_point_search_path, resolve_entry_point
from autotune.requests.uploads import describe_file

# CPython 3.11's ast.parse is not safe in several threads at once ("AST constructor
# recursion depth mismatch", seen with 20 submissions at once): one parse at a time.
_PARSING = threading.Lock()


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
    saved = list(sys.path)
    try:
        resolve_entry_point(entry_point, python_path, field)
    finally:
        sys.path[:] = saved


def check_entry_point_source(entry_point: str, python_path: Sequence[str], field: str) -> None:
    """That the entry point's module is found where a worker will import it from (the
    workload's `python_path`, then sys.path: `entry_point_search_path`) and defines its
    attribute, read from the module's source without running it: the service checks a
    request this way, as importing it would run the module's code (torch and all) in the
    API's process. A module that makes its names at run time (a module `__getattr__`, a
    star import) or has no Python source is given the benefit of the doubt."""
    module_name, _, attribute = entry_point.partition(":")
    if not module_name or not attribute.isidentifier():
        raise RequestError(field, "must be 'package.module:function'", entry_point)
    spec = _find_module(module_name, entry_point_search_path(python_path))
    if spec is None:
        rule = (
            "module must be found where the job imports it: in the server's working "
            "directory, under its models root or among its installed packages"
        )
        raise RequestError(field, rule, entry_point)
    if spec.origin is None or not spec.origin.endswith(".py"):
        return
    try:
        source = Path(spec.origin).read_bytes()
        with _PARSING:
            tree = ast.parse(source)
    except (OSError, SyntaxError, ValueError) as error:
        rule = f"module must be valid Python ({type(error).__name__})"
        raise RequestError(field, rule, entry_point) from None
    names = _top_level_names(tree.body)
    if attribute not in names and "__getattr__" not in names and "*" not in names:
        rule = f"module {module_name!r} has no attribute {attribute!r}"
        raise RequestError(field, rule, entry_point)


def _find_module(name: str, search_path: list[str]) -> ModuleSpec | None:
    """The module's spec, found package by package without importing any of them."""
    spec = None
    path: list[str] | None = search_path
    parts = name.split(".")
    for depth in range(1, len(parts) + 1):
        if path is None:
            return None  # a parent that is a module, not a package
        spec = PathFinder.find_spec(".".join(parts[:depth]), path)
        if spec is None:
            return None
        locations = spec.submodule_search_locations
        path = None if locations is None else list(locations)
    return spec


def _top_level_names(body: list[ast.stmt]) -> set[str]:
    """The names a module's statements bind at its top level (inside its ifs and trys too)."""
    names: set[str] = set()
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.If | ast.Try | ast.With):
            nested = [*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", [])]
            for handler in getattr(node, "handlers", []):
                nested.extend(handler.body)
            names |= _top_level_names(nested)
    return names


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
