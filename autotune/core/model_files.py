"""Model files both planes read: a user's Python entry point resolved, an ONNX model's
external-data files found and confined to its directory, and the content hashes that name a
model. `onnx` is imported inside the functions that parse a model."""

from __future__ import annotations

import hashlib
import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.core.errors import RequestError

if TYPE_CHECKING:
    import onnx


def workload_python_path(base_dir: Path) -> list[str]:
    """The directories a workload's entry points import from before sys.path: the working
    directory, then `base_dir` (a request file's directory; a service job's models root)."""
    return list(dict.fromkeys([str(Path.cwd().resolve()), str(base_dir.resolve())]))


def entry_point_search_path(python_path: Sequence[str]) -> list[str]:
    """Where an entry point's module is looked for, in order: `python_path`, then sys.path.
    Both the import (`resolve_entry_point`) and the service's check without importing
    search this list, so that what one finds is what the other gets."""
    return list(dict.fromkeys([*(str(Path(p).resolve()) for p in python_path), *sys.path]))


def resolve_entry_point(entry_point: str, python_path: list[str], field: str) -> Any:
    """Import `package.module:attribute` with `python_path` put first on sys.path."""
    sys.path[:] = entry_point_search_path(python_path)
    module_name, attribute = entry_point.split(":")
    importlib.invalidate_caches()
    try:
        module = importlib.import_module(module_name)
    except Exception as error:
        raise RequestError(
            field, f"module must import ({type(error).__name__}: {error})", entry_point
        ) from error
    if not hasattr(module, attribute):
        raise RequestError(
            field, f"module {module_name!r} has no attribute {attribute!r}", entry_point
        )
    return getattr(module, attribute)


def external_data_files(model: onnx.ModelProto, file: Path, field: str) -> dict[str, Path]:
    """Each external-data location the model names, mapped to the file it resolves to (links
    followed); a location outside the model file's directory, or a missing file, is refused."""
    from onnx.external_data_helper import ExternalDataInfo, uses_external_data

    base = file.parent.resolve()
    locations: dict[str, Path] = {}
    for tensor in _all_tensors(model.graph):
        if not uses_external_data(tensor):
            continue
        location = ExternalDataInfo(tensor).location
        resolved = (base / location).resolve()
        if os.path.isabs(location) or not resolved.is_relative_to(base):
            raise RequestError(
                field, "external data must stay inside the model's directory", location
            )
        if not resolved.is_file():
            raise RequestError(field, "external data file must exist", location)
        locations[location] = resolved
    return locations


def _all_tensors(graph: onnx.GraphProto) -> list[onnx.TensorProto]:
    """Every tensor that may point at external data: initializers and tensor attributes,
    sparse ones' values and indices both, in subgraphs too."""
    from onnx import AttributeProto

    tensors = list(graph.initializer)
    for sparse in graph.sparse_initializer:
        tensors += [sparse.values, sparse.indices]
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type == AttributeProto.TENSOR:
                tensors.append(attribute.t)
            tensors += list(attribute.tensors)
            sparse_tensors = list(attribute.sparse_tensors)
            if attribute.type == AttributeProto.SPARSE_TENSOR:
                sparse_tensors.append(attribute.sparse_tensor)
            for sparse in sparse_tensors:
                tensors += [sparse.values, sparse.indices]
            if attribute.type == AttributeProto.GRAPH:
                tensors += _all_tensors(attribute.g)
            for subgraph in attribute.graphs:
                tensors += _all_tensors(subgraph)
    return tensors


def onnx_sha256(file: Path, external: dict[str, Path]) -> str:
    """The identity of an ONNX model: its file, then each external-data file once, in order."""
    return files_sha256([file, *sorted(set(external.values()))])


def file_sha256(path: Path) -> str:
    return files_sha256([path])


def files_sha256(files: list[Path]) -> str:
    digest = hashlib.sha256()
    for file in files:
        with open(file, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()
