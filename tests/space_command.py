"""`autotune space --request` as the tests of a request's space read it: the engines left in
the space of a request of an ONNX model, and why each excluded value is out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from autotune.cli import app

runner = CliRunner()


def space_for_onnx(write_request: Any, onnx: Path) -> tuple[list[Any], dict[tuple[str, Any], str]]:
    """`autotune space --request` for a request of this ONNX model on cpu.yaml: the engines
    left in its space, and why each excluded value is out, by (dimension, value)."""
    path = write_request(model={"onnx": str(onnx)}, search_space="cpu.yaml")
    result = runner.invoke(app, ["space", "--request", str(path), "--json"])
    assert result.exit_code == 0, result.output
    space = json.loads(result.output)
    engines = next(d for d in space["dimensions"] if d["name"] == "runtime.engine")
    reasons = {(e["dimension"], e["value"]): e["reason"] for e in space["excluded"]}
    return engines["values"], reasons
