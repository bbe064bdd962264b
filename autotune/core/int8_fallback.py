"""What an int8 model's sensitivity ranking predicts of its fallback (`precision.fallback`:
how many of its most sensitive nodes stay in float), and when int8 cannot pay.

Node drops add up roughly for small perturbations, so a variant's accuracy drop is taken to
be carried by its nodes in proportion to their drops: with the ranking's measured drops
summing to S, the k largest to S_k, and the variant at fallback c measured at drop D, the
drop with k nodes in float is predicted as D × (1 − S_k / S) / (1 − S_c / S), which from
c = 0 is D × (1 − S_k / S). Only nodes of the op types the variant quantizes count
(`precision.op_types`: a node that stays in float anyway carries none of its drop).

int8 cannot pay where the bound needs more than `FLOAT_SHARE_LIMIT` of the quantizable nodes
in float: each float node costs its float kernel and a QuantizeLinear/DequantizeLinear pair
at its edges, and the speed-up shrinks fast with them (MiniLM's int8_dynamic kept 1.70× of
fp32 with 4 of 36 MatMuls in float against 2.13× whole: experiments/results/
int8-fallback-cpu.md); a quarter is the line drawn."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from autotune.core.contract.trials import RankedFormat, SensitivityTable
from autotune.core.knobs import ENGINE_KEY, ENGINES, PRECISION_KEY

FLOAT_SHARE_LIMIT = 0.25
# precision.op_types -> the op types static int8 quantizes (None: every one it knows).
STATIC_OP_TYPES: dict[str, tuple[str, ...] | None] = {
    "all": None,
    "matmul_only": ("MatMul", "Gemm"),
}


def quantized_nodes(table: SensitivityTable, op_types: Collection[str] | None = None) -> int:
    """How many of the ranking's nodes a variant quantizing `op_types` (None: all) holds."""
    return len([n for n in table.nodes if op_types is None or n.op_type in op_types])


def predicted_drop(
    table: SensitivityTable,
    drop: float,
    here: int,
    fallback: int,
    op_types: Collection[str] | None = None,
) -> float | None:
    """The accuracy drop predicted with the `fallback` most sensitive nodes in float, for a
    variant measured at `drop` with `here` of them in float (the module's docstring); None
    where the ranking measured no drop, or none beyond the `here` nodes already in float."""
    drops = sorted(
        (
            n.drop
            for n in table.nodes
            if n.drop is not None and n.drop > 0 and (op_types is None or n.op_type in op_types)
        ),
        reverse=True,
    )
    total = sum(drops)
    left = 1.0 - sum(drops[:here]) / total if total > 0 else 0.0
    if left <= 0:
        return None
    return drop * (1.0 - sum(drops[:fallback]) / total) / left


def fallback_needed(
    table: SensitivityTable,
    drop: float,
    here: int,
    bound: float,
    op_types: Collection[str] | None = None,
) -> int | None:
    """The fewest nodes in float, more than `here`, predicted to bring a variant measured at
    `drop` with `here` nodes in float within `bound`; None where there is no prediction."""
    for fallback in range(here + 1, quantized_nodes(table, op_types) + 1):
        predicted = predicted_drop(table, drop, here, fallback, op_types)
        if predicted is None:
            return None
        if predicted <= bound:
            return fallback
    return None


def pays(table: SensitivityTable, needed: int, op_types: Collection[str] | None = None) -> bool:
    """Whether `needed` nodes in float leave an int8 model worth running (the module's
    docstring)."""
    return needed <= FLOAT_SHARE_LIMIT * quantized_nodes(table, op_types)


def ranking_of(
    tables: Iterable[SensitivityTable], model_sha256: str | None, config: Mapping[str, object]
) -> SensitivityTable | None:
    """The ranking `config`'s int8 variant falls back by: of the model `model_sha256` in
    `config`'s mode, ranked as its engine runs it (a torch module's Linear modules, or an
    ONNX model's nodes), else the one such ranking where only one is known (the model ranked
    may be an export or another variant's float model); None otherwise."""
    mode, ranked = config.get(PRECISION_KEY), ranked_format(config)
    of_mode = [table for table in tables if table.mode == mode and table.ranked == ranked]
    found = next((t for t in of_mode if t.model_sha256 == model_sha256), None)
    return found or (of_mode[0] if len(of_mode) == 1 else None)


def ranked_format(config: Mapping[str, object]) -> RankedFormat:
    """What `config`'s engine falls back by: a torch module's Linear modules on a torch
    engine, an ONNX model's nodes on any other."""
    engine = ENGINES.get(str(config.get(ENGINE_KEY)))
    return "torch" if engine is not None and engine.model_format == "torch" else "onnx"
