"""A re-tune's comparison with the previous choice in MLflow: the paired ratios of the
head-to-head, or no figure at all where the configuration did not change."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from mlflow.tracking import MlflowClient

from autotune.conclusion.previous import SAME_CONFIGURATION, PreviousChoice
from autotune.tracking import PREVIOUS_RUN_TAG, MlflowTracker, comparison_figures
from tests.conclusion_support import FINALIST, measured_previous, retuned


def measured_comparison() -> dict[str, Any]:
    """The new choice at half the previous one's p95, measured in the same rounds."""
    revalidation, _ = retuned({0: 2.0, 3: 0.5, 5: 1.0}, measured_previous())
    assert revalidation.previous is not None
    return revalidation.previous.model_dump(mode="json")


def unchanged_comparison() -> dict[str, Any]:
    previous = PreviousChoice(FINALIST.config, "before", "run-before", FINALIST)
    revalidation, _ = retuned({0: 2.0, 3: 0.5}, previous)
    assert revalidation.previous is not None
    return revalidation.previous.model_dump(mode="json")


def test_the_comparison_is_logged_as_paired_ratios(tmp_path: Path, mlflow_uri: str) -> None:
    comparison = measured_comparison()
    tracker = MlflowTracker(mlflow_uri, "tests", "after")
    tracker.log_comparison(comparison)
    tracker.finish("FINISHED")

    client = MlflowClient(mlflow_uri)
    run = client.get_run(tracker.parent_run_id)
    metrics = run.data.metrics
    assert metrics["against_previous.latency_p95_ms.ratio"] == 0.5
    assert metrics["against_previous.latency_p95_ms.ci_low"] == 0.5
    assert metrics["against_previous.throughput_per_s.ratio"] == 2.0
    assert metrics["against_previous.rounds"] == 10
    assert not [k for k in metrics if k.startswith("change.")]
    assert run.data.tags[PREVIOUS_RUN_TAG] == "run-before"
    assert run.data.tags["autotune.against_previous"] == comparison["text"]
    local = client.download_artifacts(run.info.run_id, "comparison.json", str(tmp_path))
    logged = json.loads(Path(local).read_text())
    assert logged == {
        "current": {"study": "after", "run_id": tracker.parent_run_id},
        **comparison,
    }
    assert "metric_changes" not in logged


def test_an_unchanged_configuration_logs_no_figure(tmp_path: Path, mlflow_uri: str) -> None:
    """A first round compared two configurations; the second round chose the previous one
    again: nothing was compared, and the first round's ratios do not outlive it."""
    first = MlflowTracker(mlflow_uri, "tests", "after")
    first.log_comparison(measured_comparison())
    first.finish("FINISHED")
    resumed = MlflowTracker(mlflow_uri, "tests", "after")
    resumed.log_comparison(unchanged_comparison())
    resumed.finish("FINISHED")

    client = MlflowClient(mlflow_uri)
    run = client.get_run(resumed.parent_run_id)
    figures = {k: v for k, v in run.data.metrics.items() if k.startswith("against_previous.")}
    assert figures and all(math.isnan(v) for v in figures.values())
    assert run.data.tags["autotune.against_previous"] == SAME_CONFIGURATION
    local = client.download_artifacts(run.info.run_id, "comparison.json", str(tmp_path))
    logged = json.loads(Path(local).read_text())
    assert logged["text"] == SAME_CONFIGURATION and logged["same_configuration"] is True
    assert logged["ratios"] == {} and logged["config_changes"] == {}


def test_comparison_figures_are_the_ratios_with_their_intervals() -> None:
    figures = comparison_figures(measured_comparison())
    assert figures["against_previous.latency_p95_ms.ci_high"] == 0.5
    assert figures["against_previous.contended_rounds"] == 0
    assert comparison_figures(unchanged_comparison()) == {}
