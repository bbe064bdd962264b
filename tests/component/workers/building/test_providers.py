"""An execution provider's declaration is what ONNX Runtime gets: the session is built from the
provider's chain, each with its options, and a provider that an installed plugin registers
(entry point group `autotune.providers`) is a value of `runtime.provider`, refused with its
reason where this machine's ONNX Runtime lacks it."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime
import pytest
import yaml
from onnx import TensorProto, helper

from autotune.core.errors import Unsupported
from autotune.core.knobs.config import parse_config
from autotune.core.knobs.providers import (
    PROVIDERS,
    ExecutionProvider,
    ProviderOptions,
    register_provider,
)
from tests.conftest import REPO
from tests.provider_chains import TENSORRT_DEFAULTS
from workers.building.knobs.base import ENGINE_IMPLEMENTATIONS
from workers.building.ort_session import OnnxRuntimeSession
from workers.building.variants import OnnxVariant


def relu_model() -> bytes:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["input"], ["output"])],
        "relu",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 4])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


class TaggedOptions(ProviderOptions):
    arena_tag: str = "unset"


class TaggedCpu(ExecutionProvider):
    """ONNX Runtime's CPU provider under another name, with an option (the CPU provider
    ignores provider options: its `get_provider_options()` is empty whatever it is given)."""

    name = "example_tagged_cpu"
    ort_name = "CPUExecutionProvider"
    options = TaggedOptions(arena_tag="tagged")


@pytest.fixture
def tagged_cpu() -> Iterator[None]:
    register_provider(TaggedCpu)
    yield
    del PROVIDERS[TaggedCpu.name]


@pytest.fixture
def given_providers(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """What each InferenceSession built from now on is given as `providers`."""
    given: list[Any] = []
    real = onnxruntime.InferenceSession

    def recording(*args: Any, providers: Any, **kwargs: Any) -> Any:
        given.append(providers)
        return real(*args, providers=providers, **kwargs)

    monkeypatch.setattr(onnxruntime, "InferenceSession", recording)
    return given


@pytest.mark.usefixtures("tagged_cpu")
def test_the_session_is_given_the_providers_options(given_providers: list[Any]) -> None:
    session = OnnxRuntimeSession(relu_model(), threads=1, provider=TaggedCpu.name)
    assert given_providers == [[("CPUExecutionProvider", {"arena_tag": "tagged"})]]
    assert session.providers == ["CPUExecutionProvider"]
    inputs = np.array([[-1.0, 0.5, -2.0, 3.0]], np.float32)
    np.testing.assert_array_equal(session.run(inputs), np.maximum(inputs, 0.0))


def test_a_chain_with_options_that_onnx_runtime_falls_back_from_is_refused(
    given_providers: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = onnxruntime.get_available_providers()
    if "TensorrtExecutionProvider" in real:
        pytest.skip("TensorrtExecutionProvider really is available")
    monkeypatch.setattr(
        onnxruntime, "get_available_providers", lambda: ["TensorrtExecutionProvider", *real]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # onnxruntime warns about the providers it drops
        with pytest.raises(Unsupported, match="could not start TensorrtExecutionProvider"):
            OnnxRuntimeSession(relu_model(), threads=1, provider="tensorrt")
    [chain] = given_providers
    assert chain[0] == (
        "TensorrtExecutionProvider",
        TENSORRT_DEFAULTS,
    )
    assert [name for name, _ in chain[1:]] == ["CUDAExecutionProvider", "CPUExecutionProvider"]


def test_a_configuration_s_provider_options_reach_the_session_it_builds(
    given_providers: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`runtime.provider.<provider>.<option>` keys, parsed with the configuration, are what the
    onnxruntime engine's implementation gives ONNX Runtime for that provider and its fallbacks
    (here TensorRT's session cannot start, so it is refused after the chain was given)."""
    real = onnxruntime.get_available_providers()
    if "TensorrtExecutionProvider" in real:
        pytest.skip("TensorrtExecutionProvider really is available")
    monkeypatch.setattr(
        onnxruntime, "get_available_providers", lambda: ["TensorrtExecutionProvider", *real]
    )
    config = {
        "runtime.engine": "onnxruntime",
        "runtime.provider": "tensorrt",
        "runtime.provider.tensorrt.trt_fp16_enable": True,
        "runtime.provider.cuda.cudnn_conv_algo_search": "HEURISTIC",
    }
    engine = ENGINE_IMPLEMENTATIONS["onnxruntime"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(Unsupported, match="could not start TensorrtExecutionProvider"):
            engine.session(OnnxVariant(relu_model()), parse_config(config, "onnx"))
    [chain] = given_providers
    assert chain == [
        (
            "TensorrtExecutionProvider",
            {**TENSORRT_DEFAULTS, "trt_fp16_enable": "true"},
        ),
        ("CUDAExecutionProvider", {"cudnn_conv_algo_search": "HEURISTIC"}),
        ("CPUExecutionProvider", {}),
    ]


PLUGIN_MODULE = """
from autotune.core.knobs.providers import ExecutionProvider, ProviderOptions, register_provider


class ExampleNpuOptions(ProviderOptions):
    device_type: str = "NPU"


@register_provider
class ExampleNpu(ExecutionProvider):
    name = "example_npu"
    ort_name = "ExampleNpuExecutionProvider"
    fallbacks = ("cpu",)
    options = ExampleNpuOptions()
"""


@pytest.fixture
def provider_plugin(tmp_path: Path) -> dict[str, str]:
    """An installed distribution (its metadata on the path) whose `autotune.providers` entry
    point registers `example_npu`; the environment of a process that sees it."""
    site = tmp_path / "site"
    info = site / "example_npu_provider-0.1.dist-info"
    info.mkdir(parents=True)
    (site / "example_npu_provider.py").write_text(PLUGIN_MODULE)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: example-npu-provider\nVersion: 0.1\n"
    )
    (info / "entry_points.txt").write_text(
        "[autotune.providers]\nexample_npu = example_npu_provider\n"
    )
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)])}


