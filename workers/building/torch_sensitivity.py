"""How much each Linear module of a torch model costs in fidelity when it alone is dynamic
int8: the ranking `precision.fallback` keeps the most sensitive modules of torch's
int8_dynamic model in float by.

torch's modules are ranked by their own sensitivity, not by the ONNX export's: torch runs
its own int8 kernels (fbgemm's dynamically quantized Linear), whose error is not ONNX
Runtime's, and an export's node names (`/encoder/layer.0/MatMul`) are not the qualified
module names `quantize_dynamic` takes; ranking the module that runs needs no export, and the
names it ranks are the ones the build keeps in float. A module's sensitivity is how far the
model with that module alone quantized (`quantize_dynamic` naming it) strays from the float
model: the caller's `infidelity` of it (the workload cache judges 1 -
`workers.measuring.evaluate.fidelity` of the model's outputs on SENSITIVITY_SAMPLES
evaluation inputs, as it does for ONNX). As for ONNX (`workers.building.sensitivity`), only
the MAX_MEASURED_NODES largest modules (by weight size) are measured; the rest follow them,
largest first. Each measurement quantizes a copy of the model, which is freed before the next.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from workers.building.quantization import quantizable_linears, quantize_linears
from workers.building.sensitivity import Sensitivity, rank_by_sensitivity

if TYPE_CHECKING:
    import torch

# The sensitivity tables' operation type of a torch module ranked.
LINEAR_OP_TYPE = "Linear"
TORCH_INT8_MODE = "int8_dynamic"

# 1 - fidelity of a quantized copy of the module to the float module.
ModuleInfidelity = Callable[["torch.nn.Module"], float]


def measure_module_sensitivity(
    module: torch.nn.Module, infidelity: ModuleInfidelity
) -> Sensitivity:
    """Each of the module's largest Linear modules that dynamic int8 quantizes, quantized
    alone, judged by `infidelity`; ranked by qualified name."""
    return rank_by_sensitivity(
        quantizable_linears(module),
        TORCH_INT8_MODE,
        lambda name: infidelity(quantize_linears(module, {name})),
    )
