"""Every command's --help reads at 80 columns: no value cut short, no environment variable's
name split over two lines, no `<bool>` after a flag, and each paragraph wrapped to the width
(never at its docstring's line breaks)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.core import TyperGroup

from autotune.cli import app

WIDTH = 80
# A cut value: rich's ellipsis, or click's "..." after a word (not `[ARGS]...`).
CUT = re.compile(r"…|\w\.\.\.(\s|$)")


def _commands(group: TyperGroup, path: list[str]) -> Iterator[tuple[list[str], Any]]:
    yield path, group
    for name, command in group.commands.items():
        if isinstance(command, TyperGroup):
            yield from _commands(command, [*path, name])
        else:
            yield [*path, name], command


COMMANDS = list(_commands(typer.main.get_group(app), []))


def _help(path: list[str]) -> str:
    """The console script's help in a clean environment (nothing but its width)."""
    script = Path(sys.executable).parent / "autotune"
    env = {"PATH": os.defpath, "COLUMNS": str(WIDTH)}
    result = subprocess.run(
        [str(script), *path, "--help"], env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_every_command_is_checked() -> None:
    names = {" ".join(path) for path, _ in COMMANDS}
    assert {"", "tune", "serve", "token", "token create", "submit"} <= names


@pytest.mark.parametrize(
    ("path", "command"), COMMANDS, ids=[" ".join(path) or "autotune" for path, _ in COMMANDS]
)
def test_help_reads_at_80_columns(path: list[str], command: Any) -> None:
    text = _help(path)
    lines = text.splitlines()
    assert [line for line in lines if len(line) > WIDTH] == []
    assert [line for line in lines if CUT.search(line)] == []
    assert "<bool>" not in text
    envvars = [name for p in command.params for name in _envvars(p)]
    assert [name for name in envvars if name not in text] == []


def _envvars(param: Any) -> list[str]:
    envvar = param.envvar
    if envvar is None:
        return []
    return [envvar] if isinstance(envvar, str) else list(envvar)


def test_a_docstring_is_wrapped_to_the_width_not_at_its_line_breaks() -> None:
    text = _help(["tune"])
    paragraph = " ".join(text.split("\n\n")[2].split())
    assert paragraph.startswith("With --replay, the same search runs against a recorded table")
    first_lines = text.split("\n\n")[2].splitlines()
    assert all(len(line) > WIDTH - 15 for line in first_lines[:-1])
