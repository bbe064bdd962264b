from __future__ import annotations

from pathlib import Path
from typing import cast

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper

from autotune.core.errors import Unsupported
from autotune.core.knobs.config import parse_config
from workers.building import quantization, transforms
from workers.building.ort_session import OnnxRuntimeSession
from workers.building.pruning import (
    onnx_weight_initializers,
    prunable_torch_modules,
    prune_onnx,
    prune_torch,
)
from workers.building.quantization import quantize_onnx_int8
from workers.building.torch_io import output_names
from workers.building.transforms import register_transform


def kernels(module: torch.nn.Module) -> list[torch.Tensor]:
    return [cast(torch.Tensor, child.weight) for child in prunable_torch_modules(module)]


def torch_weights(module: torch.nn.Module) -> np.ndarray:
    return np.concatenate([weight.detach().numpy().ravel() for weight in kernels(module)])


def onnx_weights(model_bytes: bytes) -> np.ndarray:
    model = onnx.load_model_from_string(model_bytes)
    return np.concatenate(
        [numpy_helper.to_array(t).ravel() for t in onnx_weight_initializers(model)]
    )


def ops(model_bytes: bytes) -> set[str]:
    return {node.op_type for node in onnx.load_model_from_string(model_bytes).graph.node}


@pytest.mark.parametrize("ratio", [0.1, 0.3, 0.5, 0.95])
def test_torch_pruning_zeroes_exactly_the_ratio(
    digits_module: torch.nn.Module, ratio: float
) -> None:
    before = torch_weights(digits_module)
    assert np.count_nonzero(before == 0) == 0
    after = torch_weights(prune_torch(digits_module, ratio))
    assert np.count_nonzero(after == 0) == round(ratio * before.size)
    assert np.count_nonzero(torch_weights(digits_module) == 0) == 0, "the original is untouched"
    kept = after != 0
    np.testing.assert_array_equal(after[kept], before[kept])
    assert np.abs(before[~kept]).max() <= np.abs(before[kept]).min()


def test_torch_pruning_is_permanent(digits_module: torch.nn.Module) -> None:
    pruned = prune_torch(digits_module, 0.5)
    assert set(pruned.state_dict()) == set(digits_module.state_dict())


@pytest.mark.parametrize("ratio", [0.2, 0.7])
def test_onnx_pruning_zeroes_exactly_the_ratio(digits_onnx: Path, ratio: float) -> None:
    original = digits_onnx.read_bytes()
    before = onnx_weights(original)
    assert before.size == sum(p.numel() for p in _digits_weights())
    after = onnx_weights(prune_onnx(original, ratio))
    assert np.count_nonzero(after == 0) == round(ratio * before.size)
    kept = after != 0
    assert np.abs(before[~kept]).max() <= np.abs(before[kept]).min()


def test_onnx_pruning_leaves_biases_alone(digits_onnx: Path) -> None:
    pruned = onnx.load_model_from_string(prune_onnx(digits_onnx.read_bytes(), 0.9))
    biases = [numpy_helper.to_array(t) for t in pruned.graph.initializer if "bias" in t.name]
    assert biases and all(np.count_nonzero(b == 0) == 0 for b in biases)


def test_torch_and_onnx_pruning_pick_the_same_weights(
    digits_module: torch.nn.Module, digits_onnx: Path
) -> None:
    from_torch = np.sort(np.abs(torch_weights(prune_torch(digits_module, 0.4))))
    from_onnx = np.sort(np.abs(onnx_weights(prune_onnx(digits_onnx.read_bytes(), 0.4))))
    np.testing.assert_allclose(from_torch, from_onnx, rtol=0, atol=0)


def _digits_weights() -> list[torch.Tensor]:
    from experiments.digits.model import DigitsCNN

    return kernels(DigitsCNN())


def test_pruning_a_model_without_weights_is_unsupported() -> None:
    with pytest.raises(Unsupported, match="no Conv/Linear"):
        prune_torch(torch.nn.Sequential(torch.nn.ReLU()), 0.5)


def test_int8_quantization_runs_on_the_cpu_provider(
    digits_onnx: Path, digits: tuple[np.ndarray, np.ndarray]
) -> None:
    quantized = quantize_onnx_int8(digits_onnx.read_bytes())
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= ops(quantized)
    outputs = OnnxRuntimeSession(quantized, threads=1).run(digits[0][:8])
    assert outputs.shape == (8, 10)


def test_int8_quantization_leaves_conv_in_fp32_when_conv_integer_cannot_load(
    monkeypatch: pytest.MonkeyPatch, digits_onnx: Path
) -> None:
    real_problem = quantization.cpu_load_problem

    def without_conv_integer(model_bytes: bytes) -> str | None:
        if "ConvInteger" in ops(model_bytes):
            return "NOT_IMPLEMENTED: ConvInteger"
        return real_problem(model_bytes)

    monkeypatch.setattr(quantization, "cpu_load_problem", without_conv_integer)
    quantized = quantize_onnx_int8(digits_onnx.read_bytes())
    assert "ConvInteger" not in ops(quantized)
    assert {"Conv", "MatMulInteger"} <= ops(quantized)


