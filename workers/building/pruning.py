"""Pruning: global magnitude (unstructured), structured channel pruning and 2:4 semi-structured
sparsity. Every function returns a new model and leaves its input untouched."""

from __future__ import annotations

import copy
import math
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from autotune.core.errors import Unsupported
from autotune.core.knobs.config import TrialConfig
from workers.loading.onnx_normalize import subgraphs

if TYPE_CHECKING:
    import onnx
    import torch
    from torch import fx, nn

# Per ONNX op, the inputs that are weights when they are initializers (not activations).
_ONNX_WEIGHT_INPUTS = {"Conv": (1,), "ConvTranspose": (1,), "Gemm": (0, 1), "MatMul": (0, 1)}


# --- magnitude: global unstructured L1 pruning -------------------------------------------------


def prunable_torch_modules(module: torch.nn.Module) -> list[torch.nn.Module]:
    from torch import nn

    kinds = (
        nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d,
        nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d,
    )  # fmt: skip
    return [child for child in module.modules() if isinstance(child, kinds)]


def prune_torch(module: torch.nn.Module, ratio: float) -> torch.nn.Module:
    """Zero exactly round(ratio * n) of all Conv/Linear weights, the smallest in magnitude."""
    from torch.nn.utils import prune as torch_prune

    pruned = copy.deepcopy(module)
    targets = [(child, "weight") for child in prunable_torch_modules(pruned)]
    if not targets:
        raise Unsupported("prune.method=magnitude: the model has no Conv/Linear weights")
    torch_prune.global_unstructured(
        targets, pruning_method=torch_prune.L1Unstructured, amount=ratio
    )
    for child, name in targets:
        torch_prune.remove(child, name)
    return pruned.eval()


def prune_onnx(model_bytes: bytes, ratio: float) -> bytes:
    """The ONNX counterpart of `prune_torch`, over Conv/Gemm/MatMul weight initializers, those
    of nodes inside If/Loop/Scan subgraphs included."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load_model_from_string(model_bytes)
    weights = onnx_weight_initializers(model)
    if not weights:
        raise Unsupported(
            "prune.method=magnitude: the model has no Conv/Gemm/MatMul weights, in its main "
            "graph or inside If/Loop/Scan subgraphs"
        )
    arrays = [numpy_helper.to_array(tensor) for tensor in weights]
    for tensor, pruned in zip(weights, _zero_smallest(arrays, ratio), strict=True):
        tensor.CopyFrom(numpy_helper.from_array(pruned, tensor.name))
    return model.SerializeToString()


def onnx_weight_initializers(model: onnx.ModelProto) -> list[onnx.TensorProto]:
    """Floating-point initializers used as the weight of a Conv/Gemm/MatMul node, in the main
    graph or in a subgraph (an If branch, a Loop or Scan body), each once. A subgraph's node
    may name an initializer of its own graph or of an enclosing one."""
    from onnx import TensorProto

    floating = {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16}
    found: dict[int, onnx.TensorProto] = {}
    for tensor in _weights_in(model.graph, []):
        if tensor.data_type in floating:
            found.setdefault(id(tensor), tensor)
    return list(found.values())


def _weights_in(
    graph: onnx.GraphProto, outer: list[dict[str, onnx.TensorProto | None]]
) -> list[onnx.TensorProto]:
    """The initializers `graph`'s weight inputs name, its subgraphs' included; `outer` holds
    the enclosing graphs' names, innermost last (None: a value, not an initializer)."""
    local: dict[str, onnx.TensorProto | None] = {value.name: None for value in graph.input}
    local.update((name, None) for node in graph.node for name in node.output)
    local.update((tensor.name, tensor) for tensor in graph.initializer)
    scopes = [*outer, local]
    weights = []
    for node in graph.node:
        for index in _ONNX_WEIGHT_INPUTS.get(node.op_type, ()):
            tensor = _visible(scopes, node.input[index]) if index < len(node.input) else None
            if tensor is not None:
                weights.append(tensor)
        for subgraph in subgraphs(node):
            weights.extend(_weights_in(subgraph, scopes))
    return weights


def _visible(
    scopes: list[dict[str, onnx.TensorProto | None]], name: str
) -> onnx.TensorProto | None:
    """What `name` means where the innermost scope is: an inner name hides an outer one."""
    for scope in reversed(scopes):
        if name in scope:
            return scope[name]
    return None


