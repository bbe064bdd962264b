"""The static int8 quantizer's settings (precision.calibration, precision.per_channel,
precision.symmetric_activations, precision.op_types), declared: parsed, refused away from
their defaults anywhere but onnxruntime's int8_static, part of the variant key, and
dimensions of the CPU spaces that the designed set leaves at their defaults."""

from __future__ import annotations

import pytest

from autotune.core.contract import ConfigValue
from autotune.core.errors import Unsupported
from autotune.core.knobs import Target, supports, variant_key
from autotune.core.knobs.config import parse_config
from autotune.core.knobs.engines import STATIC_INT8_OPTIONS
from autotune.space.hardware import load_profile
from autotune.space.search_space import SPACES_DIR, effective_space, load_space
from autotune.strategies.designed import designed_configs

ORT_STATIC: dict[str, ConfigValue] = {
    "runtime.engine": "onnxruntime",
    "precision.mode": "int8_static",
}
CPU = Target(frozenset({"cpu.avx2", "ort.cpu", "torch.compile"}), "onnx")
# Each setting away from its default.
CHOSEN: dict[str, ConfigValue] = {
    "precision.calibration": "entropy",
    "precision.per_channel": False,
    "precision.symmetric_activations": True,
    "precision.op_types": "matmul_only",
}


def test_every_setting_is_declared_with_its_default() -> None:
    assert {o.key: o.default for o in STATIC_INT8_OPTIONS} == {
        "precision.calibration": "minmax",
        "precision.per_channel": True,
        "precision.symmetric_activations": False,
        "precision.op_types": "all",
    }


@pytest.mark.parametrize(("key", "value"), CHOSEN.items())
def test_each_setting_names_another_variant(key: str, value: ConfigValue) -> None:
    parsed = parse_config({**ORT_STATIC, key: value}, "onnx")
    assert parsed.variant_id != parse_config(ORT_STATIC, "onnx").variant_id
    assert f"{key}={value}" in parsed.variant_id
    assert variant_key({**ORT_STATIC, key: value}) == parsed.variant_id
    assert supports(parsed, CPU) is None


def test_a_default_spelled_out_names_the_same_variant() -> None:
    defaults = {o.key: o.default for o in STATIC_INT8_OPTIONS}
    assert variant_key({**ORT_STATIC, **defaults}) == variant_key(ORT_STATIC)
    spelled = parse_config({**ORT_STATIC, **defaults}, "onnx")
    assert spelled.variant_id == parse_config(ORT_STATIC, "onnx").variant_id


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("precision.calibration", "kl"),
        ("precision.per_channel", 1),
        ("precision.symmetric_activations", "yes"),
        ("precision.op_types", "conv_only"),
    ],
)
def test_a_bad_value_is_refused_by_name(key: str, value: ConfigValue) -> None:
    with pytest.raises(Unsupported, match=f"{key}="):
        parse_config({**ORT_STATIC, key: value}, "onnx")


@pytest.mark.parametrize(("key", "value"), CHOSEN.items())
@pytest.mark.parametrize("mode", ["fp32", "int8_dynamic"])
def test_a_setting_is_refused_for_another_mode_on_onnxruntime(
    key: str, value: ConfigValue, mode: str
) -> None:
    config = {**ORT_STATIC, "precision.mode": mode, key: value}
    refusal = supports(parse_config(config, "onnx"), CPU)
    shown = str(value).lower() if isinstance(value, bool) else value
    assert refusal is not None
    assert f"{key}={shown}" in refusal
    assert f"precision.mode=int8_static only, not {mode}" in refusal


@pytest.mark.parametrize(("key", "value"), CHOSEN.items())
def test_a_setting_is_refused_on_another_engine(key: str, value: ConfigValue) -> None:
    config = {"runtime.engine": "torch_eager", "precision.mode": "int8_dynamic", key: value}
    refusal = supports(parse_config(config, "torch"), Target(CPU.capabilities, "torch"))
    assert refusal is not None and key in refusal and "does not apply it" in refusal


def test_defaults_are_accepted_for_any_mode() -> None:
    defaults = {o.key: o.default for o in STATIC_INT8_OPTIONS}
    for mode in ("fp32", "int8_dynamic", "int8_static"):
        config = {**ORT_STATIC, "precision.mode": mode, **defaults}
        assert supports(parse_config(config, "onnx"), CPU) is None


@pytest.mark.parametrize("space", ["cpu.yaml", "quick-cpu.yaml"])
def test_the_spaces_search_them_for_static_int8_and_design_at_the_defaults(space: str) -> None:
    profile = load_profile(SPACES_DIR / "profiles" / "cpu-only.json")
    effective = effective_space(load_space(SPACES_DIR / space), profile, space)
    by_name = {d.name: d for d in effective.dimensions if d.name in CHOSEN}
    assert set(by_name) == set(CHOSEN)
    for dim in by_name.values():
        assert dim.values is not None and len(dim.values) > 1
        assert dim.active(ORT_STATIC)
        assert not dim.active({**ORT_STATIC, "precision.mode": "int8_dynamic"})
        assert not dim.active({"runtime.engine": "torch_eager", "precision.mode": "fp32"})
    designed = designed_configs(effective)
    static = [c for c in designed if c.get("precision.mode") == "int8_static"]
    assert static, designed
    defaults = {o.key: o.default for o in STATIC_INT8_OPTIONS}
    for config in static:
        assert {k: config[k] for k in defaults} == defaults
