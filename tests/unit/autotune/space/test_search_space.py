import re
from pathlib import Path

import optuna
import pytest

from autotune.core.contract import ConfigValue, HardwareProfile, ModelInfo
from autotune.core.errors import SpaceError
from autotune.core.knobs import ENGINES, PRUNINGS, declared_values
from autotune.space.hardware import load_profile
from autotune.space.knob_rules import parameter_key
from autotune.space.search_space import (
    DIMENSION_NAME,
    SPACES_DIR,
    EffectiveSpace,
    effective_space,
    load_space,
    resolve_space_path,
)

PROFILES = SPACES_DIR / "profiles"
NO_OPENVINO_HINT = "active only when runtime.engine is openvino, which is not offered here"


def model_info(kind: str, activation_bytes: int | None = 1024) -> ModelInfo:
    return ModelInfo(
        kind=kind,
        sha256="0" * 64,
        n_samples=10,
        input_shape=[1, 8, 8],
        has_labels=True,
        parameter_bytes=4096,
        activation_bytes_per_sample=activation_bytes,
    )


@pytest.fixture(scope="module")
def cpu_profile() -> HardwareProfile:
    return load_profile(PROFILES / "cpu-only.json")


def effective(name: str, profile: HardwareProfile):
    path = resolve_space_path(name)
    return effective_space(load_space(path), profile, str(path))


def always_excluded(space: EffectiveSpace) -> dict[tuple[str, ConfigValue | None], str]:
    """The exclusions that hold whatever else is chosen."""
    return {(e.dimension, e.value): e.reason for e in space.excluded if not e.when}


@pytest.mark.parametrize("path", sorted(SPACES_DIR.glob("*.yaml")), ids=lambda p: p.name)
def test_every_bundled_space_loads_for_every_profile(path: Path) -> None:
    for profile_path in PROFILES.glob("*.json"):
        space = effective_space(load_space(path), load_profile(profile_path), str(path))
        assert space.dimensions


def test_cpu_profile_excludes_gpu_values_with_reasons(cpu_profile: HardwareProfile) -> None:
    space = effective("default.yaml", cpu_profile)
    values = space.choices()
    assert "fp16" not in values["precision.mode"]
    assert "bf16" in values["precision.mode"]  # this profile's CPU has avx512_bf16
    assert max(values["runtime.threads"]) == cpu_profile.cpu_cores
    reasons = always_excluded(space)
    assert "fp16 needs CUDA" in reasons[("precision.mode", "fp16")]


def test_an_exclusion_gives_each_of_its_reasons_once(cpu_profile: HardwareProfile) -> None:
    """fp16 is out for every engine; the three ONNX Runtime contexts that refuse it for the
    same reason (a reason that itself holds '; ') give that reason once."""
    reasons = always_excluded(effective("default.yaml", cpu_profile))
    fp16 = reasons[("precision.mode", "fp16")]
    assert fp16.count("is not supported by onnxruntime's CPUExecutionProvider") == 1
    compile_mode = reasons[("runtime.compile_mode", "reduce-overhead")]
    assert compile_mode.count("captures CUDA graphs") == 1


def test_cpu_flags_gate_bf16_and_int8(cpu_profile: HardwareProfile) -> None:
    avx2_only = cpu_profile.model_copy(update={"cpu_flags": ["avx2"]})
    space = effective("default.yaml", avx2_only)
    assert space.choices()["precision.mode"] == ["fp32", "int8_dynamic", "int8_static"]
    reasons = {e.value: e.reason for e in space.excluded}
    assert "bf16 on cpu needs cpu.bf16" in reasons["bf16"]
    plain = cpu_profile.model_copy(update={"cpu_flags": ["sse4_2"]})
    assert effective("default.yaml", plain).choices()["precision.mode"] == ["fp32"]
    reasons = {e.value: e.reason for e in effective("default.yaml", plain).excluded}
    assert "int8_static on cpu needs cpu.avx2" in reasons["int8_static"]


