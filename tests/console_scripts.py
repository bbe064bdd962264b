"""The installed console scripts as a user runs them: the environment's bin directory on PATH,
and nothing of the test process's own Python setup."""

from __future__ import annotations

import os
import sys
from pathlib import Path

BIN = Path(sys.executable).parent


def clean_environment(home: Path, **variables: str) -> dict[str, str]:
    """The console scripts on PATH and nothing of this test process's Python setup."""
    home.mkdir(exist_ok=True)
    path = os.pathsep.join([str(BIN), "/usr/local/bin", "/usr/bin", "/bin"])
    return {"PATH": path, "HOME": str(home), "LANG": "C.UTF-8", **variables}
