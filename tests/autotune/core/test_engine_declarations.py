"""An engine's declaration is the whole of what the knobs know of it: the precision modes it
runs, with no precision naming it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from autotune.core.knobs import ENGINES, PRECISIONS, Engine, Target, register, supports
from autotune.core.knobs.config import parse_config

ANYWHERE = Target(frozenset({"cpu", "cpu.avx2", "cpu.bf16"}), "onnx")


class ExampleEngine(Engine):
    name = "example_float_engine"
    model_format = "onnx"
    precisions = frozenset({"fp32", "bf16"})
    served_as = "files"


@pytest.fixture
def example_engine() -> Iterator[Engine]:
    register(ExampleEngine)
    try:
        yield ENGINES[ExampleEngine.name]
    finally:
        del ENGINES[ExampleEngine.name]


def test_a_new_engine_runs_the_modes_it_declares(example_engine: Engine) -> None:
    for mode in ("fp32", "bf16"):
        config = parse_config(
            {"runtime.engine": example_engine.name, "precision.mode": mode}, "onnx"
        )
        assert supports(config, ANYWHERE) is None
        assert example_engine.name in PRECISIONS[mode].engines


def test_a_new_engine_is_refused_the_modes_it_does_not_declare(example_engine: Engine) -> None:
    config = parse_config(
        {"runtime.engine": example_engine.name, "precision.mode": "int8_static"}, "onnx"
    )
    assert supports(config, ANYWHERE) == (
        "precision.mode=int8_static does not run on runtime.engine=example_float_engine "
        "(it runs bf16, fp32)"
    )
    assert example_engine.name not in PRECISIONS["int8_static"].engines


def test_a_precision_runs_on_the_engines_that_declare_it() -> None:
    assert {mode: set(precision.engines) for mode, precision in PRECISIONS.items()} == {
        "fp32": {"torch_eager", "torch_compile", "onnxruntime", "openvino"},
        "bf16": {"torch_eager", "torch_compile", "openvino"},
        "fp16": {"torch_eager", "torch_compile", "onnxruntime"},
        "int8_dynamic": {"torch_eager", "torch_compile", "onnxruntime"},
        "int8_static": {"onnxruntime", "openvino"},
        "fp8": {"torch_eager", "torch_compile"},
        "int4_weight_only": {"onnxruntime"},
    }
