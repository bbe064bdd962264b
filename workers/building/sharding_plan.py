"""The tensor-parallel plan: which Linear layers are split across ranks, and how.

It pairs Linear layers where the first one's output flows, through elementwise ops only
(activations, dropout), into the second one and nowhere else (an MLP, a transformer's
feed-forward block): the first is split by output features (`ColwiseParallel`), the second by
input features (`RowwiseParallel`, whose partial results are summed by an all-reduce); every
other layer is replicated. Pairs are found by running the model once on sample inputs under a
`TorchFunctionMode` that records which op fed which, so Python control flow does not get in the
way (torch.fx tracing would).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from autotune.core.errors import Unsupported
from workers.building.torch_io import module_device, torch_inputs
from workers.building.variants import BuildContext, TorchVariant

if TYPE_CHECKING:
    import torch
    from torch.distributed.tensor.parallel import ParallelStyle

# Ops that act on each element alone (a shard of the features stays a shard), by the name
# torch function modes see them under (functional, torch.* and Tensor method forms).
ELEMENTWISE_OPS = frozenset(
    {
        "relu", "relu6", "gelu", "silu", "mish", "tanh", "sigmoid", "hardtanh",
        "hardswish", "hardsigmoid", "leaky_relu", "elu", "selu", "celu", "softplus",
        "logsigmoid", "dropout", "alpha_dropout", "feature_alpha_dropout", "identity",
        "contiguous", "clone", "neg", "abs", "exp", "log", "sqrt", "rsqrt", "square", "erf",
        # arithmetic counts when its only tensor operand is the chain's tensor (x * 0.5, x * x)
        "add", "radd", "sub", "rsub", "mul", "rmul", "div", "truediv", "rtruediv", "pow",
    }
)  # fmt: skip


@dataclass
class _Op:
    name: str  # without leading or trailing underscores: relu_ and __mul__ are relu and mul
    func: Any
    inputs: list[int]
    outputs: list[int]
    weight_id: int | None = None  # for F.linear: the weight's id


def find_linear_pairs(module: torch.nn.Module, inputs: torch.Tensor) -> list[tuple[str, str]]:
    """(first, second) module names of the Linear pairs the plan can shard, in execution order:
    the first's output reaches the second through elementwise ops only and is used nowhere
    else, and each Linear is called exactly once."""
    from torch import nn

    linears = {
        id(child.weight): name
        for name, child in module.named_modules()
        if isinstance(child, nn.Linear)
    }
    if not linears:
        return []
    ops, keep = _record_ops(module, inputs)
    del keep  # held only while recording, so that tensor ids stay unique
    calls: dict[str, int] = {}
    linear_ops: dict[int, str] = {}
    for index, op in enumerate(ops):
        if op.weight_id is not None and op.weight_id in linears:
            name = linears[op.weight_id]
            calls[name] = calls.get(name, 0) + 1
            linear_ops[index] = name
    consumers: dict[int, list[int]] = {}
    for index, op in enumerate(ops):
        for tensor in set(op.inputs):
            consumers.setdefault(tensor, []).append(index)
    pairs: list[tuple[str, str]] = []
    used: set[str] = set()
    for index, first in linear_ops.items():
        if calls[first] != 1 or first in used:
            continue
        second = _follow_elementwise(ops, consumers, index, linear_ops)
        if second is not None and calls[second] == 1 and second not in used:
            pairs.append((first, second))
            used.update((first, second))
    return pairs


def _follow_elementwise(
    ops: list[_Op], consumers: dict[int, list[int]], start: int, linear_ops: dict[int, str]
) -> str | None:
    """The Linear that the output of op `start` reaches through elementwise ops only."""
    if len(ops[start].outputs) != 1:
        return None
    tensor = ops[start].outputs[0]
    while True:
        users = consumers.get(tensor, [])
        # In-place elementwise ops (ReLU(inplace=True), eval-mode dropout returning its input)
        # keep the same tensor: not a step of the chain, not another use either.
        onward = [
            i for i in users
            if not (ops[i].name in ELEMENTWISE_OPS and ops[i].outputs == [tensor])
        ]  # fmt: skip
        if len(onward) != 1:
            return None
        op = ops[onward[0]]
        if onward[0] in linear_ops:
            return linear_ops[onward[0]] if op.inputs[:1] == [tensor] else None
        if op.name not in ELEMENTWISE_OPS or set(op.inputs) != {tensor} or len(op.outputs) != 1:
            return None
        tensor = op.outputs[0]


def _record_ops(module: torch.nn.Module, inputs: torch.Tensor) -> tuple[list[_Op], list[Any]]:
    """Every torch function call of one forward that produces tensors, with the ids of its
    tensor inputs and outputs (the tensors are kept alive, so ids are not reused)."""
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._pytree import tree_leaves

    ops: list[_Op] = []
    keep: list[Any] = []

    class Recorder(TorchFunctionMode):
        def __torch_function__(  # type: ignore[no-untyped-def]
            self, func, types, args=(), kwargs=None
        ):
            result = func(*args, **(kwargs or {}))
            outputs = [t for t in tree_leaves(result) if isinstance(t, torch.Tensor)]
            if outputs:
                tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
                keep.extend(tensors + outputs)
                op = _Op(
                    getattr(func, "__name__", "").strip("_"),
                    func,
                    [id(t) for t in tensors],
                    [id(t) for t in outputs],
                )
                if func is torch.nn.functional.linear and len(args) > 1:
                    op.weight_id = id(args[1])
                    op.inputs = [id(args[0])]
                ops.append(op)
            return result

    with torch.inference_mode(), Recorder():
        module(inputs)
    return ops, keep


def plan_pairs(
    module: torch.nn.Module, inputs: torch.Tensor, world_size: int
) -> list[tuple[str, str]]:
    """The Linear pairs a `world_size`-way plan shards; `Unsupported` when there are none."""
    from torch import nn

    pairs = find_linear_pairs(module, inputs)
    modules = dict(module.named_modules())
    even = [
        (first, second)
        for first, second in pairs
        if _out_features(modules[first]) % world_size == 0
    ]
    key = f"shard.tensor_parallel={world_size}"
    if not pairs:
        has_linear = any(isinstance(m, nn.Linear) for m in module.modules())
        what = "Linear -> elementwise -> Linear pair" if has_linear else "nn.Linear layer"
        raise Unsupported(f"{key}: the model has no {what} to split across ranks")
    if not even:
        widths = [_out_features(modules[first]) for first, _ in pairs]
        raise Unsupported(f"{key}: no Linear pair's hidden width {widths} divides by {world_size}")
    return even


def _out_features(module: Any) -> int:
    return int(module.out_features)


def tensor_parallel_plan(pairs: Sequence[tuple[str, str]]) -> dict[str, ParallelStyle]:
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    plan: dict[str, ParallelStyle] = {}
    for first, second in pairs:
        plan[first] = ColwiseParallel()
        plan[second] = RowwiseParallel()
    return plan


def sample_inputs(variant: TorchVariant, context: BuildContext) -> torch.Tensor:
    """The transforms' sample inputs as the variant takes them (dtype, device)."""
    device = module_device(variant.module)
    return torch_inputs(np.ascontiguousarray(context.sample_inputs), variant.input_dtype, device)
