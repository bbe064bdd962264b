"""The descriptions a reviewer reads in MLflow: the parent run's (`mlflow.note.content`: the
headline, links to the trials, the choice beside the baseline and why it won, the request, the
front) and the experiment's, which MLflow shows above every page of the experiment and in the
home page's list of experiments.

MLflow renders a description as GitHub-flavoured Markdown with no style of its own for tables
(no borders, no padding: the headers of a Markdown table run together, `energy_per_sample_j
throughput_per_s`) and cuts what is wider than its column. Figures are therefore set as
fixed-width blocks (a fenced code block keeps its spaces) a few columns wide under two-line
headers, and configurations as lists, which wrap.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from autotune.core.metrics import BOUNDS, METRICS, BoundKind, Metric
from autotune.tracking.review import Point, key_figures

# The columns a figure takes in a fixed-width block, at least.
MIN_WIDTH = 8
GAP = "  "


def review_note(
    study: str,
    tuned: dict[str, Any] | None,
    cloud: Sequence[Point],
    objectives: Sequence[Metric],
    request: dict[str, Any],
    links: Sequence[tuple[str, str]] = (),
) -> str:
    """Markdown for the parent run's description: the headline and the links (label,
    address) first (what the UI shows before "Show more"), the choice beside the baseline
    and why it won, the request, then the front. Every figure says where it comes from: the
    chosen configuration's and the baseline's from the head-to-head, the front's from the
    search; the constraints are listed once."""
    lines = [f"## autotune study `{study}`", ""]
    if tuned is not None:
        lines += [f"**Headline:** {(tuned.get('headline') or {}).get('text', '—')}", ""]
    if links:
        lines += [" · ".join(f"[{label}]({href})" for label, href in links), ""]
    front = [p for p in cloud if p.kind == "front"]
    if tuned is not None:
        lines += _choice_lines(tuned, objectives)
    elif not front:
        lines += ["**No configuration met the constraints.**", ""]
    lines += [*_request_lines(request, constraints=tuned is None), ""]
    if front:
        lines += _front_lines(front, objectives, "The feasible Pareto front", tuned is not None)
    else:
        lines += _front_lines(cloud, objectives, "Every measured configuration", False)
    lines += [
        "",
        "The Pareto report (`pareto/pareto_report.html`, every pair of objectives; "
        "`pareto/pareto_front.png` for a static view) and the tuned file (`tuned.yaml`) are "
        "among this run's artifacts; each trial is a child run tagged `pareto`, `chosen` and "
        "`baseline`, its key figures rounded as `rounded/NAME` beside the exact ones.",
    ]
    return "\n".join(lines) + "\n"


def _request_lines(request: dict[str, Any], constraints: bool) -> list[str]:
    selection = (request.get("selection") or {}).get("strategy", "—")
    model = request.get("model")
    source = _model_source(model) if isinstance(model, dict) else str(model or "—")
    lines = [
        f"- **Model:** `{source}`",
        f"- **Objectives:** {', '.join(request.get('objectives', [])) or '—'}; "
        f"**selection:** {selection}",
    ]
    if constraints:
        bounds = request.get("constraints") or {}
        shown = ", ".join(
            f"{name} {_relation(name)} {_bound(name, value)}"
            for name, value in bounds.items()
            if isinstance(value, int | float)
        )
        lines.append(f"- **Constraints:** {shown or 'none'}")
    return lines


def _model_source(model: dict[str, Any]) -> str:
    return str(next((v for k, v in model.items() if k != "task" and v), "—"))


def _relation(constraint: str) -> str:
    bound = BOUNDS.get(constraint)
    return "≥" if bound is not None and bound.kind is BoundKind.LOWER else "≤"


def _bound(constraint: str, value: float) -> str:
    bound = BOUNDS.get(constraint)
    return bound.metric.shown(value) if bound is not None else format(value, "g")


def _choice_lines(tuned: dict[str, Any], objectives: Sequence[Metric]) -> list[str]:
    report = tuned.get("revalidation") or {}
    chosen = (tuned.get("study") or {}).get("trial_number")
    baseline = report.get("baseline_trial")
    changed = ", ".join(f"`{k}={v}`" for k, v in sorted(tuned["config"].items()))
    lines = [f"**Chosen configuration** {_trial(chosen)}: {changed}".replace("  ", " ")]
    why = report.get("chosen_because")
    if why:
        lines += ["", f"**Why this one:** {why}"]
    metrics = [METRICS[name] for name in key_figures(objectives) if name in METRICS]
    rows = [
        (f"chosen {_trial(chosen)}".strip(), tuned["metrics"]),
        (f"baseline {_trial(baseline)}".strip(), tuned["baseline"]),
    ]
    if chosen is not None and chosen == baseline:  # the unmodified model kept: one row
        rows = [(f"chosen {_trial(chosen)} = baseline", tuned["metrics"])]
    lines += ["", f"**Beside the baseline**, {_head_to_head_source(tuned)}:", ""]
    lines += figures_block(metrics, rows)
    met = [
        f"{name} {_relation(name)} {_bound(name, c['bound'])}: {_bound(name, c['value'])} "
        f"({'met' if c['met'] else 'NOT met'})"
        for name, c in (tuned.get("constraints") or {}).items()
    ]
    if met:
        lines += ["", "**Constraints** (the chosen configuration, head to head): " + "; ".join(met)]
    return [*lines, ""]


def _trial(number: Any) -> str:
    return "" if number is None else f"#{number}"


def _head_to_head_source(tuned: dict[str, Any]) -> str:
    """Where the chosen configuration's and the baseline's figures come from."""
    report = tuned.get("revalidation") or {}
    rounds = report.get("rounds")
    if not rounds:
        return "figures of the tuned file"
    head = f"both re-measured head to head ({rounds} paired rounds with the finalists)"
    if report.get("confirmation") is not None:
        return (
            f"{head}: the chosen configuration's figures are from its confirming rounds "
            "against the baseline (fresh builds), the baseline's from the rounds that decided"
        )
    return f"{head}: both from the rounds that decided"


def _front_lines(
    cloud: Sequence[Point], objectives: Sequence[Metric], title: str, chosen_above: bool
) -> list[str]:
    ordered = sorted(cloud, key=lambda p: p.number)
    note = " (the chosen one's head-to-head figures are above)" if chosen_above else ""
    lines = [
        f"**{title}** ({len(cloud)} configurations), figures from the search: each trial "
        f"measured once, on its own{note}:",
        "",
    ]
    rows = [(f"#{p.number} {' '.join(p.roles)}".rstrip(), p.candidate.metrics) for p in ordered]
    lines += figures_block(list(objectives), rows)
    lines += ["", "Their configurations:", ""]
    for point in ordered:
        roles = f" ({', '.join(point.roles)})" if point.roles else ""
        config = ", ".join(
            f"{k.split('.')[-1]}={v}" for k, v in sorted(point.candidate.config.items())
        )
        lines.append(f"- **#{point.number}**{roles}: {config or 'the unmodified model'}")
    return lines


def figures_block(metrics: Sequence[Metric], rows: Sequence[tuple[str, Any]]) -> list[str]:
    """A fenced block of figures: a row per (label, metrics), a column per metric under its
    two-line header, each figure in its metric's number format, right-aligned."""
    headers = [header_lines(m) for m in metrics]
    cells = [[cell(m, figures.get(m.name)) for m in metrics] for _, figures in rows]
    widths = [
        max(MIN_WIDTH, *(len(h) for h in head), *(len(r[i]) for r in cells))
        for i, head in enumerate(headers)
    ]
    label_width = max(len(label) for label, _ in rows) if rows else 0
    text = []
    for line in range(2):
        parts = [h[line].rjust(w) for h, w in zip(headers, widths, strict=True)]
        text.append((" " * label_width + GAP + GAP.join(parts)).rstrip())
    for (label, _), values in zip(rows, cells, strict=True):
        parts = [v.rjust(w) for v, w in zip(values, widths, strict=True)]
        text.append(label.ljust(label_width) + GAP + GAP.join(parts))
    return ["```", *text, "```"]