def _zero_smallest(arrays: list[np.ndarray], ratio: float) -> list[np.ndarray]:
    magnitudes = np.concatenate([np.abs(a.astype(np.float64)).ravel() for a in arrays])
    count = round(ratio * magnitudes.size)  # the same rounding as torch's global pruning
    mask = np.zeros(magnitudes.size, dtype=bool)
    if count > 0:
        mask[np.argpartition(magnitudes, count - 1)[:count]] = True
    pruned, offset = [], 0
    for array in arrays:
        keep = ~mask[offset : offset + array.size].reshape(array.shape)
        pruned.append(np.where(keep, array, np.zeros((), dtype=array.dtype)))
        offset += array.size
    return pruned


# --- structured: remove whole output channels / features ----------------------------------------


@dataclass(frozen=True)
class PrunableChain:
    """A Conv2d or Linear whose output reaches exactly one consumer layer, through elementwise
    ops, per-channel pooling, BatchNorm2d (`norms`, pruned along) and at most one Flatten.
    `block` is how many consumer input features each producer channel feeds: H*W across a
    Flatten, else 1."""

    producer: str
    consumer: str
    norms: tuple[str, ...]
    block: int


def prune_structured(module: torch.nn.Module, ratio: float) -> torch.nn.Module:
    """Remove the `removed_count(ratio, n)` output channels (Conv2d) or features (Linear) with the
    smallest L2 weight norm from every layer of a `PrunableChain`, and the matching inputs of
    its consumer. The copy keeps the model's class and parameter names; only shapes shrink, so
    its outputs keep their shape. Channels are ranked on the original weights."""
    pruned = copy.deepcopy(module).eval()
    chains = find_prunable_chains(pruned)
    if not chains:
        raise Unsupported(
            "prune.method=structured: no Conv2d/Linear layer feeds exactly one Conv2d/Linear "
            "(through elementwise ops, pooling, BatchNorm2d or Flatten) without branching"
        )
    kept = {chain.producer: _strongest_channels(pruned, chain.producer, ratio) for chain in chains}
    for chain in chains:
        keep = kept[chain.producer]
        _keep_outputs(pruned.get_submodule(chain.producer), keep)
        for name in chain.norms:
            _keep_norm_features(pruned.get_submodule(name), keep)
        columns = (keep[:, None] * chain.block + _arange(chain.block)[None, :]).reshape(-1)
        _keep_inputs(pruned.get_submodule(chain.consumer), columns)
    return pruned


def pruned_skeleton(module: torch.nn.Module, config: TrialConfig) -> torch.nn.Module:
    """`module` with the layer shapes of `config`'s pruned variant, to load that variant's saved
    weights into. Structured pruning's shapes depend only on the architecture and the ratio, not
    on the weights, so pruning any instance of the architecture gives them."""
    if config.prune_method == "structured" and config.prunes:
        return prune_structured(module, config.prune_ratio)
    return module


def removed_count(ratio: float, channels: int) -> int:
    """round(ratio * channels), halves rounded up, leaving at least one channel."""
    return min(math.floor(ratio * channels + 0.5), channels - 1)


def find_prunable_chains(module: torch.nn.Module) -> list[PrunableChain]:
    """Producer -> consumer chains found by torch.fx symbolic tracing. A layer is skipped when
    its output (or any op's output on the way) has more than one user, as a residual add or the
    model's output does, or when a layer on the way is called more than once."""
    import torch.fx

    try:
        graph = torch.fx.symbolic_trace(module).graph
    except Exception as error:
        raise Unsupported(
            f"prune.method=structured: the model does not trace with torch.fx ({error})"
        ) from error
    calls = Counter(node.target for node in graph.nodes if node.op == "call_module")
    chains = []
    for node in graph.nodes:
        if _layer(module, node, calls) is not None:
            chain = _follow(module, node, calls)
            if chain is not None:
                chains.append(chain)
    return chains


def _follow(module: nn.Module, start: fx.Node, calls: Counter[Any]) -> PrunableChain | None:
    from torch import nn

    producer = _layer(module, start, calls)
    assert producer is not None
    is_conv = isinstance(producer, nn.Conv2d)
    channels = producer.out_channels if isinstance(producer, nn.Conv2d) else producer.out_features
    norms: list[str] = []
    flattened = False
    current = start
    while len(current.users) == 1:
        (user,) = current.users
        if not user.args or user.args[0] is not current:
            return None
        consumer = _layer(module, user, calls)
        if consumer is not None:
            block = _consumer_block(consumer, channels, is_conv, flattened)
            if block is None:
                return None
            return PrunableChain(str(start.target), str(user.target), tuple(norms), block)
        child = _called_module(module, user, calls)
        if _is_elementwise(user, child):
            pass
        elif is_conv and not flattened and isinstance(child, nn.BatchNorm2d):
            if child.num_features != channels:
                return None
            norms.append(str(user.target))
        elif is_conv and not flattened and isinstance(child, _channel_pools()):
            pass
        elif is_conv and not flattened and _is_flatten(user, child):
            flattened = True
        else:
            return None
        current = user
    return None


