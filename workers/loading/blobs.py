"""Files a workload names (an ONNX model, safetensors weights, an .npz), carried to nodes
that lack them.

The control plane puts each file into Ray's object store once; a worker on a node where the
path does not exist writes the bytes once into a node-local cache, named by their sha256,
and loads from there. A node that has the path (this machine, a shared file system) reads it
directly.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.core.contract import DataRef, ModelRef, Workload

BLOB_DIR = Path(tempfile.gettempdir()) / "autotune-blobs"


@dataclass(frozen=True)
class Blob:
    name: str
    sha256: str
    data: Any  # the bytes, or a Ray ObjectRef to them


def workload_files(workload: Workload) -> list[str]:
    model = workload.model
    return [p for p in (model.onnx, model.weights, workload.data.npz) if p is not None]


def localize(workload: Workload, blobs: dict[str, Blob] | None) -> Workload:
    """The workload with each file this node lacks replaced by its node-local copy."""
    if not blobs:
        return workload
    model, data = workload.model, workload.data
    if model.onnx is not None and model.onnx in blobs and not Path(model.onnx).exists():
        model = ModelRef(onnx=materialize(blobs[model.onnx]))
    weights = model.weights
    if weights is not None and weights in blobs and not Path(weights).exists():
        model = model.model_copy(update={"weights": materialize(blobs[weights])})
    if data.npz is not None and data.npz in blobs and not Path(data.npz).exists():
        data = DataRef(npz=materialize(blobs[data.npz]))
    return workload.model_copy(update={"model": model, "data": data})


def materialize(blob: Blob) -> str:
    target = BLOB_DIR / blob.sha256 / Path(blob.name).name
    if target.exists():
        return str(target)
    payload = blob.data if isinstance(blob.data, bytes) else _fetch(blob.data)
    if hashlib.sha256(payload).hexdigest() != blob.sha256:
        raise OSError(f"the bytes of {blob.name} do not match their sha256")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as handle:
        handle.write(payload)
    os.replace(handle.name, target)
    return str(target)


def _fetch(ref: Any) -> bytes:
    import ray

    payload: bytes = ray.get(ref)
    return payload
