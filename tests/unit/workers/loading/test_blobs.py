"""Files carried to nodes that lack them: each named file is replaced by a node-local copy
whose bytes match their sha256."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from autotune.core.contract import DataRef, ModelRef, Workload
from workers.loading.blobs import Blob, localize, workload_files


def blob(name: str, payload: bytes) -> Blob:
    return Blob(name=name, sha256=hashlib.sha256(payload).hexdigest(), data=payload)


def test_weights_and_data_missing_on_this_node_are_written_locally(tmp_path: Path) -> None:
    elsewhere = tmp_path / "on-another-node"
    workload = Workload(
        model=ModelRef(entry_point="pkg.mod:build", weights=str(elsewhere / "w.safetensors")),
        data=DataRef(npz=str(elsewhere / "eval.npz")),
    )
    assert workload_files(workload) == [workload.model.weights, workload.data.npz]
    blobs = {
        workload.model.weights: blob("w.safetensors", b"weights-bytes"),
        workload.data.npz: blob("eval.npz", b"npz-bytes"),
    }
    local = localize(workload, blobs)
    assert local.model.entry_point == "pkg.mod:build"
    assert Path(local.model.weights).read_bytes() == b"weights-bytes"
    assert Path(local.data.npz).read_bytes() == b"npz-bytes"


def test_a_file_present_on_this_node_is_read_in_place(tmp_path: Path) -> None:
    model = tmp_path / "model.onnx"
    model.write_bytes(b"onnx")
    workload = Workload(model=ModelRef(onnx=str(model)), data=DataRef(entry_point="p.m:data"))
    assert localize(workload, {str(model): blob("model.onnx", b"onnx")}) == workload


def test_bytes_that_do_not_match_their_hash_are_refused(tmp_path: Path) -> None:
    missing = str(tmp_path / "gone" / "model.onnx")
    workload = Workload(model=ModelRef(onnx=missing), data=DataRef(entry_point="p.m:data"))
    forged = Blob(name="model.onnx", sha256="0" * 64, data=b"other bytes")
    with pytest.raises(OSError, match="sha256"):
        localize(workload, {missing: forged})
