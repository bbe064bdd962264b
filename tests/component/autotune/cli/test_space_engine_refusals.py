"""`autotune space --request` says up front which engine cannot convert the request's model,
and leaves that engine out of the space a study of it would search."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from autotune.cli import app
from tests.space_command import space_for_onnx
from tests.unconvertible import digits_through_det

runner = CliRunner()


def test_space_for_a_request_leaves_out_an_engine_that_cannot_convert_its_model(
    write_request: Any, tmp_path: Path
) -> None:
    model = digits_through_det(tmp_path / "digits-det.onnx")
    engines, reasons = space_for_onnx(write_request, model)
    assert "openvino" not in engines and "onnxruntime" in engines
    refusal = reasons[("runtime.engine", "openvino")]
    assert refusal.startswith("runtime.engine=openvino: OpenVINO cannot convert this model (")
    assert "Det-" in refusal

    path = write_request(model={"onnx": str(model)}, search_space="cpu.yaml")
    printed = runner.invoke(app, ["space", "--request", str(path)])
    assert printed.exit_code == 0, printed.output
    # The line names the value, so the reason is printed without it.
    without_value = refusal.removeprefix("runtime.engine=openvino: ")
    assert f"openvino: {without_value}" in " ".join(printed.output.split())