def test_int8_quantization_that_never_loads_is_unsupported(
    monkeypatch: pytest.MonkeyPatch, digits_onnx: Path
) -> None:
    monkeypatch.setattr(quantization, "cpu_load_problem", lambda model_bytes: "broken")
    with pytest.raises(Unsupported, match="int8_dynamic"):
        quantize_onnx_int8(digits_onnx.read_bytes())


def test_torch_int8_quantizes_linear_layers_only(digits_module: torch.nn.Module) -> None:
    from workers.building.variants import BuildContext, TorchVariant

    config = parse_config({"precision.mode": "int8_dynamic"}, "torch")
    variant = transforms.precision(TorchVariant(digits_module), config, BuildContext(np.empty(0)))
    assert isinstance(variant, TorchVariant)
    assert not any(isinstance(c, torch.nn.Linear) for c in variant.module.modules())
    assert any(isinstance(c, torch.nn.Conv2d) for c in variant.module.modules())


def test_export_has_a_dynamic_batch_axis(digits_module: torch.nn.Module) -> None:
    model_bytes = transforms.torch_to_onnx(digits_module, np.zeros((2, 1, 8, 8), np.float32))
    session = OnnxRuntimeSession(model_bytes, threads=1)
    assert session.fixed_batch is None
    assert session.run(np.zeros((5, 1, 8, 8), np.float32)).shape == (5, 10)


@pytest.mark.slow
def test_dynamo_export_matches_the_torch_model(
    digits_module: torch.nn.Module, digits: tuple[np.ndarray, np.ndarray]
) -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        example = (torch.from_numpy(digits[0][:2]),)
        axes = {"input": {0: "batch"}, "output": {0: "batch"}}
        model_bytes = transforms._export_dynamo(digits_module, example, ["output"], axes)
    outputs = OnnxRuntimeSession(model_bytes, threads=1).run(digits[0][:7])
    with torch.inference_mode():
        expected = digits_module(torch.from_numpy(digits[0][:7])).numpy()
    np.testing.assert_allclose(outputs, expected, atol=1e-4)


def test_a_module_that_takes_one_batch_size_exports_a_graph_of_that_size_alone() -> None:
    from tests.fixed_batch_models import batch_of_one

    inputs = np.random.default_rng(0).random((1, 1, 8, 8), dtype=np.float32)
    module = batch_of_one()
    with pytest.raises(RuntimeError):  # it takes no other batch size
        module(torch.from_numpy(np.concatenate([inputs, inputs])))
    session = OnnxRuntimeSession(
        transforms.torch_to_onnx(module, inputs, dynamic_batch=False), threads=1
    )
    assert session.fixed_batch == 1
    with torch.inference_mode():
        expected = module(torch.from_numpy(inputs)).numpy()
    np.testing.assert_allclose(session.run(inputs), expected, atol=1e-4)


@pytest.mark.parametrize(
    ("entry", "batch", "dynamic", "judging"),
    [("with_class_prior", 2, True, [0, None]), ("sequence_of_one", 1, False, [0, "whole"])],
)
def test_the_export_says_how_a_torch_session_judges_each_output(
    entry: str, batch: int, dynamic: bool, judging: list[object]
) -> None:
    """Per output, in order: its batch axis, 'whole' (of a batch of one) or None (left out);
    each output named as the module's (the class prior is a constant the exporter names as
    such)."""
    from tests import several_outputs
    from workers.building.torch_io import OUTPUT_JUDGING_KEY, exported_output_judging

    module = getattr(several_outputs, entry)()
    inputs = np.zeros((batch, 1, 8, 8), np.float32)
    model = onnx.load_from_string(transforms.torch_to_onnx(module, inputs, dynamic))
    metadata = {prop.key: prop.value for prop in model.metadata_props}
    assert OUTPUT_JUDGING_KEY in metadata
    assert exported_output_judging(metadata) == judging
    with torch.inference_mode():
        names = output_names(module(torch.from_numpy(inputs)))
    assert [output.name for output in model.graph.output] == names


def test_registering_a_transform_twice_raises() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_transform("prune")(transforms.prune)


def test_pipeline_names_registered_transforms() -> None:
    assert set(transforms.PIPELINE) <= set(transforms.TRANSFORMS)


def test_an_unsupported_precision_is_refused_before_exporting(
    monkeypatch: pytest.MonkeyPatch, digits_module: torch.nn.Module
) -> None:
    from workers.building.variants import BuildContext, TorchVariant

    def must_not_export(*args: object) -> bytes:
        raise AssertionError("exported although the precision cannot run")

    monkeypatch.setattr(transforms, "torch_to_onnx", must_not_export)
    config = parse_config({"runtime.engine": "onnxruntime", "precision.mode": "bf16"}, "torch")
    with pytest.raises(Unsupported, match="bf16 does not run on runtime.engine=onnxruntime"):
        transforms.build_variant(TorchVariant(digits_module), config, BuildContext(np.empty(0)))
