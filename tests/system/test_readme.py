"""README.md runs as written: every shell and python block is run, in order, in one terminal
session (tests/readme_session.py), unless the line above it says why it is not.

The session runs in a copy of the checkout's tracked files, through the installed console
scripts (the venv's bin first on PATH), in a clean environment: no PYTHONPATH and not this
process's sys.path; HOME and the XDG directories in tmp_path. What the README says a user may
substitute is substituted: `AUTOTUNE_TRIALS` (a short budget), the three databases of the
service walk-through (fresh ones, dropped afterwards) and the ports 8000 and 5000 (free
ones). Installing is left aside: the copy's `.venv` is this checkout's, with its setup done.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import ADMIN_URL, REPO, postgres_unreachable
from tests.console_scripts import clean_environment
from tests.ports import free_port
from tests.readme_session import (
    RUN_LANGUAGES,
    SHELL_LANGUAGES,
    Session,
    copy_tracked_files,
    readme_blocks,
    substituted,
)

README = REPO / "README.md"
VENV = Path(sys.prefix)
DATABASES = ("autotune_jobs", "autotune_optuna", "autotune_mlflow")
README_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
DATA_LANGUAGES = ("yaml", "json", "text")
# What a user of each of the README's three uses runs; each must be in a block that runs.
DOCUMENTED_COMMANDS = (
    "make demo",
    "autotune tune my-request.yaml",
    "autotune.load(",
    "autotune report my-model",
    "make mlflow-ui",
    "autotune serve",
    "autotune submit",
    "/pareto",
    "autotune watch ",
    "export-weights models/digits.safetensors --seed 1",
    "autotune status $RETUNE --wait",
    "autotune report",
    "kill $SERVE_PID",
)


def test_every_block_runs_or_says_why_not() -> None:
    blocks = readme_blocks(README.read_text())
    for block in blocks:
        where = f"README.md line {block.line}"
        assert block.language in RUN_LANGUAGES + DATA_LANGUAGES, f"{where}: language?"
        if block.mark == "not run":
            assert block.mark_value, f"{where}: a block not run says why"
        if block.mark == "until Ctrl-C":
            assert block.language in SHELL_LANGUAGES, where
            assert str(block.mark_value).startswith("http://"), f"{where}: the URL it serves"
    run = "".join(block.text for block in blocks if block.runs)
    missing = [command for command in DOCUMENTED_COMMANDS if command not in run]
    assert not missing, f"not in a block the test runs: {missing}"
    assert "AUTOTUNE_TRIALS" in README.read_text()


def test_the_short_budget_the_readme_names_reaches_autotune_tune(tmp_path: Path) -> None:
    env = clean_environment(tmp_path / "home", AUTOTUNE_TRIALS="0")
    done = subprocess.run(
        [str(VENV / "bin" / "autotune"), "tune", str(REPO / "experiments/digits/request.yaml")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "AUTOTUNE_TRIALS" in done.stderr, done.stderr


# exclusive: the demo's latency bound is a bound of a quiet machine (on a busy one no
# configuration may meet it: exit 3, as the README says)
@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.exclusive
def test_the_readme_runs_as_written(tmp_path: Path) -> None:
    work = tmp_path / "checkout"
    copy_tracked_files(REPO, work)
    with_setup_done(work)
    home = tmp_path / "home"
    env = clean_environment(
        home,
        AUTOTUNE_TRIALS="3",
        **{f"XDG_{kind}_HOME": str(home / kind.lower()) for kind in ("CONFIG", "DATA", "CACHE")},
        XDG_STATE_HOME=str(home / "state"),
    )
    fresh = {name: f"{name}_{uuid.uuid4().hex[:10]}" for name in DATABASES}
    ports = {"8000": str(free_port()), "5000": str(free_port())}
    session = Session(work, env, tmp_path / "session")
    outputs = []
    try:
        with dropped_afterwards(list(fresh.values())):
            for block in readme_blocks(README.read_text()):
                if not block.runs:
                    continue
                block = dataclasses.replace(
                    block,
                    text=substituted(block.text, {**fresh, **ports}),
                    mark_value=substituted(block.mark_value or "", ports),
                )
                if block.mark == "until Ctrl-C":
                    session.serve_until_ctrl_c(block, str(block.mark_value), timeout_s=300)
                else:
                    outputs.append(session.run(block, timeout_s=900))
    finally:
        session.close()
    assert (work / "autotune-out" / "digits-cnn" / "tuned.yaml").is_file()
    assert (work / "autotune-out" / "my-model" / "tuned.yaml").is_file()
    assert any("accuracy of the tuned model:" in output for output in outputs)


def with_setup_done(work: Path) -> None:
    """The copy's `.venv` is this checkout's installed one, its setup stamps fresh, so that
    `make demo` and `make mlflow-ui` run their commands and install nothing."""
    (work / ".venv").mkdir()
    (work / ".venv" / "bin").symlink_to(VENV / "bin")
    for stamp in (".installed", ".installed-dev"):
        (work / ".venv" / stamp).touch()
    for target in ("demo", "mlflow-ui"):
        planned = subprocess.run(
            ["make", "-n", target], cwd=work, capture_output=True, text=True, check=True
        ).stdout
        assert "pip" not in planned and "venv" not in planned.replace(".venv/", ""), planned


@contextmanager
def dropped_afterwards(names: list[str]) -> Iterator[None]:
    """The README's walk-through creates these databases on its PostgreSQL server; they are
    dropped at the end, whatever happened."""
    import sqlalchemy

    if ADMIN_URL != README_POSTGRES:
        pytest.skip(f"the README's walk-through uses {README_POSTGRES}, not the tests' server")
    unreachable = postgres_unreachable(ADMIN_URL)
    if unreachable is not None:
        message = f"needs PostgreSQL at 127.0.0.1:5432: {unreachable}"
        if os.environ.get("AUTOTUNE_TEST_REQUIRE_POSTGRES") == "1":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    engine = sqlalchemy.create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        yield
    finally:
        with engine.connect() as connection:
            for name in names:
                connection.execute(sqlalchemy.text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        engine.dispose()
