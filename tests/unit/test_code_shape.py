"""The sources stay readable: no module over 500 lines, no function body over 60 (a Typer
command's long signature of options is not its body)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

MAX_MODULE_LINES = 500
MAX_BODY_LINES = 60


def sources() -> list[Path]:
    return sorted(p for root in ("autotune", "workers") for p in (REPO / root).rglob("*.py"))


def long_bodies(path: Path) -> list[str]:
    shown = path.relative_to(REPO) if path.is_relative_to(REPO) else path
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            assert node.end_lineno is not None
            lines = node.end_lineno - node.body[0].lineno + 1
            if lines > MAX_BODY_LINES:
                found.append(f"{shown}:{node.lineno} {node.name} ({lines})")
    return found


def test_no_module_is_over_500_lines() -> None:
    lengths = {p: len(p.read_text().splitlines()) for p in sources()}
    assert len(lengths) > 100
    assert [
        f"{p.relative_to(REPO)} ({n})" for p, n in lengths.items() if n > MAX_MODULE_LINES
    ] == []


def test_no_function_body_is_over_60_lines() -> None:
    assert [entry for path in sources() for entry in long_bodies(path)] == []


def test_a_long_body_is_found(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_BODY_LINES + 1))
    module = tmp_path / "long.py"
    module.write_text(f"def f(\n    a: int,\n) -> None:\n{body}\n")
    assert long_bodies(module) == [f"{module}:1 f ({MAX_BODY_LINES + 1})"]
