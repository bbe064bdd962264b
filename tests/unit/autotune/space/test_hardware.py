import json
from pathlib import Path

import pytest

from autotune.conclusion.tuned_file import TunedIndex, TunedKind, is_index, tuned_for_kind
from autotune.core.contract import NodeInfo, NodeKind
from autotune.core.errors import RequestError
from autotune.space.hardware import load_profile, one_kind, select_kinds
from autotune.space.search_space import SPACES_DIR

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


def kind_of(profile_name: str, labels: dict[str, str] | None = None) -> NodeKind:
    profile = load_profile(PROFILES / profile_name)
    node = NodeInfo(
        node_id=profile_name, hostname="h", labels=labels or {}, cpus=8, gpus=1, slots=1
    )
    return NodeKind(profile=profile, nodes=[node])


def test_a_target_names_a_kind_by_fingerprint_saved_profile_or_node_label() -> None:
    a100, h200 = kind_of("a100.json", {"gpu": "a100"}), kind_of("h200x8.json")
    kinds = [a100, h200]
    assert select_kinds(kinds, None) == kinds
    assert select_kinds(kinds, h200.fingerprint) == [h200]
    assert select_kinds(kinds, str(PROFILES / "h200x8.json")) == [h200]
    assert select_kinds(kinds, "gpu=a100") == [a100]
    with pytest.raises(RequestError) as info:
        select_kinds(kinds, "gpu=t4")
    assert info.value.field == "target" and a100.fingerprint in info.value.rule


def test_a_job_runs_on_one_kind_the_target_or_the_only_one() -> None:
    a100, h200 = kind_of("a100.json"), kind_of("h200x8.json")
    assert one_kind([a100], None) == a100
    assert one_kind([a100, h200], h200.fingerprint) == h200
    with pytest.raises(RequestError) as info:
        one_kind([a100, h200], None)
    assert info.value.field == "target"
    assert a100.fingerprint in info.value.rule and h200.fingerprint in info.value.rule


def test_a_list_of_tuned_files_gives_the_machines_kind_or_names_the_kinds(tmp_path: Path) -> None:
    index = TunedIndex(
        kinds=[
            TunedKind(
                fingerprint="aaa", hardware="8 cores", study="s@aaa", tuned="../s@aaa/tuned.yaml"
            ),
            TunedKind(
                fingerprint="bbb", hardware="1 core", study="s@bbb", tuned="../s@bbb/tuned.yaml"
            ),
        ]
    )
    path = tmp_path / "s" / "tuned.yaml"
    path.parent.mkdir()
    path.write_text(index.to_yaml())
    assert is_index(path)
    assert tuned_for_kind(path, "bbb") == path.parent / "../s@bbb/tuned.yaml"
    with pytest.raises(RequestError) as info:
        tuned_for_kind(path, "ccc")
    assert "aaa (8 cores)" in info.value.rule and "bbb (1 core)" in info.value.rule
