"""An earlier export is re-used only where it is whole and of the same configuration of the
same model."""

from __future__ import annotations

import json
from pathlib import Path

from autotune.core.artifacts import ONNX_ARTIFACT, VARIANT_FILE, previous_export
from autotune.core.model_files import file_sha256

CONFIG = {"runtime.engine": "onnxruntime", "batch.size": 8}


def exported(directory: Path, config: dict[str, object], model_sha256: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / ONNX_ARTIFACT).write_bytes(b"onnx bytes")
    description = {"config": config, "model_sha256": model_sha256}
    (directory / VARIANT_FILE).write_text(json.dumps(description))
    return directory


def test_the_same_configuration_of_the_same_model_is_found(tmp_path: Path) -> None:
    directory = exported(tmp_path, CONFIG, "abc")
    found = previous_export(directory, CONFIG, "abc")
    assert found is not None and found.format == "onnx"
    assert found.sha256 == file_sha256(directory / ONNX_ARTIFACT)


def test_another_configuration_another_model_or_half_an_export_is_not(tmp_path: Path) -> None:
    directory = exported(tmp_path / "a", CONFIG, "abc")
    assert previous_export(directory, {**CONFIG, "batch.size": 16}, "abc") is None
    assert previous_export(directory, CONFIG, "another model") is None
    assert previous_export(tmp_path / "nothing", CONFIG, "abc") is None
    half = tmp_path / "half"
    half.mkdir()
    (half / ONNX_ARTIFACT).write_bytes(b"written before the export stopped")
    assert previous_export(half, CONFIG, "abc") is None  # no description: not whole
    older = exported(tmp_path / "older", CONFIG, "abc")
    (older / VARIANT_FILE).write_text(json.dumps({"config": CONFIG}))  # before model_sha256
    assert previous_export(older, CONFIG, "abc") is None