def test_h200_node_gets_every_gpu_family() -> None:
    space = effective("default.yaml", load_profile(PROFILES / "h200x8.json"))
    values = space.choices()
    assert {"fp16", "fp8", "bf16"} <= set(values["precision.mode"])
    assert "semi_structured_2_4" in values["prune.method"]
    assert {"cuda", "tensorrt"} <= set(values["runtime.provider"])
    assert values["shard.tensor_parallel"] == [1, 2, 4, 8]
    assert values["shard.data_parallel"] == [1, 2, 4, 8]
    assert values["runtime.threads"] == [1, 2, 4, 8, 16, 32, 64]
    assert space.baseline()["runtime.device"] == "cuda"
    # the profile was saved before engines' own probes were recorded: no OpenVINO in it
    assert always_excluded(space) == {
        ("runtime.engine", "openvino"): "runtime.engine=openvino needs openvino",
        ("runtime.ov_performance_hint", None): NO_OPENVINO_HINT,
    }


def test_a_node_without_openvino_gets_none_of_its_options(cpu_profile: HardwareProfile) -> None:
    """OpenVINO's own dimension is active only where OpenVINO runs: a node whose probe found
    no OpenVINO is offered neither the engine nor its options."""
    with_openvino = effective(
        "default.yaml", cpu_profile.model_copy(update={"engines": ["openvino"]})
    )
    assert "openvino" in with_openvino.choices()["runtime.engine"]
    assert "runtime.ov_performance_hint" in with_openvino.choices()
    space = effective("default.yaml", cpu_profile.model_copy(update={"engines": []}))
    assert "openvino" not in space.choices()["runtime.engine"]
    assert "runtime.ov_performance_hint" not in {d.name for d in space.dimensions}
    assert always_excluded(space)[("runtime.ov_performance_hint", None)] == NO_OPENVINO_HINT


def test_ampere_gpu_has_no_fp8_and_no_sharding() -> None:
    space = effective("nvidia-gpu.yaml", load_profile(PROFILES / "a100.json"))
    values = space.choices()
    assert "fp8" not in values["precision.mode"] and "bf16" in values["precision.mode"]
    assert "semi_structured_2_4" in values["prune.method"]
    reasons = always_excluded(space)
    assert "fp8 needs CUDA with compute capability >= 8.9" in reasons[("precision.mode", "fp8")]
    assert reasons[("shard.tensor_parallel", None)] == "needs multi_gpu"


def test_cpu_only_machine_gets_the_cpu_families(cpu_profile: HardwareProfile) -> None:
    space = effective("default.yaml", cpu_profile)
    values = space.choices()
    assert {"bf16", "int8_dynamic", "int8_static"} <= set(values["precision.mode"])
    assert {"torch_eager", "torch_compile", "onnxruntime"} == set(values["runtime.engine"])
    assert "structured" in values["prune.method"]
    reasons = always_excluded(space)
    assert "fp8 needs CUDA with compute capability >= 8.9" in reasons[("precision.mode", "fp8")]
    assert reasons[("shard.tensor_parallel", None)] == "needs multi_gpu"
    assert (
        "2:4 sparsity is accelerated only on CUDA"
        in reasons[("prune.method", "semi_structured_2_4")]
    )


def test_sdpa_backends_follow_the_gpu() -> None:
    h200 = effective("transformer.yaml", load_profile(PROFILES / "h200x8.json"))
    backends = next(d for d in h200.dimensions if d.name == "attention.sdpa_backend")
    assert backends.values == ["auto", "math", "flash", "efficient", "cudnn"]
    cpu = effective("transformer.yaml", load_profile(PROFILES / "cpu-only.json"))
    backends = next(d for d in cpu.dimensions if d.name == "attention.sdpa_backend")
    assert backends.values == ["auto", "math"]


