"""precision.fallback, declared: parsed, refused where it cannot apply, part of the variant
key, and a dimension of the CPU spaces active only for ONNX Runtime's int8 modes."""

from __future__ import annotations

import pytest

from autotune.core.contract import ConfigValue
from autotune.core.errors import Unsupported
from autotune.core.knobs import Target, supports, variant_key
from autotune.core.knobs.config import parse_config
from autotune.space.hardware import load_profile
from autotune.space.search_space import SPACES_DIR, effective_space, load_space

ORT_INT8: dict[str, ConfigValue] = {
    "runtime.engine": "onnxruntime",
    "precision.mode": "int8_dynamic",
}
CPU = Target(frozenset({"cpu.avx2", "ort.cpu", "torch.compile"}), "onnx")


def test_variant_key_differs_by_fallback() -> None:
    keys = {variant_key({**ORT_INT8, "precision.fallback": k}) for k in (0, 1, 2, 4, 8)}
    assert len(keys) == 5
    assert variant_key({**ORT_INT8, "precision.fallback": 0}) == variant_key(ORT_INT8)
    parsed = parse_config({**ORT_INT8, "precision.fallback": 2}, "onnx")
    assert parsed.fallback == 2 and "precision.fallback=2" in parsed.variant_id


@pytest.mark.parametrize("value", [-1, "2", True, 1.5])
def test_a_bad_fallback_is_refused_by_name(value: ConfigValue) -> None:
    with pytest.raises(Unsupported, match="precision.fallback="):
        parse_config({**ORT_INT8, "precision.fallback": value}, "onnx")


@pytest.mark.parametrize(
    ("config", "reason"),
    [
        ({"runtime.engine": "onnxruntime", "precision.mode": "fp32"}, "is not one of"),
        ({"runtime.engine": "torch_eager", "precision.mode": "fp32"}, "is not int8_dynamic"),
    ],
)
def test_fallback_is_refused_outside_int8(config: dict[str, ConfigValue], reason: str) -> None:
    kind = "onnx" if config["runtime.engine"] == "onnxruntime" else "torch"
    parsed = parse_config({**config, "precision.fallback": 1}, kind)
    refusal = supports(parsed, Target(CPU.capabilities, kind))
    assert refusal is not None and "precision.fallback" in refusal and reason in refusal
    assert supports(parse_config({**ORT_INT8, "precision.fallback": 1}, "onnx"), CPU) is None


@pytest.mark.parametrize("space", ["cpu.yaml", "quick-cpu.yaml", "default.yaml"])
def test_the_dimension_is_active_only_for_int8_on_the_engines_that_fall_back(space: str) -> None:
    profile = load_profile(SPACES_DIR / "profiles" / "cpu-only.json")
    effective = effective_space(load_space(SPACES_DIR / space), profile, space)
    fallback = [d for d in effective.dimensions if d.name == "precision.fallback"]
    assert fallback and all(d.values == [0, 1, 2, 4, 8] for d in fallback)

    def active(config: dict[str, ConfigValue]) -> bool:
        return any(d.active(config) for d in fallback)

    for mode in ("int8_dynamic", "int8_static"):
        assert active({"runtime.engine": "onnxruntime", "precision.mode": mode})
    assert not active({"runtime.engine": "onnxruntime", "precision.mode": "fp32"})
    assert active({"runtime.engine": "torch_eager", "precision.mode": "int8_dynamic"})
    assert not active({"runtime.engine": "torch_eager", "precision.mode": "fp32"})
