"""What a study says at its end of an int8 mode none of whose variants met the accuracy
bound: its closest variant with its figures, and whether int8 can pay on the model: not
where that variant calls no faster than the same configuration in fp32, nor where the
model's sensitivity ranking predicts the bound needs more than a quarter of its quantizable
nodes in float (`autotune.core.int8_fallback`; the strategy then measured no more fallback);
else how many nodes in float would meet the bound where the space stopped short."""

from __future__ import annotations

from collections.abc import Iterable
from itertools import product

from autotune.core.contract.trials import SensitivityTable
from autotune.core.int8_fallback import (
    FLOAT_SHARE_LIMIT,
    fallback_needed,
    pays,
    quantized_nodes,
    ranked_format,
    ranking_of,
)
from autotune.core.knobs import FALLBACK_KEY, PRECISION_KEY
from autotune.core.knobs.engines import CALIBRATION, INT8_MODES, OP_TYPES
from autotune.results.records import TrialRecord
from autotune.strategies.int8_steps import FLOAT, quantized_op_types

DROP = "accuracy_drop"
P95 = "latency_p95_ms"
TIMED = ("ok", "screened")


def int8_outlook_notes(
    records: Iterable[TrialRecord], tables: list[SensitivityTable], max_drop: float | None
) -> list[str]:
    """A note per int8 mode and engine family (torch's own int8, or an ONNX model's) whose
    measured variants all break `max_accuracy_drop`."""
    if max_drop is None:
        return []
    ended = list(records)
    measured = [r for r in ended if r.metrics is not None and r.metrics.get(DROP) is not None]
    notes = []
    for mode, ranked in product(INT8_MODES, ("onnx", "torch")):
        of_mode = [
            r
            for r in measured
            if r.config.get(PRECISION_KEY) == mode and ranked_format(r.config) == ranked
        ]
        if not of_mode or any(_drop(r) <= max_drop for r in of_mode):
            continue
        closest = min(of_mode, key=_drop)
        table = ranking_of(tables, _model(closest), closest.config)
        label = mode if ranked == "onnx" else f"{mode} on torch"
        notes.append(_note(label, closest, _float_sibling(closest, ended), table, max_drop))
    return notes


def _note(
    label: str,
    closest: TrialRecord,
    fp32: TrialRecord | None,
    table: SensitivityTable | None,
    bound: float,
) -> str:
    drop = _drop(closest)
    head = (
        f"{label}: no variant met max_accuracy_drop {bound:g}; the closest, "
        f"{_described(closest)}, drops {drop:.4f}"
    )
    int8_ms, fp32_ms = _p95(closest), None if fp32 is None else _p95(fp32)
    if int8_ms is not None and fp32_ms is not None and int8_ms >= fp32_ms:
        return (
            f"{head}. int8 cannot pay on this model: its call takes {int8_ms:.3g} ms at p95, no "
            f"less than fp32's {fp32_ms:.3g} ms (trial #{fp32.number if fp32 else ''}), so no "
            "larger fallback was measured"
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


def _float_sibling(record: TrialRecord, records: list[TrialRecord]) -> TrialRecord | None:
    """The trial of `record`'s configuration in fp32 (its precision settings left out)."""
    wanted = {k: v for k, v in record.config.items() if not k.startswith("precision.")}
    wanted[PRECISION_KEY] = FLOAT
    return next((r for r in records if r.config == wanted and _p95(r) is not None), None)


def _drop(record: TrialRecord) -> float:
    return float((record.metrics or {}).get(DROP, 1.0))


def _p95(record: TrialRecord) -> float | None:
    value = (record.metrics or {}).get(P95) if record.status in TIMED else None
    return None if value is None else float(value)


def _described(record: TrialRecord) -> str:
    """`trial #7 (onnxruntime, percentile calibration, matmul_only, 1 node in float, p95
    2.10 ms)`."""
    config = record.config
    parts = [str(config.get("runtime.engine"))]
    if CALIBRATION.key in config:
        parts.append(f"{config[CALIBRATION.key]} calibration")
    if config.get(OP_TYPES.key, OP_TYPES.default) != OP_TYPES.default:
        parts.append(str(config[OP_TYPES.key]))
    in_float = int(config.get(FALLBACK_KEY, 0) or 0)
    if in_float:
        parts.append(f"{in_float} node{'s' if in_float > 1 else ''} in float")
    if _p95(record) is not None:
        parts.append(f"p95 {_p95(record):.3g} ms")
    return f"trial #{record.number} ({', '.join(parts)})"


def _model(record: TrialRecord) -> str | None:
    return None if record.provenance is None else record.provenance.model_sha256
