import json
from pathlib import Path

import pytest

from autotune.errors import RequestError
from autotune.hardware import load_profile
from autotune.space import SPACES_DIR

PROFILES = SPACES_DIR / "profiles"


def test_saved_profiles_give_expected_capabilities() -> None:
    h200 = load_profile(PROFILES / "h200x8.json").capabilities()
    assert {"cuda", "cuda.fp8", "multi_gpu", "ort.tensorrt", "cpu.amx"} <= h200
    a100 = load_profile(PROFILES / "a100.json").capabilities()
    assert "cuda.bf16" in a100 and "cuda.fp8" not in a100 and "multi_gpu" not in a100


def test_fingerprint_ignores_hostname_but_not_hardware() -> None:
    profile = load_profile(PROFILES / "a100.json")
    renamed = profile.model_copy(update={"hostname": "elsewhere"})
    assert renamed.fingerprint == profile.fingerprint
    bigger = profile.model_copy(update={"cpu_cores": profile.cpu_cores * 2})
    assert bigger.fingerprint != profile.fingerprint


def test_bad_profile_names_the_field(tmp_path: Path) -> None:
    raw = json.loads((PROFILES / "a100.json").read_text())
    raw["cpu_cores"] = 0
    path = tmp_path / "p.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(RequestError) as info:
        load_profile(path)
    assert info.value.field == "hardware.cpu_cores"