def _consumer_block(
    consumer: nn.Conv2d | nn.Linear, channels: int, is_conv: bool, flattened: bool
) -> int | None:
    from torch import nn

    if isinstance(consumer, nn.Conv2d):
        fits = is_conv and not flattened and consumer.in_channels == channels
        return 1 if fits else None
    if is_conv and not flattened:
        return None  # a Linear on a conv output works on its last spatial axis, not channels
    if consumer.in_features % channels or (not is_conv and consumer.in_features != channels):
        return None
    return consumer.in_features // channels


def _called_module(module: nn.Module, node: fx.Node, calls: Counter[Any]) -> nn.Module | None:
    """The module a call_module node calls, if this is its only call."""
    if node.op != "call_module" or calls[node.target] != 1:
        return None
    return module.get_submodule(str(node.target))


def _layer(module: nn.Module, node: fx.Node, calls: Counter[Any]) -> nn.Conv2d | nn.Linear | None:
    from torch import nn

    child = _called_module(module, node, calls)
    if isinstance(child, nn.Linear):
        return child
    if isinstance(child, nn.Conv2d) and child.groups == 1:
        return child
    return None


def _is_elementwise(node: fx.Node, child: nn.Module | None) -> bool:
    import torch
    from torch import nn
    from torch.nn import functional

    modules = (
        nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.GELU, nn.SiLU, nn.Tanh, nn.Sigmoid, nn.Hardswish,
        nn.Dropout, nn.Identity,
    )  # fmt: skip
    functions = {
        functional.relu, torch.relu, functional.gelu, functional.silu, torch.tanh, torch.sigmoid,
        functional.dropout,
    }  # fmt: skip
    if node.op == "call_module":
        return isinstance(child, modules)
    if node.op == "call_function":
        return node.target in functions
    return node.op == "call_method" and node.target in {"relu", "sigmoid", "tanh"}


def _channel_pools() -> tuple[type[nn.Module], ...]:
    from torch import nn

    return (nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d, nn.Dropout2d)


def _is_flatten(node: fx.Node, child: nn.Module | None) -> bool:
    """Flattening [N, C, H, W] from the channel axis on, so channel c owns H*W consecutive
    features."""
    import torch
    from torch import nn

    if node.op == "call_module":
        return isinstance(child, nn.Flatten) and child.start_dim == 1 and child.end_dim == -1
    if node.op != "call_function" or node.target is not torch.flatten:
        return False
    start = node.args[1] if len(node.args) > 1 else node.kwargs.get("start_dim", 0)
    end = node.args[2] if len(node.args) > 2 else node.kwargs.get("end_dim", -1)
    return bool(start == 1 and end == -1)


def _strongest_channels(module: nn.Module, name: str, ratio: float) -> torch.Tensor:
    """Indices, ascending, of the output channels to keep: the largest L2 weight norms, ties
    going to the lower index."""
    import torch
    from torch import nn

    layer = module.get_submodule(name)
    assert isinstance(layer, nn.Conv2d | nn.Linear)
    weight = layer.weight.detach()
    norms = weight.reshape(weight.shape[0], -1).norm(dim=1)
    keep_count = weight.shape[0] - removed_count(ratio, weight.shape[0])
    order = torch.argsort(-norms, stable=True)
    return order[:keep_count].sort().values


def _arange(count: int) -> torch.Tensor:
    import torch

    return torch.arange(count)


def _keep_outputs(layer: nn.Module, keep: torch.Tensor) -> None:
    from torch import nn

    assert isinstance(layer, nn.Conv2d | nn.Linear)
    layer.weight = nn.Parameter(layer.weight.detach()[keep].clone())
    if layer.bias is not None:
        layer.bias = nn.Parameter(layer.bias.detach()[keep].clone())
    if isinstance(layer, nn.Conv2d):
        layer.out_channels = len(keep)
    else:
        layer.out_features = len(keep)


def _keep_inputs(layer: nn.Module, columns: torch.Tensor) -> None:
    from torch import nn

    assert isinstance(layer, nn.Conv2d | nn.Linear)
    layer.weight = nn.Parameter(layer.weight.detach()[:, columns].clone())
    if isinstance(layer, nn.Conv2d):
        layer.in_channels = len(columns)
    else:
        layer.in_features = len(columns)


