"""OpenVINO's int8, declared: precision.mode=int8_static runs on runtime.engine=openvino where
the CPU has AVX2, with precision.fallback and the static int8 quantizer settings (but entropy
calibration, which NNCF lacks); OpenVINO's other modes keep no node in float and take no static
int8 setting, and int8_dynamic is not OpenVINO's. cpu.yaml searches the settings on openvino."""

from __future__ import annotations

import pytest

from autotune.core.contract import ConfigValue
from autotune.core.knobs import Target, supports, variant_key
from autotune.core.knobs.config import parse_config
from autotune.core.knobs.engines import STATIC_INT8_OPTIONS
from autotune.space.hardware import load_profile
from autotune.space.search_space import SPACES_DIR, effective_space, load_space

OV_INT8: dict[str, ConfigValue] = {"runtime.engine": "openvino", "precision.mode": "int8_static"}
CPU = frozenset({"openvino", "cpu.avx2", "cpu.bf16"})
# Each static int8 setting NNCF applies, away from its default.
NNCF_SETTINGS: dict[str, ConfigValue] = {
    "precision.calibration": "percentile",
    "precision.per_channel": False,
    "precision.symmetric_activations": True,
    "precision.op_types": "matmul_only",
}


def refusal(config: dict[str, ConfigValue], capabilities: frozenset[str] = CPU) -> str | None:
    return supports(parse_config(config, "onnx"), Target(capabilities, "onnx"))


@pytest.mark.parametrize("fallback", [0, 1, 8])
def test_int8_static_runs_on_openvino_with_any_fallback(fallback: int) -> None:
    assert refusal({**OV_INT8, "precision.fallback": fallback}) is None


def test_int8_static_on_openvino_needs_avx2() -> None:
    reason = refusal(OV_INT8, CPU - {"cpu.avx2"})
    assert reason is not None and "int8_static" in reason and "cpu.avx2" in reason


def test_int8_dynamic_is_not_openvinos() -> None:
    reason = refusal({"runtime.engine": "openvino", "precision.mode": "int8_dynamic"})
    assert reason is not None and "precision.mode=int8_dynamic" in reason


@pytest.mark.parametrize("mode", ["fp32", "bf16"])
def test_fallback_is_refused_for_the_modes_openvino_applies_itself(mode: str) -> None:
    reason = refusal(
        {"runtime.engine": "openvino", "precision.mode": mode, "precision.fallback": 1}
    )
    assert reason is not None
    assert "precision.fallback=1" in reason and f"not {mode}" in reason


def test_each_fallback_is_a_variant_of_its_own() -> None:
    keys = {variant_key({**OV_INT8, "precision.fallback": k}) for k in (0, 1, 2)}
    assert len(keys) == 3
    onnxruntime = {**OV_INT8, "runtime.engine": "onnxruntime"}
    assert variant_key(OV_INT8) != variant_key(onnxruntime)


@pytest.mark.parametrize(("key", "value"), NNCF_SETTINGS.items())
def test_each_static_int8_setting_runs_on_openvino_as_a_variant_of_its_own(
    key: str, value: ConfigValue
) -> None:
    config = {**OV_INT8, key: value}
    assert refusal(config) is None
    assert refusal({**config, "precision.fallback": 2}) is None
    assert variant_key(config) != variant_key(OV_INT8)
    assert variant_key(config) != variant_key({**config, "runtime.engine": "onnxruntime"})


def test_entropy_calibration_is_refused_with_the_reason() -> None:
    reason = refusal({**OV_INT8, "precision.calibration": "entropy"})
    assert reason is not None
    assert reason.startswith("precision.calibration=entropy: runtime.engine=openvino")
    assert "NNCF has no KL-divergence (entropy) calibration" in reason
    assert refusal({**OV_INT8, "precision.calibration": "minmax"}) is None


@pytest.mark.parametrize(("key", "value"), NNCF_SETTINGS.items())
@pytest.mark.parametrize("mode", ["fp32", "bf16"])
def test_a_static_int8_setting_is_refused_for_the_modes_openvino_applies_itself(
    key: str, value: ConfigValue, mode: str
) -> None:
    reason = refusal({"runtime.engine": "openvino", "precision.mode": mode, key: value})
    shown = str(value).lower() if isinstance(value, bool) else value
    assert reason is not None and f"{key}={shown}" in reason
    assert f"precision.mode=int8_static only, not {mode}" in reason
    defaults = {o.key: o.default for o in STATIC_INT8_OPTIONS}
    assert refusal({"runtime.engine": "openvino", "precision.mode": mode, **defaults}) is None


def test_cpu_yaml_searches_the_settings_on_openvino_but_entropy() -> None:
    profile = load_profile(SPACES_DIR / "profiles" / "cpu-only.json")
    profile = profile.model_copy(update={"engines": ["openvino"]})
    space = effective_space(load_space(SPACES_DIR / "cpu.yaml"), profile, "cpu.yaml")
    for key in NNCF_SETTINGS:
        values = [d.values for d in space.dimensions if d.name == key and d.active(OV_INT8)]
        default = next(o.default for o in STATIC_INT8_OPTIONS if o.key == key)
        assert len(values) == 1 and values[0] is not None, (key, values)
        assert default in values[0] and NNCF_SETTINGS[key] in values[0]
        assert "entropy" not in values[0]
    entropy = [
        e for e in space.excluded if e.dimension == "precision.calibration" and e.value == "entropy"
    ]
    assert len(entropy) == 1 and "NNCF has no KL-divergence" in entropy[0].reason
    assert entropy[0].when.get("runtime.engine") == "openvino"
