"""`autotune space --request` for a model whose input fixes the batch size: the batch size
is that size alone, and the printed space says why the file's other sizes are left out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from autotune.cli import app
from tests.fixed_batch_models import fixed_batch_classifier, labelled_data

runner = CliRunner()


def test_space_for_a_batch_of_one_model_says_why_it_has_one_batch_size(
    write_request: Any, tmp_path: Path
) -> None:
    model = fixed_batch_classifier(tmp_path / "captcha.onnx", batch=1)
    data = labelled_data(model, tmp_path / "data.npz")
    path = write_request(
        model={"onnx": str(model)}, data={"npz": str(data)}, search_space="cpu.yaml"
    )
    printed = runner.invoke(app, ["space", "--request", str(path)])
    assert printed.exit_code == 0, printed.output
    text = " ".join(printed.output.split())
    assert "batch.size: 1; baseline 1" in text
    reason = "the model takes only batches of 1 (its inputs fix the batch dimension)"
    assert f"batch.size: excluded 2, 4, 8, 16, 32, 64, 128: {reason}" in text


def test_space_for_a_torch_model_the_request_fixes_at_one_says_so(
    write_request: Any, tmp_path: Path
) -> None:
    path = write_request(
        model={"entry_point": "tests.fixed_batch_models:batch_of_one", "fixed_batch": 1},
        search_space="cpu.yaml",
    )
    printed = runner.invoke(app, ["space", "--request", str(path)])
    assert printed.exit_code == 0, printed.output
    text = " ".join(printed.output.split())
    assert "batch.size: 1; baseline 1" in text
    reason = "the model takes only batches of 1 (the request's model.fixed_batch)"
    assert f"batch.size: excluded 2, 4, 8, 16, 32, 64, 128: {reason}" in text