def _keep_norm_features(norm: nn.Module, keep: torch.Tensor) -> None:
    from torch import nn

    assert isinstance(norm, nn.BatchNorm2d)
    if norm.weight is not None:
        norm.weight = nn.Parameter(norm.weight.detach()[keep].clone())
        norm.bias = nn.Parameter(norm.bias.detach()[keep].clone())
    if norm.running_mean is not None and norm.running_var is not None:
        norm.running_mean = norm.running_mean[keep].clone()
        norm.running_var = norm.running_var[keep].clone()
    norm.num_features = len(keep)


# --- 2:4 semi-structured sparsity --------------------------------------------------------------

# The dense weight shape (rows, columns) multiples that both of torch's 2:4 kernels (cuSPARSELt,
# and CUTLASS, the stricter) accept for float16/bfloat16.
SPARSE_2_4_MULTIPLES = (32, 64)


def mask_2_4(weight: torch.Tensor) -> torch.Tensor:
    """Boolean keep-mask of `weight`'s shape: viewing it as [out, in * k * k], in every group of
    4 consecutive weights along the input axis, the 2 largest in magnitude (ties: the lower
    index). Raises ValueError when that axis is not a multiple of 4."""
    import torch

    rows = weight.detach().reshape(weight.shape[0], -1)
    if rows.shape[1] % 4:
        raise ValueError(f"input dimension {rows.shape[1]} is not a multiple of 4")
    groups = rows.abs().reshape(rows.shape[0], -1, 4)
    # A stable descending sort picks ties deterministically (topk does not promise it).
    top_two = torch.argsort(-groups, dim=-1, stable=True)[..., :2]
    mask = torch.zeros_like(groups, dtype=torch.bool).scatter_(-1, top_two, True)
    return mask.reshape(weight.shape)


def apply_2_4_mask(module: torch.nn.Module) -> torch.nn.Module:
    """A copy with `mask_2_4` applied to every Linear and Conv2d weight whose input dimension
    (in * k * k for a convolution) is a multiple of 4; other layers stay dense."""
    import torch
    from torch import nn

    masked = copy.deepcopy(module).eval()
    layers = [
        child
        for child in masked.modules()
        if isinstance(child, nn.Linear | nn.Conv2d) and child.weight[0].numel() % 4 == 0
    ]
    if not layers:
        raise Unsupported(
            "prune.method=semi_structured_2_4: no Linear/Conv2d has an input dimension that is a "
            "multiple of 4"
        )
    with torch.no_grad():
        for layer in layers:
            layer.weight.mul_(mask_2_4(layer.weight))
    return masked


def sparsify_2_4(module: torch.nn.Module) -> torch.nn.Module:
    """A copy whose 2:4-masked float16/bfloat16 Linear weights on CUDA are compressed into
    torch's semi-structured sparse tensors (cuSPARSELt, else CUTLASS), which the sparse kernels
    then multiply. Linear layers of other shapes stay dense; convolutions have no 2:4 kernels."""
    from torch import nn

    sparse = copy.deepcopy(module)
    layers = [child for child in sparse.modules() if _accelerable_2_4(child)]
    if not layers:
        rows, columns = SPARSE_2_4_MULTIPLES
        raise Unsupported(
            "prune.method=semi_structured_2_4: no float16/bfloat16 CUDA Linear layer has a shape "
            f"the 2:4 kernels accept (out_features a multiple of {rows}, in_features of {columns})"
        )
    for layer in layers:
        assert isinstance(layer, nn.Linear)
        layer.weight = nn.Parameter(_to_semi_structured(layer.weight.detach()), False)
    return sparse


def _accelerable_2_4(child: nn.Module) -> bool:
    import torch
    from torch import nn

    if not isinstance(child, nn.Linear):
        return False
    weight = child.weight
    rows, columns = SPARSE_2_4_MULTIPLES
    return (
        weight.is_cuda
        and weight.dtype in (torch.float16, torch.bfloat16)
        and weight.shape[0] % rows == 0
        and weight.shape[1] % columns == 0
    )


def _to_semi_structured(weight: torch.Tensor) -> torch.Tensor:
    import torch
    from torch.sparse import SparseSemiStructuredTensorCUSPARSELT as CuSparseLt
    from torch.sparse import SparseSemiStructuredTensorCUTLASS as Cutlass

    backend = CuSparseLt if torch.backends.cusparselt.is_available() else Cutlass
    return backend.from_dense(weight.contiguous())
