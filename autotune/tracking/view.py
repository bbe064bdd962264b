"""A saved view of the MLflow runs table (an experiment tag its "Views" menu and a link open)
and the links to it.

MLflow 3.17's UI opens an experiment on its GenAI overview whatever the experiment's tags say:
the page it opens is chosen by the browser's workflow type, from the address's `workflowType`
or else the browser's local storage (`mlflow.workflowType_v1`, GenAI where unset), and a
fresh runs table shows no metric column and its child runs folded under their parent. What
the store can set is this view and the links into it, each with
`workflowType=machine_learning` so that it opens the runs whatever the browser chose before.

The view shows every trial (sorted by the metric the selection ranks by, the trials flat, not
folded), their key figures rounded (`rounded/NAME`) in columns wide enough for their names,
their marks and main parameters, and in its chart view a scatter of each pair of objectives.
It cannot pin the chosen trial and the baseline to the top: a shared view leaves out pinned,
hidden and expanded runs (MLflow keeps those per browser); their runs' names and colours mark
them instead (see `MlflowTracker.log_results`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import zlib
from collections.abc import Sequence
from typing import Any

from autotune.core.metrics import Metric
from autotune.tracking.review import key_figures, pairs, rounded

VIEW_TAG_PREFIX = "mlflow.sharedViewState."  # the MLflow UI's saved views (its "Views" menu)
VIEW_URL_PARAM = "viewStateShareKey"
# The runs, in the UI's model-training pages whatever the browser chose before.
WORKFLOW = "workflowType=machine_learning"
# The experiment tag MLflow's charts take the primary metric from (the first chart's).
PRIMARY_METRIC_TAG = "mlflow.experiment.primaryMetric.name"
VIEW_PARAMS = ("runtime.engine", "precision.mode", "batch.size", "prune.method", "runtime.threads")
VIEW_TAGS = ("chosen", "baseline", "pareto", "feasible", "status")
# A column header's pixels per character and what else it holds (the sort arrow, padding).
HEADER_PX_PER_CHAR, HEADER_PX_EXTRA, MIN_COLUMN_PX = 7, 40, 100
# The Run Name column (MLflow's: 190 px), wide enough for `trial-1234 (chosen, baseline)`.
RUN_NAME_COLUMN, RUN_NAME_PX = "attributes.`Run Name`", 240
CHART_SECTION = "autotune: the trade-off"


def view_id(study: str) -> str:
    return "autotune" + hashlib.sha256(study.encode()).hexdigest()[:16]


def runs_view(
    study: str, objectives: Sequence[Metric], selection: Metric, now_ms: int
) -> tuple[str, str]:
    """The experiment tag of the study's saved view: (tag key, tag value)."""
    state = view_state(study, objectives, selection)
    packed = base64.b64encode(zlib.compress(json.dumps(state).encode())).decode()
    envelope = {
        "name": f"autotune: {study}, every trial with its figures",
        "createdAt": now_ms,
        "updatedAt": now_ms,
        "state": f"deflate;{packed}",
    }
    return VIEW_TAG_PREFIX + view_id(study), json.dumps(envelope)


def view_state(study: str, objectives: Sequence[Metric], selection: Metric) -> dict[str, Any]:
    """What the view sets: MLflow's search facets and the UI state a shared view carries."""
    names = key_figures(objectives)
    first = [selection.name, *(n for n in names if n != selection.name)]
    columns = [
        *(f"metrics.`{rounded(name)}`" for name in first),
        *(f"tags.`{name}`" for name in VIEW_TAGS),
        *(f"params.`{name}`" for name in VIEW_PARAMS),
    ]
    section = "autotune" + hashlib.sha256(f"{study}/charts".encode()).hexdigest()[:12]
    return {
        "searchFilter": "",
        # a sort by a metric lists child runs flat, not folded under their parent
        "orderByKey": f"metrics.`{rounded(selection.name)}`",
        "orderByAsc": selection.direction.value == "minimize",
        "startTime": "ALL",
        "lifecycleFilter": "Active",
        "datasetsFilter": [],
        "modelVersionFilter": "All Runs",
        "selectedColumns": columns,
        "columnOrder": [RUN_NAME_COLUMN, *columns],
        "columnWidths": {
            RUN_NAME_COLUMN: RUN_NAME_PX,
            **{column: column_width(column) for column in columns},
        },
        "runsHiddenMode": "SHOW_ALL",  # every run in the charts (MLflow's default: 10)
        "compareRunCharts": scatter_charts(objectives, selection, section),
        "compareRunSections": [
            {"uuid": section, "name": CHART_SECTION, "display": True, "isReordered": False}
        ],
        "isAccordionReordered": True,  # the trade-off first, MLflow's own charts after it
        "viewMaximized": False,
        "runListHidden": False,
        "groupBy": None,
        "groupsExpanded": {},
        "useGroupedValuesInCharts": True,
        "hideEmptyCharts": True,
    }


def column_width(column: str) -> int:
    """Pixels for a column whose header is the name between the backquotes."""
    name = column.split("`")[1]
    return max(MIN_COLUMN_PX, HEADER_PX_PER_CHAR * len(name) + HEADER_PX_EXTRA)


def scatter_charts(
    objectives: Sequence[Metric], selection: Metric, section: str
) -> list[dict[str, Any]]:
    """A scatter chart (MLflow's card) per pair of objectives, the pairs with the metric the
    selection ranks by first and that metric on x. MLflow's scatter has no log axis."""
    ordered = [selection, *(m for m in objectives if m != selection)]
    return [
        {
            "uuid": f"{section}-{i}",
            "type": "SCATTER",
            "runsCountToCompare": 1000,
            "metricSectionId": section,
            "deleted": False,
            "isGenerated": False,
            "displayName": f"{y.name} vs {x.name}",
            "xaxis": {"key": x.name, "type": "METRIC"},
            "yaxis": {"key": y.name, "type": "METRIC"},
        }
        for i, (x, y) in enumerate(pairs(ordered))
    ]


def view_link(experiment_id: str, study: str, charts: bool = False) -> str:
    """The UI's address (after its host) of the study's saved view: its table, or its
    charts."""
    mode = "&compareRunsMode=CHART" if charts else ""
    return f"#/experiments/{experiment_id}/runs?{WORKFLOW}&{VIEW_URL_PARAM}={view_id(study)}{mode}"


def run_link(experiment_id: str, run_id: str) -> str:
    return f"#/experiments/{experiment_id}/runs/{run_id}?{WORKFLOW}"


def study_links(experiment_id: str, study: str, run_id: str) -> list[tuple[str, str]]:
    """The links a description gives: (label, address) of the table, the charts and the
    study's run."""
    return [
        ("every trial with its figures", view_link(experiment_id, study)),
        ("the trade-off as charts", view_link(experiment_id, study, charts=True)),
        ("the study's run", run_link(experiment_id, run_id)),
    ]