def test_batch_sizes_stop_where_memory_ends(cpu_profile: HardwareProfile) -> None:
    path = resolve_space_path("default.yaml")
    huge = model_info("torch", activation_bytes=cpu_profile.memory_mb * 2**20 // 16)
    space = effective_space(load_space(path), cpu_profile, str(path), model=huge)
    batch = next(d for d in space.dimensions if d.name == "batch.size")
    assert batch.values == [1, 2, 4, 8]  # 16 samples would need all memory, headroom is 0.8
    reasons = always_excluded(space)
    assert reasons[("batch.size", 16)].startswith("exceeds batch_memory")


def test_baseline_is_the_unmodified_model(cpu_profile: HardwareProfile) -> None:
    baseline = effective("default.yaml", cpu_profile).baseline()
    assert baseline == {
        "runtime.engine": "torch_eager",
        "runtime.device": "cpu",
        "runtime.threads": cpu_profile.cpu_cores,
        "batch.size": 1,
        "precision.mode": "fp32",
        "prune.method": "none",
    }


def test_sampling_respects_conditions(cpu_profile: HardwareProfile) -> None:
    space = effective("default.yaml", cpu_profile)
    study = optuna.create_study(
        directions=["minimize"], sampler=optuna.samplers.RandomSampler(seed=1)
    )
    seen_methods = set()
    for _ in range(60):
        trial = study.ask()
        config = space.sample(trial)
        seen_methods.add(config["prune.method"])
        assert ("prune.ratio" in config) == (config["prune.method"] in {"magnitude", "structured"})
        assert ("runtime.graph_opt" in config) == (config["runtime.engine"] == "onnxruntime")
        assert ("runtime.compile_mode" in config) == (config["runtime.engine"] == "torch_compile")
        if "prune.ratio" in config:
            assert 0.1 <= config["prune.ratio"] <= 0.6
        assert config == {parameter_key(k): v for k, v in trial.params.items()}
        assert space.params_of(config) == trial.params
        if config["runtime.engine"] == "onnxruntime":
            assert config["precision.mode"] != "bf16"
        else:
            assert config["precision.mode"] != "int8_static"
        study.tell(trial, 1.0)
    assert seen_methods == {"none", "magnitude", "structured"}


def test_enqueued_baseline_is_sampled_exactly(cpu_profile: HardwareProfile) -> None:
    space = effective("default.yaml", cpu_profile)
    study = optuna.create_study(directions=["minimize"])
    study.enqueue_trial(space.params_of(space.baseline()))
    assert space.sample(study.ask()) == space.baseline()


def test_the_space_produces_exactly_what_sampling_it_can_give(
    cpu_profile: HardwareProfile,
) -> None:
    space = effective("default.yaml", cpu_profile)
    baseline = space.baseline()
    pruned = {**baseline, "prune.method": "magnitude", "prune.ratio": 0.3}
    assert space.produces(baseline)
    assert space.produces(pruned)
    assert not space.produces({**baseline, "prune.ratio": 0.3})  # inactive without a method
    assert not space.produces({**pruned, "prune.ratio": 0.9})  # outside its range
    assert not space.produces({**baseline, "batch.size": 3})  # not one of its values
    assert not space.produces({**baseline, "colour.name": "red"})  # a key the space lacks
    missing = dict(baseline)
    del missing["batch.size"]
    assert not space.produces(missing)


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
    onnx = effective_space(load_space(path), cpu_profile, str(path), model=model_info("onnx"))
    engine = next(d for d in onnx.dimensions if d.name == "runtime.engine")
    assert engine.values == ["onnxruntime"]
    assert onnx.baseline()["runtime.engine"] == "onnxruntime"
    torch_model = model_info("torch")
    torch_space = effective_space(load_space(path), cpu_profile, str(path), model=torch_model)
    assert torch_space.baseline()["runtime.engine"] == "torch_eager"


def test_slots_share_the_cores(cpu_profile: HardwareProfile) -> None:
    path = resolve_space_path("cpu.yaml")
    share = max(1, cpu_profile.cpu_cores // 2)
    shared = effective_space(load_space(path), cpu_profile, str(path), cores_per_slot=share)
    threads = next(d for d in shared.dimensions if d.name == "runtime.threads")
    assert threads.values == [share]
    assert shared.baseline()["runtime.threads"] == threads.values[0]


def test_a_knob_dimension_without_values_searches_every_declared_value(tmp_path: Path) -> None:
    path = tmp_path / "declared.yaml"
    path.write_text(
        "name: declared\n"
        "dimensions:\n"
        "  - {name: runtime.engine, baseline: torch_eager}\n"
        "  - {name: runtime.graph_opt, baseline: all, when: {runtime.engine: [onnxruntime]}}\n"
        "  - {name: prune.method, baseline: none}\n"
    )
    dimensions = {d.name: d for d in load_space(path).dimensions}
    assert dimensions["runtime.engine"].values == list(ENGINES)
    assert dimensions["runtime.graph_opt"].values == ["disable", "basic", "extended", "all"]
    assert dimensions["prune.method"].values == list(PRUNINGS)
    assert declared_values("batch.size") is None  # no knob declares it: values are required


def test_a_provider_option_is_searched_only_with_its_provider(tmp_path: Path) -> None:
    """A provider's option is a dimension like an engine option: a flag takes its declared
    false and true, and a value away from the default is offered only with that provider."""
    path = tmp_path / "providers.yaml"
    path.write_text(
        "name: providers\n"
        "dimensions:\n"
        "  - {name: runtime.engine, values: [onnxruntime], baseline: onnxruntime}\n"
        "  - {name: runtime.provider, values: [cuda, tensorrt], baseline: cuda}\n"
        "  - {name: runtime.provider.tensorrt.trt_fp16_enable, baseline: false}\n"
    )
    space = effective_space(load_space(path), load_profile(PROFILES / "h200x8.json"), str(path))
    assert space.choices()["runtime.provider.tensorrt.trt_fp16_enable"] == [False, True]
    [dropped] = space.excluded
    assert (dropped.dimension, dropped.value, dropped.when) == (
        "runtime.provider.tensorrt.trt_fp16_enable",
        True,
        {"runtime.provider": "cuda"},
    )
    assert dropped.reason == (
        "runtime.provider.tensorrt.trt_fp16_enable=true is an option of "
        "runtime.provider=tensorrt; a session of runtime.provider=cuda does not use it"
    )


def test_an_open_provider_option_lists_its_values_and_each_is_type_checked(
    tmp_path: Path, cpu_profile: HardwareProfile
) -> None:
    dimension = "runtime.provider.openvino.device_type"
    assert declared_values(dimension) is None  # a device name: no list to search by default
    path = tmp_path / "openvino.yaml"
    path.write_text(
        "name: ov\n"
        "dimensions:\n"
        "  - {name: runtime.engine, values: [onnxruntime], baseline: onnxruntime}\n"
        "  - {name: runtime.provider, values: [openvino], baseline: openvino}\n"
        f"  - {{name: {dimension}, baseline: CPU}}\n"
    )
    with pytest.raises(SpaceError, match="give exactly one of 'values' or 'range'"):
        load_space(path)
    path.write_text(
        path.read_text().replace("baseline: CPU}", "values: [CPU, GPU, 1], baseline: CPU}")
    )
    providers = [*cpu_profile.onnxruntime_providers, "OpenVINOExecutionProvider"]
    profile = cpu_profile.model_copy(update={"onnxruntime_providers": providers})
    space = effective_space(load_space(path), profile, str(path))
    assert space.choices()[dimension] == ["CPU", "GPU"]
    assert always_excluded(space)[(dimension, 1)] == (
        f"{dimension}=1 is refused by OpenVinoOptions.device_type: Input should be a valid string"
    )


def test_every_engine_option_can_name_a_dimension() -> None:
    keys = [option.key for engine in ENGINES.values() for option in engine.options]
    assert "runtime.provider.openvino.device_type" in keys
    assert [key for key in keys if not re.fullmatch(DIMENSION_NAME, key)] == []


def test_the_gpu_space_searches_tensorrts_fp16_kernels_where_tensorrt_runs(
    cpu_profile: HardwareProfile,
) -> None:
    dimension = "runtime.provider.tensorrt.trt_fp16_enable"
    gpu = effective("nvidia-gpu.yaml", load_profile(PROFILES / "h200x8.json"))
    assert gpu.choices()[dimension] == [False, True]
    assert always_excluded(effective("nvidia-gpu.yaml", cpu_profile))[(dimension, None)] == (
        "active only when runtime.provider is tensorrt, which is not offered here"
    )