def run_python(arguments: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, *arguments],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "was not loaded" not in done.stderr, done.stderr[-3000:]
    return done.stdout


def test_a_plugin_provider_is_a_value_of_runtime_provider(provider_plugin: dict[str, str]) -> None:
    printed = run_python(
        [
            "-c",
            "from autotune.core.knobs.engines import ORT_PROVIDER, OnnxRuntime; "
            "print(list(ORT_PROVIDER.values)); print(OnnxRuntime.provides); "
            "print([(o.key, o.default) for o in OnnxRuntime.options if 'example_npu' in o.key])",
        ],
        provider_plugin,
    )
    values, provides, options = printed.splitlines()
    assert values == "['cpu', 'cuda', 'tensorrt', 'openvino', 'example_npu']"
    assert "'ort.example_npu'" in provides
    assert options == "[('runtime.provider.example_npu.device_type', 'NPU')]"


def test_autotune_space_says_why_a_plugin_provider_is_left_out_here(
    provider_plugin: dict[str, str], tmp_path: Path
) -> None:
    space = tmp_path / "npu.yaml"
    space.write_text(
        "name: npu\n"
        "dimensions:\n"
        "  - {name: runtime.engine, values: [onnxruntime], baseline: onnxruntime}\n"
        "  - {name: runtime.provider, values: [example_npu, cpu], baseline: cpu}\n"
    )
    request = yaml.safe_load((REPO / "experiments" / "digits" / "request.yaml").read_text())
    request["search_space"] = str(space)
    request_file = tmp_path / "request.yaml"
    request_file.write_text(yaml.safe_dump(request))
    printed = run_python(
        ["-m", "autotune", "space", "--request", str(request_file)], provider_plugin
    )
    assert "runtime.provider: cpu; baseline cpu" in printed
    assert "example_npu: ExampleNpuExecutionProvider is not available here" in printed
