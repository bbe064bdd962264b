"""OpenVINO's int8, declared: precision.mode=int8_static runs on runtime.engine=openvino where
the CPU has AVX2, with precision.fallback; OpenVINO's other modes keep no node in float, and
int8_dynamic is not OpenVINO's."""

from __future__ import annotations

import pytest

from autotune.core.contract import ConfigValue
from autotune.core.knobs import Target, supports, variant_key
from autotune.core.knobs.config import parse_config

OV_INT8: dict[str, ConfigValue] = {"runtime.engine": "openvino", "precision.mode": "int8_static"}
CPU = frozenset({"openvino", "cpu.avx2", "cpu.bf16"})


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
