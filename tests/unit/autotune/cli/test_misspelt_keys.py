"""A misspelt key in a request file is answered with the key it was probably meant to be."""

from __future__ import annotations

from typer.testing import CliRunner

from autotune.cli import app


def test_a_misspelt_constraint_exits_2_naming_the_key_meant(write_request) -> None:
    path = write_request(constraints={"max_acuracy_drop": 0.01})
    result = CliRunner().invoke(app, ["tune", str(path), "--executor", "inprocess"])
    assert result.exit_code == 2
    assert "constraints.max_acuracy_drop" in result.output
    assert "did you mean max_accuracy_drop?" in result.output
