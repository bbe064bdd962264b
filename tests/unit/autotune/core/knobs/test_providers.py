"""ONNX Runtime's execution providers are declarations (`autotune.core.knobs.providers`):
`runtime.provider` takes their names in registration order, the onnxruntime engine refuses a
configuration for the reasons its provider gives, and a provider's typed options are what
ONNX Runtime is given: its declared defaults, or what a configuration sets through the keys
`runtime.provider.<provider>.<option>`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

import pytest
from pydantic import ValidationError

from autotune.core.contract import HardwareProfile
from autotune.core.errors import Unsupported
from autotune.core.knobs import ENGINES, Package, Target, supports, variant_key
from autotune.core.knobs.config import parse_config
from autotune.core.knobs.engines import ORT_PROVIDER
from autotune.core.knobs.ort_providers import CudaOptions, TensorrtOptions
from autotune.core.knobs.providers import (
    PROVIDERS,
    ExecutionProvider,
    ProviderOptions,
    register_provider,
)
from tests.conftest import REPO
from tests.provider_chains import TENSORRT_DEFAULTS

PROFILES = REPO / "search_spaces" / "profiles"
CPU_HERE = Target(frozenset({"cpu", "ort.cpu"}), "onnx")
GPU_HERE = Target(frozenset({"cpu", "cuda", "ort.cpu", "ort.cuda", "ort.tensorrt"}), "onnx")


def reason(config: dict[str, str | int | bool], target: Target) -> str | None:
    return supports(parse_config({"runtime.engine": "onnxruntime", **config}, "onnx"), target)


def test_runtime_provider_takes_the_registered_providers_in_registration_order() -> None:
    assert list(PROVIDERS)[:4] == ["cpu", "cuda", "tensorrt", "openvino"]
    assert ORT_PROVIDER.values == tuple(PROVIDERS)
    assert ORT_PROVIDER.default == "cpu"


def test_a_chain_is_the_provider_and_its_fallbacks_each_with_its_options() -> None:
    assert PROVIDERS["cpu"].chain() == [("CPUExecutionProvider", {})]
    assert PROVIDERS["tensorrt"].chain() == [
        (
            "TensorrtExecutionProvider",
            TENSORRT_DEFAULTS,
        ),
        ("CUDAExecutionProvider", {"cudnn_conv_algo_search": "EXHAUSTIVE"}),
        ("CPUExecutionProvider", {}),
    ]
    assert PROVIDERS["openvino"].chain()[0] == ("OpenVINOExecutionProvider", {"device_type": "CPU"})
    assert [name for name, _ in PROVIDERS["tensorrt"].chain()] == [
        "TensorrtExecutionProvider",
        "CUDAExecutionProvider",
        "CPUExecutionProvider",
    ]


def test_an_option_onnx_runtime_does_not_know_is_refused_naming_it() -> None:
    with pytest.raises(ValidationError) as refused:
        CudaOptions(cudnn_conv_algo_serch="HEURISTIC")  # type: ignore[call-arg]
    assert "cudnn_conv_algo_serch" in str(refused.value)
    assert "Extra inputs are not permitted" in str(refused.value)
    with pytest.raises(ValidationError, match="trt_builder_optimization_level"):
        TensorrtOptions(trt_builder_optimization_level=6)
    assert TensorrtOptions(trt_fp16_enable=True).for_onnxruntime()["trt_fp16_enable"] == "true"


def test_a_provider_not_in_onnx_runtime_here_is_refused_naming_it() -> None:
    assert reason({"runtime.provider": "cuda"}, CPU_HERE) == (
        "runtime.provider=cuda: CUDAExecutionProvider is not available here"
    )
    assert reason({"runtime.provider": "openvino"}, CPU_HERE) == (
        "runtime.provider=openvino: OpenVINOExecutionProvider is not available here; install "
        "autotune[ort-openvino] to search runtime.provider=openvino"
    )
    assert reason({"runtime.provider": "cpu"}, CPU_HERE) is None


def test_a_gpu_provider_needs_a_cuda_device_beside_its_onnx_runtime_build() -> None:
    no_device = Target(GPU_HERE.capabilities - {"cuda"}, "onnx")
    assert reason({"runtime.provider": "tensorrt"}, no_device) == (
        "runtime.provider=tensorrt needs cuda"
    )
    assert reason({"runtime.provider": "tensorrt"}, GPU_HERE) is None


def test_device_and_precision_rules_come_from_the_providers() -> None:
    assert reason({"runtime.provider": "cpu", "runtime.device": "cuda"}, GPU_HERE) == (
        "runtime.device=cuda with runtime.provider=cpu: onnxruntime runs where its provider "
        "does; ask for runtime.provider=cuda or tensorrt"
    )
    assert reason({"runtime.provider": "cpu", "precision.mode": "fp16"}, GPU_HERE) == (
        "precision.mode=fp16 is not supported by onnxruntime's CPUExecutionProvider; it needs "
        "runtime.provider=cuda or tensorrt"
    )
    assert reason({"runtime.provider": "cuda", "precision.mode": "fp16"}, GPU_HERE) is None
    engine = ENGINES["onnxruntime"]
    on_cuda = parse_config(
        {"runtime.engine": "onnxruntime", "runtime.provider": "tensorrt"}, "onnx"
    )
    assert engine.on_cuda(on_cuda)
    assert not engine.on_cuda(parse_config({"runtime.engine": "onnxruntime"}, "onnx"))


def test_the_engine_offers_and_needs_the_registered_providers() -> None:
    engine = ENGINES["onnxruntime"]
    assert engine.provides == tuple(f"ort.{name}" for name in PROVIDERS)
    assert engine.needs == ("|".join(f"ort.{name}" for name in PROVIDERS),)
    saved = HardwareProfile.model_validate_json((PROFILES / "cpu-only.json").read_text())
    profile = saved.model_copy(
        update={"onnxruntime_providers": ["CPUExecutionProvider", "OpenVINOExecutionProvider"]}
    )
    assert engine.offered(profile) == {"ort.cpu", "ort.openvino"}


class Reversed(ExecutionProvider):
    name = "example_reversed"
    ort_name = "ExampleExecutionProvider"
    fallbacks = ("example_missing", "cpu")


@pytest.fixture
def forget_example() -> Iterator[None]:
    yield
    PROVIDERS.pop(Reversed.name, None)
    PROVIDERS.pop("cpu_again", None)


@pytest.mark.usefixtures("forget_example")
def test_registration_refuses_a_taken_name_and_an_unregistered_fallback() -> None:
    with pytest.raises(ValueError, match=r"fallbacks \['example_missing'\] are not registered"):
        register_provider(Reversed)
    assert Reversed.name not in PROVIDERS

    class CpuAgain(ExecutionProvider):
        name = "cpu"
        ort_name = "CPUExecutionProvider"

    with pytest.raises(ValueError, match="runtime.provider=cpu is already registered"):
        register_provider(CpuAgain)


@pytest.mark.usefixtures("forget_example")
def test_a_registered_provider_declares_its_options_and_package() -> None:
    class Tagged(ProviderOptions):
        tag: str = "a"

    class CpuAgain(ExecutionProvider):
        name = "cpu_again"
        ort_name = "CPUExecutionProvider"
        package = Package("onnxruntime", ("cpu",))
        options = Tagged(tag="b")

    register_provider(CpuAgain)
    assert PROVIDERS["cpu_again"].chain() == [("CPUExecutionProvider", {"tag": "b"})]


def test_a_providers_option_keys_take_their_values_from_the_fields_types() -> None:
    class Typed(ProviderOptions):
        level: Literal["low", "high"] = "low"
        cached: bool = True
        device: str = "NPU"

    class TypedProvider(ExecutionProvider):
        name = "typed"
        ort_name = "TypedExecutionProvider"
        options = Typed()

    keys = {o.key: o for o in TypedProvider().option_keys()}
    assert [(o.values, o.default) for o in keys.values()] == [
        (("low", "high"), "low"),
        ((False, True), True),
        (None, "NPU"),
    ]
    assert list(keys) == [f"runtime.provider.typed.{f}" for f in ("level", "cached", "device")]
    with pytest.raises(Unsupported, match=r"runtime.provider.typed.level='mid' is not one of"):
        keys["runtime.provider.typed.level"].parse({"runtime.provider.typed.level": "mid"})


TENSORRT = {"runtime.engine": "onnxruntime", "runtime.provider": "tensorrt"}
TRT_FP16 = "runtime.provider.tensorrt.trt_fp16_enable"
TRT_LEVEL = "runtime.provider.tensorrt.trt_builder_optimization_level"
CUDNN_SEARCH = "runtime.provider.cuda.cudnn_conv_algo_search"


def test_each_provider_option_is_a_key_of_the_onnxruntime_engine() -> None:
    keys = {option.key: option for option in ENGINES["onnxruntime"].options}
    fp16 = keys[TRT_FP16]
    assert (fp16.values, fp16.default, fp16.defines_variant) == ((False, True), False, True)
    device_type = keys["runtime.provider.openvino.device_type"]
    assert (device_type.values, device_type.default) == (None, "CPU")  # open: typed, not listed
    cudnn = keys[CUDNN_SEARCH]
    assert (cudnn.values, cudnn.default) == (("EXHAUSTIVE", "HEURISTIC", "DEFAULT"), "EXHAUSTIVE")
    assert keys[TRT_LEVEL].values is None
    assert not [key for key in keys if key.endswith(".device_id")]  # the slot's GPU, not a knob
    assert not [key for key in keys if key.startswith("runtime.provider.cpu.")]


def test_a_configuration_gives_the_chain_its_options() -> None:
    config = {**TENSORRT, TRT_FP16: True, CUDNN_SEARCH: "HEURISTIC"}
    parsed = parse_config(config, "onnx")
    assert PROVIDERS["tensorrt"].chain(parsed.options) == [
        (
            "TensorrtExecutionProvider",
            {**TENSORRT_DEFAULTS, "trt_fp16_enable": "true"},
        ),
        # a fallback's option is used too
        ("CUDAExecutionProvider", {"cudnn_conv_algo_search": "HEURISTIC"}),
        ("CPUExecutionProvider", {}),
    ]
    assert reason(config, GPU_HERE) is None


@pytest.mark.parametrize(
    ("key", "value", "refusal"),
    [
        (
            TRT_LEVEL,
            -1,
            f"{TRT_LEVEL}=-1 is refused by TensorrtOptions.trt_builder_optimization_level: "
            "Input should be greater than or equal to 0",
        ),
        (
            TRT_LEVEL,
            "1",
            f"{TRT_LEVEL}='1' is refused by TensorrtOptions.trt_builder_optimization_level: "
            "Input should be a valid integer",
        ),
        (
            "runtime.provider.openvino.device_type",
            1,
            "runtime.provider.openvino.device_type=1 is refused by OpenVinoOptions.device_type: "
            "Input should be a valid string",
        ),
        (TRT_FP16, "yes", f"{TRT_FP16}='yes' is not one of [False, True]"),
        (TRT_FP16, 1, f"{TRT_FP16}=1 is not one of [False, True]"),
    ],
)
def test_a_provider_option_of_the_wrong_type_is_refused_naming_key_rule_and_value(
    key: str, value: object, refusal: str
) -> None:
    with pytest.raises(Unsupported) as refused:
        parse_config({**TENSORRT, key: value}, "onnx")  # type: ignore[dict-item]
    assert str(refused.value) == refusal


def test_an_option_of_a_provider_the_session_does_not_use_is_refused() -> None:
    cuda = {"runtime.engine": "onnxruntime", "runtime.provider": "cuda"}
    assert reason({**cuda, TRT_FP16: True}, GPU_HERE) == (
        f"{TRT_FP16}=true is an option of runtime.provider=tensorrt; a session of "
        "runtime.provider=cuda does not use it"
    )
    assert reason({**cuda, TRT_FP16: False}, GPU_HERE) is None  # its default: nothing claimed
    torch = parse_config({"runtime.provider.openvino.device_type": "GPU"}, "torch")
    assert supports(torch, GPU_HERE) == (
        "runtime.provider.openvino.device_type=GPU: runtime.engine=torch_eager does not apply it"
    )


def test_a_provider_option_away_from_its_default_is_another_model_variant() -> None:
    assert variant_key({**TENSORRT, TRT_FP16: False}) == variant_key(TENSORRT)
    assert variant_key({**TENSORRT, TRT_FP16: True}) != variant_key(TENSORRT)
    assert f"{TRT_FP16}=True" in variant_key({**TENSORRT, TRT_FP16: True})
