"""Where the service looks for a trusted entry point before it answers 202: where the job's
runner will import it from (the server's working directory, then the models root, then
sys.path), whatever put the server's process on its sys.path."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune.core.errors import RequestError
from autotune.core.model_files import resolve_entry_point
from autotune.requests.request import parse_request
from autotune.service.jobs import JobDraft
from autotune.service.submission import prepare_job
from autotune.service.tokens import Principal
from tests.service_support import sqlite_settings

PACKAGE = "served_here"
ALICE = Principal(token_id=1, name="alice", team=None)


@pytest.fixture
def working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The server's working directory (`tmp_path`, the fixture of these tests), on no entry
    of sys.path: as under the `autotune` console script, not pytest or `python -m`."""
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    yield tmp_path
    for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
        del sys.modules[name]


def write_module(root: Path, source: str) -> None:
    (root / PACKAGE).mkdir(parents=True)
    (root / PACKAGE / "__init__.py").write_text("")
    (root / PACKAGE / "nets.py").write_text(source)


def submit(settings_path: Path, model: str, data: str) -> JobDraft:
    settings = sqlite_settings(settings_path, trusted_modules=(PACKAGE,))
    request = {"name": "lookup", "model": {"entry_point": model}, "data": {"entry_point": data}}
    return prepare_job(request, ALICE, settings)


def test_a_trusted_module_in_the_servers_working_directory_is_accepted(
    working_directory: Path,
) -> None:
    write_module(working_directory, "def build():\n    return 'here'\n\ndef data():\n    pass\n")
    draft = submit(working_directory, f"{PACKAGE}.nets:build", f"{PACKAGE}.nets:data")

    python_path = parse_request(draft.request).workload(Path(draft.base_dir)).python_path
    assert resolve_entry_point(f"{PACKAGE}.nets:build", python_path, "model.entry_point")() == (
        "here"
    )


def test_the_check_reads_the_module_the_runner_imports_when_two_have_its_name(
    working_directory: Path,
) -> None:
    """The working directory comes before the models root, for the check as for the import."""
    write_module(working_directory, "def build():\n    return 'here'\n\ndef data():\n    pass\n")
    write_module(working_directory / "models", "def other():\n    pass\n")
    submit(working_directory, f"{PACKAGE}.nets:build", f"{PACKAGE}.nets:data")
    with pytest.raises(RequestError) as info:
        submit(working_directory, f"{PACKAGE}.nets:other", f"{PACKAGE}.nets:data")
    assert info.value.field == "model.entry_point"
    assert "has no attribute 'other'" in info.value.rule


def test_a_trusted_module_found_nowhere_names_where_it_was_looked_for(
    working_directory: Path,
) -> None:
    with pytest.raises(RequestError) as info:
        submit(working_directory, f"{PACKAGE}.nets:build", f"{PACKAGE}.nets:data")
    assert info.value.field == "model.entry_point"
    assert "working directory, under its models root or among" in info.value.rule