def header_lines(metric: Metric) -> tuple[str, str]:
    """A column's header on two lines: the metric's own (`p95 ms` / `per call`), else its
    label split where the longer line is shortest, else the label under nothing."""
    if metric.header is not None and "\n" in metric.header:
        first, second = metric.header.split("\n", 1)
        return first, second
    words = metric.column.split()
    if len(words) < 2:
        return "", metric.column
    splits = [(" ".join(words[:i]), " ".join(words[i:])) for i in range(1, len(words))]
    return min(splits, key=lambda s: max(len(s[0]), len(s[1])))


def cell(metric: Metric, value: Any) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return metric.shown(float(value))
    return "—" if value is None else str(value)


# -- the experiment's description -------------------------------------------------------

# How each study's paragraph of the experiment's description starts (plain: the home page's
# list of experiments shows the description's first characters as they are written).
STUDY_LINE = "autotune study {study}:"


def experiment_note(current: str | None, study: str, links: Sequence[tuple[str, str]]) -> str:
    """The experiment's description with this study's paragraph first: its name and links to
    its trials (MLflow opens an experiment on its GenAI overview, which shows this
    description and no runs). Other studies' paragraphs follow, then whatever else the
    description held."""
    head = STUDY_LINE.format(study=study)
    line = f"{head} " + " · ".join(f"[{label}]({href})" for label, href in links)
    paragraphs = [p.strip() for p in (current or "").split("\n\n") if p.strip()]
    studies = [p for p in paragraphs if _is_study_line(p) and not p.startswith(head)]
    others = [p for p in paragraphs if not _is_study_line(p)]
    return "\n\n".join([line, *studies, *others]) + "\n"


def _is_study_line(paragraph: str) -> bool:
    prefix, _, rest = STUDY_LINE.partition("{study}")
    return paragraph.startswith(prefix) and rest in paragraph.split("\n", 1)[0]
