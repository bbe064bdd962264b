"""Pure helpers around a study's record: the Pareto table, a re-tune's comparison with the
previous choice as figures, and the figures and tags a measurement's contention turns
into."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from autotune.core.contract import Contention
from autotune.results.records import Candidate
from autotune.tracking.runs import REPEAT_TAG

if TYPE_CHECKING:
    from autotune.core.contract import TrialResult
    from autotune.results.records import TrialRecord


# The MLflow metrics of a re-tune's comparison with the previous choice.
AGAINST_PREVIOUS = "against_previous."


def comparison_figures(comparison: dict[str, Any]) -> dict[str, float]:
    """A re-tune's paired comparison with the previous choice (a `PreviousComparison`
    document) as MLflow metrics: against_previous.<metric>.{ratio,ci_low,ci_high} (chosen /
    previous, paired per round) and against_previous.rounds; none where nothing was compared
    (the same configuration, or the previous one not measured)."""
    ratios: dict[str, dict[str, float]] = comparison["ratios"]
    if not ratios:
        return {}
    figures = {f"{AGAINST_PREVIOUS}rounds": float(comparison["rounds"])}
    figures[f"{AGAINST_PREVIOUS}contended_rounds"] = float(comparison["contended_rounds"])
    for metric, value in ratios.items():
        for part, number in value.items():
            figures[f"{AGAINST_PREVIOUS}{metric}.{part}"] = float(number)
    return figures


def pareto_csv(candidates: Sequence[Candidate]) -> str:
    config_keys = sorted({k for c in candidates for k in c.config})
    metric_keys = sorted({k for c in candidates for k in c.metrics})
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["trial", "feasible", *config_keys, *metric_keys])
    for c in candidates:
        writer.writerow(
            [
                c.trial_number,
                c.feasible,
                *(c.config.get(k, "") for k in config_keys),
                *(c.metrics.get(k, "") for k in metric_keys),
            ]
        )
    return out.getvalue()


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def contention_tags(contention: Contention) -> dict[str, str]:
    tags = {
        "contended": str(contention.contended).lower(),
        "oversubscribed": str(contention.oversubscribed).lower(),
    }
    if contention.reasons:
        tags["contention"] = "; ".join(contention.reasons)
    if contention.gpu_throttle_reasons:
        tags["gpu_throttle_reasons"] = ",".join(contention.gpu_throttle_reasons)
    return tags


def contention_figures(contention: Contention) -> dict[str, float]:
    """The other load a measurement saw, as MLflow metrics contention.*."""
    figures = {
        "contention.other_cpu_share": contention.other_cpu_share,
        "contention.machine_other_cpu_share": contention.machine_other_cpu_share,
        "contention.steal_share": contention.steal_share,
        "contention.cores_to_itself": contention.cores_to_itself,
        "contention.waited_s": contention.waited_s,
    }
    if contention.cpu_pressure is not None:
        figures["contention.cpu_pressure"] = contention.cpu_pressure
    return figures


def trial_log(
    told: TrialRecord, result: TrialResult, study: str
) -> tuple[dict[str, Any] | None, dict[str, str]]:
    """What a tracker records of a told trial of `study`: its metrics (with the machine's
    other load during the measurement, as contention.*) and its tags (status, feasibility,
    reuse, a batch scan run again once quiet, and where and with what software it was
    measured). A repeat of one of the study's trials (answered from its measurement) is
    tagged with that trial's number and records no figures: each measurement is one point,
    in the runs table as everywhere."""
    tags: dict[str, str] = {"status": result.status}
    if result.reason:
        tags["failure_reason"] = result.reason[:5000]
    if told.reused_from is not None:
        tags.update(reused="true", reused_from=told.reused_from)
    if result.interrupted is not None:
        tags["interrupted"] = result.interrupted[:5000]
    if result.rescanned is not None:
        tags["rescanned"] = result.rescanned[:5000]
    repeat_of = told.repeat_of(study)
    if repeat_of is not None:
        tags[REPEAT_TAG] = str(repeat_of)
        return None, tags
    logged = told.metrics
    if told.has_metrics:
        tags["feasible"] = str(told.feasible).lower()
    provenance = result.provenance
    if provenance is not None:  # where and with what it was measured
        tags["host"] = provenance.host
        if provenance.hardware_fingerprint is not None:
            tags["hardware_fingerprint"] = provenance.hardware_fingerprint
        if provenance.node_id is not None:
            tags["node_id"] = provenance.node_id
        versions = ",".join(f"{k}={v}" for k, v in sorted(provenance.software.items()))
        tags["software"] = versions[:5000]
    contention = provenance.contention if provenance is not None else None
    if contention is not None:
        tags.update(contention_tags(contention))
        if logged is not None:
            logged = {**logged, **contention_figures(contention)}
    if result.times is not None and told.reused_from is None:
        logged = {**(logged or {}), **time_figures(result)}
    return logged, tags


def time_figures(result: TrialResult) -> dict[str, float]:
    """Where a trial's time went on its worker, as time.* figures (seconds); the int8
    sensitivity rankings its worker measured for it are part of its build."""
    assert result.times is not None
    phases = {f"time.{phase}": seconds for phase, seconds in result.times.model_dump().items()}
    ranking_s = sum(table.seconds for table in result.sensitivity if table.computed)
    if ranking_s:
        phases["time.int8_sensitivity_s"] = ranking_s
    return {**phases, "time.total_s": result.duration_s}
