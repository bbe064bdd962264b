"""`autotune space --request` says up front which engine cannot convert the request's model,
and leaves that engine out of the space a study of it would search."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from autotune.cli import app
from tests.workers.unconvertible import digits_through_det

runner = CliRunner()


def test_space_for_a_request_leaves_out_an_engine_that_cannot_convert_its_model(
    write_request: Any, tmp_path: Path
) -> None:
    model = digits_through_det(tmp_path / "digits-det.onnx")
    path = write_request(model={"onnx": str(model)}, search_space="cpu.yaml")
    result = runner.invoke(app, ["space", "--request", str(path), "--json"])
    assert result.exit_code == 0, result.output
    space = json.loads(result.output)
    engines = next(d for d in space["dimensions"] if d["name"] == "runtime.engine")
    assert "openvino" not in engines["values"] and "onnxruntime" in engines["values"]
    reasons = {(e["dimension"], e["value"]): e["reason"] for e in space["excluded"]}
    refusal = reasons[("runtime.engine", "openvino")]
    assert refusal.startswith("runtime.engine=openvino: OpenVINO cannot convert this model (")
    assert "Det-" in refusal

    printed = runner.invoke(app, ["space", "--request", str(path)])
    assert printed.exit_code == 0, printed.output
    assert f"openvino: {refusal}" in " ".join(printed.output.split())
