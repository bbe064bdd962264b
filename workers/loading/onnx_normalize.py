"""ONNX models as other tools export them, brought to the form the transforms work on.

Paddle, TensorFlow and some PyTorch exports keep their weights in `Constant` nodes rather
than in initializers; pruning and ONNX Runtime's quantization look for initializers only
(and quantization fails outright on a Conv whose weight is computed). `normalize_onnx` moves
each such constant (in the main graph and in If/Loop/Scan subgraphs) into its graph's
initializers under the same name, which leaves the graph's meaning unchanged, and infers
the shapes it can.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx

logger = logging.getLogger(__name__)

# Initializers need not be graph inputs from IR version 4 on.
MIN_IR_VERSION = 4


def normalize_onnx(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with its main graph's constant tensors as initializers, and shapes inferred
    where the model allows (a model shape inference cannot follow is left as it is)."""
    import onnx

    constants_to_initializers(model)
    try:
        return onnx.shape_inference.infer_shapes(model)
    except Exception:  # an exporter's custom op or an inconsistent shape: not ours to fix
        logger.info("shape inference failed; the model keeps its own shapes", exc_info=True)
        return model


def constants_to_initializers(model: onnx.ModelProto) -> int:
    """Move each `Constant` node that holds a plain tensor (its `value` attribute) into its
    graph's initializers, named as the node's output, in the main graph and in every
    If/Loop/Scan subgraph (where exporters put a branch's weights); how many moved."""
    if model.ir_version < MIN_IR_VERSION:
        return 0
    return _graph_constants_to_initializers(model.graph)


def _graph_constants_to_initializers(graph: onnx.GraphProto) -> int:
    import onnx

    kept, moved = [], 0
    for node in graph.node:
        if _plain_constant(node):
            tensor = onnx.TensorProto()
            tensor.CopyFrom(node.attribute[0].t)
            tensor.name = node.output[0]
            graph.initializer.append(tensor)
            moved += 1
            continue
        for attribute in node.attribute:
            for subgraph in [
                *([attribute.g] if attribute.HasField("g") else []),
                *attribute.graphs,
            ]:
                moved += _graph_constants_to_initializers(subgraph)
        kept.append(node)
    if len(kept) < len(graph.node):
        del graph.node[:]
        graph.node.extend(kept)
    return moved


def subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    """The graphs a node holds as attributes (an If's branches, a Loop's or Scan's body)."""
    from onnx import AttributeProto

    graphs: list[onnx.GraphProto] = []
    for attribute in node.attribute:
        if attribute.type == AttributeProto.GRAPH:
            graphs.append(attribute.g)
        elif attribute.type == AttributeProto.GRAPHS:
            graphs.extend(attribute.graphs)
    return graphs


def _plain_constant(node: onnx.NodeProto) -> bool:
    return (
        node.op_type == "Constant"
        and node.domain in ("", "ai.onnx")
        and len(node.attribute) == 1
        and node.attribute[0].name == "value"
        and len(node.output) == 1
    )
