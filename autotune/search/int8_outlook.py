"""What a study says at its end of an int8 mode none of whose variants met the accuracy
bound: its closest variant with its figures, and what the model's sensitivity ranking
predicts (`autotune.core.int8_fallback`): that int8 cannot pay on this model (the bound
needs more than a quarter of its quantizable nodes in float, so the strategy measured no
more fallback), or how many nodes in float would meet it where the space stopped short."""

from __future__ import annotations

from collections.abc import Iterable

from autotune.core.contract.trials import SensitivityTable
from autotune.core.int8_fallback import (
    FLOAT_SHARE_LIMIT,
    fallback_needed,
    pays,
    quantized_nodes,
    ranking_of,
)
from autotune.core.knobs import FALLBACK_KEY, PRECISION_KEY
from autotune.core.knobs.engines import CALIBRATION, INT8_MODES, OP_TYPES
from autotune.results.records import TrialRecord
from autotune.strategies.int8_steps import quantized_op_types

DROP = "accuracy_drop"


def int8_outlook_notes(
    records: Iterable[TrialRecord], tables: list[SensitivityTable], max_drop: float | None
) -> list[str]:
    """A note per int8 mode whose measured variants all break `max_accuracy_drop`."""
    if max_drop is None:
        return []
    measured = [r for r in records if r.metrics is not None and r.metrics.get(DROP) is not None]
    notes = []
    for mode in INT8_MODES:
        of_mode = [r for r in measured if r.config.get(PRECISION_KEY) == mode]
        if not of_mode or any(float(r.metrics[DROP]) <= max_drop for r in of_mode if r.metrics):
            continue
        closest = min(of_mode, key=lambda r: float(r.metrics[DROP]) if r.metrics else 1.0)
        notes.append(_note(mode, closest, ranking_of(tables, _model(closest), mode), max_drop))
    return notes


def _note(mode: str, closest: TrialRecord, table: SensitivityTable | None, bound: float) -> str:
    assert closest.metrics is not None
    drop = float(closest.metrics[DROP])
    head = (
        f"{mode}: no variant met max_accuracy_drop {bound:g}; the closest, "
        f"{_described(closest)}, drops {drop:.4f}"
    )
    if table is None:
        return f"{head} (no sensitivity ranking of its model: the space keeps no node in float)"
    op_types = quantized_op_types(closest.config)
    here = int(closest.config.get(FALLBACK_KEY, 0) or 0)
    needed = fallback_needed(table, drop, here, bound, op_types)
    quantized = quantized_nodes(table, op_types)
    if needed is None:
        return f"{head}; its sensitivity ranking measured no drop to predict a fallback by"
    predicted = f"the sensitivity ranking predicts {needed} of {quantized} quantizable nodes"
    if not pays(table, needed, op_types):
        return (
            f"{head}. int8 cannot pay on this model: {predicted} in float to meet the bound, "
            f"more than {FLOAT_SHARE_LIMIT:.0%} of them, so no larger fallback was measured"
        )
    return f"{head}; {predicted} in float would meet the bound (precision.fallback: {needed})"


def _described(record: TrialRecord) -> str:
    """`trial #7 (onnxruntime, percentile calibration, matmul_only, 1 node in float, p95
    2.10 ms)`."""
    config, metrics = record.config, record.metrics or {}
    parts = [str(config.get("runtime.engine"))]
    if CALIBRATION.key in config:
        parts.append(f"{config[CALIBRATION.key]} calibration")
    if config.get(OP_TYPES.key, OP_TYPES.default) != OP_TYPES.default:
        parts.append(str(config[OP_TYPES.key]))
    in_float = int(config.get(FALLBACK_KEY, 0) or 0)
    if in_float:
        parts.append(f"{in_float} node{'s' if in_float > 1 else ''} in float")
    if metrics.get("latency_p95_ms") is not None and record.status == "ok":
        parts.append(f"p95 {float(metrics['latency_p95_ms']):.2f} ms")
    return f"trial #{record.number} ({', '.join(parts)})"


def _model(record: TrialRecord) -> str | None:
    return None if record.provenance is None else record.provenance.model_sha256
