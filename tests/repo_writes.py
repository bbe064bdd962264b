"""Which files appeared in the repository while the tests ran: tests write only under their
temporary directories, never into the clone (an MLflow store defaulting to `./mlruns`, a
tuning's `autotune-out/`, a cache in the working directory)."""

from __future__ import annotations

import os
from pathlib import Path

# Tool state that is not the tests' doing: the virtualenv, bytecode, linters' and pytest's
# caches, the editable install's metadata, version control.
SKIPPED_DIRS = frozenset(
    {
        ".git",
        ".venv",
        "venv",
        "__pycache__",
        ".pytest_cache",
        ".mypy_cache",
        ".ruff_cache",
        ".import_linter_cache",
    }
)
SKIPPED_SUFFIXES = (".egg-info",)
# Caches the code keeps in the repository on purpose (gitignored): the digits example's
# trained weights, shared by every process on the machine (experiments/digits/model.py).
ALLOWED = ("experiments/digits/.cache/",)


def snapshot(root: Path) -> frozenset[str]:
    """Every file under `root` (relative, `/`-separated), tool state left out."""
    found: set[str] = set()
    for directory, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS and not d.endswith(SKIPPED_SUFFIXES)]
        base = Path(directory).relative_to(root)
        for name in files:
            found.add((base / name).as_posix())
    return frozenset(found)


def new_files(before: frozenset[str], after: frozenset[str]) -> list[str]:
    """Files in `after` that were not in `before`, except the allowed caches."""
    return sorted(p for p in after - before if not p.startswith(ALLOWED))


def describe(paths: list[str], limit: int = 30) -> str:
    shown = "\n  ".join(paths[:limit])
    more = f"\n  ... and {len(paths) - limit} more" if len(paths) > limit else ""
    return (
        f"{len(paths)} file(s) appeared in the repository during the test session; tests "
        f"must write only under tmp_path (a default of the current directory, such as "
        f"MLflow's ./mlruns, is the usual cause; files another process made during the run "
        f"show up here too):\n  {shown}{more}"
    )
