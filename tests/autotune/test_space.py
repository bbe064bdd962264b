from pathlib import Path

import optuna
import pytest

from autotune.errors import SpaceError
from autotune.hardware import HardwareProfile, load_profile
from autotune.space import (
    SPACES_DIR,
    effective_space,
    load_space,
    resolve_space_path,
)

PROFILES = SPACES_DIR / "profiles"


@pytest.fixture(scope="module")
def cpu_profile() -> HardwareProfile:
    return load_profile(PROFILES / "cpu-only.json")


def effective(name: str, profile: HardwareProfile):
    path = resolve_space_path(name)
    return effective_space(load_space(path), profile, str(path))


@pytest.mark.parametrize("path", sorted(SPACES_DIR.glob("*.yaml")), ids=lambda p: p.name)
def test_every_bundled_space_loads_for_every_profile(path: Path) -> None:
    for profile_path in PROFILES.glob("*.json"):
        space = effective_space(load_space(path), load_profile(profile_path), str(path))
        assert space.dimensions


def test_cpu_profile_excludes_gpu_values_with_reasons(cpu_profile: HardwareProfile) -> None:
    space = effective("default.yaml", cpu_profile)
    values = {d.name: d.values for d in space.dimensions}
    assert "fp16" not in values["precision.mode"]
    assert "bf16" in values["precision.mode"]  # this profile's CPU has avx512_bf16
    assert max(values["runtime.threads"]) == cpu_profile.cpu_cores
    reasons = {(e.dimension, e.value): e.reason for e in space.excluded}
    assert reasons[("precision.mode", "fp16")] == "needs cuda"


def test_cpu_without_bf16_drops_bf16(cpu_profile: HardwareProfile) -> None:
    plain = cpu_profile.model_copy(update={"cpu_flags": ["avx2"]})
    space = effective("default.yaml", plain)
    precision = next(d for d in space.dimensions if d.name == "precision.mode")
    assert precision.values == ["fp32", "int8_dynamic"]


def test_h200_profile_keeps_fp16_and_all_threads() -> None:
    space = effective("default.yaml", load_profile(PROFILES / "h200x8.json"))
    values = {d.name: d.values for d in space.dimensions}
    assert "fp16" in values["precision.mode"]
    assert values["runtime.threads"] == [1, 2, 4, 8, 16, 32, 64]


def test_baseline_is_the_unmodified_model(cpu_profile: HardwareProfile) -> None:
    baseline = effective("default.yaml", cpu_profile).baseline()
    assert baseline == {
        "batch.size": 1,
        "precision.mode": "fp32",
        "prune.method": "none",
        "runtime.engine": "torch_eager",
        "runtime.threads": cpu_profile.cpu_cores,
    }


def test_sampling_respects_conditions(cpu_profile: HardwareProfile) -> None:
    space = effective("default.yaml", cpu_profile)
    study = optuna.create_study(
        directions=["minimize"], sampler=optuna.samplers.RandomSampler(seed=1)
    )
    seen_methods = set()
    for _ in range(40):
        trial = study.ask()
        config = space.sample(trial)
        seen_methods.add(config["prune.method"])
        assert ("prune.ratio" in config) == (config["prune.method"] == "magnitude")
        if "prune.ratio" in config:
            assert 0.1 <= config["prune.ratio"] <= 0.7
        assert config == trial.params
        study.tell(trial, 1.0)
    assert seen_methods == {"none", "magnitude"}


def test_enqueued_baseline_is_sampled_exactly(cpu_profile: HardwareProfile) -> None:
    space = effective("default.yaml", cpu_profile)
    study = optuna.create_study(directions=["minimize"])
    study.enqueue_trial(space.baseline())
    assert space.sample(study.ask()) == space.baseline()


@pytest.mark.parametrize(
    ("yaml_text", "fragment"),
    [
        ("name: x\ndimensions: []\n", "at least 1"),
        ("name: x\ndimensions:\n  - {name: a.b, values: [1], colour: red}\n", "Extra inputs"),
        ("name: x\ndimensions:\n  - {name: a.b, range: {low: 2, high: 1}}\n", "empty range"),
        (
            "name: x\ndimensions:\n  - {name: a.b, values: [1], requires: [quantum]}\n",
            "unknown capability",
        ),
        ("name: x\ndimensions:\n  - {name: a.b}\n", "exactly one"),
        (
            "name: x\ndimensions:\n  - {name: a.b, values: [1], when: {c.d: [1]}}\n",
            "earlier dimension",
        ),
        (
            "name: x\ndimensions:\n  - {name: a.b, values: [1]}\n  - {name: a.b, values: [2]}\n",
            "declared twice",
        ),
    ],
)
def test_bad_space_files_fail_clearly(tmp_path: Path, yaml_text: str, fragment: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml_text)
    with pytest.raises(SpaceError) as info:
        load_space(path)
    assert fragment in info.value.rule
    assert info.value.field.startswith("bad.yaml")


def test_unknown_space_name() -> None:
    with pytest.raises(SpaceError, match="existing space file"):
        resolve_space_path("no-such-space.yaml")


def test_model_kind_gates_the_engine(cpu_profile: HardwareProfile) -> None:
    path = resolve_space_path("default.yaml")
    onnx = effective_space(load_space(path), cpu_profile, str(path), model_kind="onnx")
    engine = next(d for d in onnx.dimensions if d.name == "runtime.engine")
    assert engine.values == ["onnxruntime"]
    assert onnx.baseline()["runtime.engine"] == "onnxruntime"
    torch_space = effective_space(load_space(path), cpu_profile, str(path), model_kind="torch")
    assert torch_space.baseline()["runtime.engine"] == "torch_eager"
