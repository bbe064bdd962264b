"""An ONNX model that onnxruntime runs and OpenVINO cannot convert: the digits CNN whose logits
pass through `Det` of 1x1 matrices (each logit itself), an op OpenVINO's ONNX frontend has no
conversion rule for."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def digits_through_det(path: Path) -> Path:
    """The digits CNN exported to `path`, its logits [N, 10] reshaped to [N, 10, 1, 1] and
    passed through `Det`: the same outputs, and an op OpenVINO lacks."""
    import onnx
    from onnx import helper, numpy_helper

    from experiments.digits.model import build_model
    from tests.workers_support import export_digits_onnx

    model = onnx.load_model(str(export_digits_onnx(build_model(), path)))
    graph = model.graph
    logits = graph.output[0].name
    graph.initializer.append(numpy_helper.from_array(np.array([-1, 10, 1, 1]), "det_shape"))
    graph.node.extend(
        [
            helper.make_node("Reshape", [logits, "det_shape"], ["one_by_one"]),
            helper.make_node("Det", ["one_by_one"], ["scores"]),
        ]
    )
    del graph.output[:]
    graph.output.append(helper.make_tensor_value_info("scores", onnx.TensorProto.FLOAT, ["N", 10]))
    onnx.checker.check_model(model)
    onnx.save_model(model, str(path))
    return path
