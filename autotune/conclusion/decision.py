"""Re-validation: before a configuration is returned, the finalists (the provisional choice
and its nearest Pareto neighbours) and the baseline are measured head to head, in
interleaved rounds (`workers.head_to_head`), and the re-measured figures decide.

- Every comparison is a paired ratio: per round, one configuration's figure divided by the
  other's from the same round, summarised by the median of those ratios and its
  distribution-free 95% interval (`autotune.core.stats.paired_ratio`).
- The leader is the selection's pick on the re-measured figures. A finalist whose paired
  ratio to the leader on the selection's metric has an interval containing 1 is tied with
  it: the difference is inside the measured noise. Among the leader and its ties, the
  configuration with the fewest changes from the baseline wins (it is the simplest to
  deploy); the leader wins a tie on that too.
- The headline is the chosen configuration against the baseline as paired ratios, with the
  number of rounds and whether other load was seen in them. Where the baseline is chosen, it
  is the baseline as `autotune.load` runs it (exported, loaded from its artifact) against the
  plain model, measured in rounds of their own: what the tuned file delivers, never the
  baseline divided by itself. A figure is given as a result
  only where its interval resolves it: an interval whose upper end is more than
  `UNRESOLVED_SPAN` times its lower end (278-1,100x) says the figure lies somewhere in that
  range, not that it is the median of the rounds, so it is shown as the range alone
  ("between 278x and 1,100x lower, not resolved"). Where such a figure is shown, or other
  load was seen in the rounds, the headline starts with that condition, before any figure.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from pydantic import Field

from autotune.conclusion.front import select
from autotune.core.contract import Contention, EntrantOutcome, RoundFigures, Strict
from autotune.core.metrics import (
    ENERGY,
    LATENCY_P95,
    METRICS,
    THROUGHPUT,
    Direction,
    Metric,
    get_metric,
    selection_objective,
)
from autotune.core.stats import PairedRatio, paired_ratio
from autotune.requests.request import Selection
from autotune.results.records import Candidate


def nearest_neighbours(
    chosen: Candidate, front: Sequence[Candidate], metrics: Sequence[Metric], count: int
) -> list[Candidate]:
    """The `count` front members closest to `chosen` in min-max normalized objective space."""
    others = [c for c in front if c.trial_number != chosen.trial_number]
    spans = {}
    for metric in metrics:
        values = [float(c.metrics[metric.name]) for c in front]
        spans[metric.name] = (min(values), (max(values) - min(values)) or 1.0)

    def distance(candidate: Candidate) -> float:
        total = 0.0
        for metric in metrics:
            low, span = spans[metric.name]
            a = (float(candidate.metrics[metric.name]) - low) / span
            b = (float(chosen.metrics[metric.name]) - low) / span
            total += (a - b) ** 2
        return total

    return sorted(others, key=lambda c: (distance(c), c.trial_number))[:count]


def with_metrics(
    candidate: Candidate, metrics: dict[str, Any], violations: dict[str, float]
) -> Candidate:
    return replace(
        candidate,
        metrics=metrics,
        violations=violations,
        feasible=all(v <= 0 for v in violations.values()),
    )


def round_figures() -> dict[str, Callable[[RoundFigures], float]]:
    """The metrics a round measures, each read from one entrant's block in one round
    (`Metric.round_reader`)."""
    return {m.name: m.round_reader for m in METRICS.values() if m.round_reader is not None}


def ratio(a: EntrantOutcome, b: EntrantOutcome, metric: str) -> PairedRatio:
    """a's figure over b's, paired round by round."""
    read = METRICS[metric].round_reader
    assert read is not None, f"{metric} is not measured in head-to-head rounds"
    return paired_ratio([read(f) for f in a.rounds], [read(f) for f in b.rounds])


def changes_from(config: dict[str, Any], baseline: dict[str, Any]) -> int:
    """How many settings differ from the baseline's (a setting on one side only counts)."""
    return sum(config.get(k) != baseline.get(k) for k in set(config) | set(baseline))


@dataclass(frozen=True)
class Decision:
    leader: Candidate
    chosen: Candidate
    tied_with: list[int]
    because: str


def decide(
    kept: Sequence[Candidate],
    outcomes: dict[int, EntrantOutcome],
    selection: Selection,
    baseline_config: dict[str, Any],
) -> Decision:
    """The leader on the re-measured figures, and the simplest configuration tied with it
    (see the module docstring)."""
    leader = select(kept, selection)
    metric = selection_objective(selection.strategy).name
    tied = []
    if METRICS[metric].round_reader is not None:
        mine = outcomes[leader.trial_number]
        tied = [
            c
            for c in kept
            if c.trial_number != leader.trial_number
            and ratio(outcomes[c.trial_number], mine, metric).contains(1.0)
        ]
    chosen = min(
        [leader, *tied],
        key=lambda c: (changes_from(c.config, baseline_config), c is not leader, c.trial_number),
    )
    if chosen is leader:
        because = f"the best {metric} of the finalists"
        if tied:
            because += f"; tied within the noise with {_numbers(tied)}, none of them simpler"
    else:
        because = (
            f"tied within the noise with #{leader.trial_number} on {metric}, with fewer changes "
            f"from the baseline ({changes_from(chosen.config, baseline_config)} vs "
            f"{changes_from(leader.config, baseline_config)})"
        )
    return Decision(leader, chosen, [c.trial_number for c in tied], because)


def _numbers(candidates: Sequence[Candidate]) -> str:
    return ", ".join(f"#{c.trial_number}" for c in candidates)


class Ratio(Strict):
    ratio: float = Field(description="median over the rounds of tuned / baseline")
    ci_low: float = Field(description="the 95% interval of that median")
    ci_high: float


Conditions = Literal["quiet", "contended", "replayed"]


class Headline(Strict):
    """The chosen configuration against the baseline, as measured side by side."""

    text: str
    ratios: dict[str, Ratio] = Field(description="metric -> tuned / baseline, paired per round")
    rounds: int
    contended_rounds: int
    conditions: Conditions
    same_as_baseline: bool
    resolved: bool = Field(
        default=True, description="every figure shown has an interval narrow enough to state it"
    )


def headline_metrics(summary: Headline) -> dict[str, float]:
    """The headline's paired ratios as MLflow metrics: headline.<metric>.{ratio,ci_low,ci_high}."""
    figures = {"headline.rounds": float(summary.rounds)}
    figures["headline.contended_rounds"] = float(summary.contended_rounds)
    for metric, value in summary.ratios.items():
        for part, number in value.model_dump().items():
            figures[f"headline.{metric}.{part}"] = float(number)
    return figures


def _lead(selection: Selection) -> str:
    """The figure a headline leads with: the selection's, throughput where that depends on the
    variant alone and the rounds do not re-measure it (accuracy)."""
    metric = selection_objective(selection.strategy)
    return THROUGHPUT.name if metric.from_variant else metric.name


def ratios_to(entrant: EntrantOutcome, baseline: EntrantOutcome) -> dict[str, Ratio]:
    """Every round figure of `entrant` over the baseline's, paired per round; a figure that
    was not measured (zero, as in a replayed table without energy, or the time per sample
    derived from a zero throughput) is left out."""
    ratios = {}
    for metric, read in round_figures().items():
        if not all(0 < read(f) < math.inf for f in [*entrant.rounds, *baseline.rounds]):
            continue
        paired = ratio(entrant, baseline, metric)
        ratios[metric] = Ratio(ratio=paired.median, ci_low=paired.low, ci_high=paired.high)
    return ratios


def headline(
    chosen: EntrantOutcome,
    baseline: EntrantOutcome,
    contention: Sequence[Contention],
    selection: Selection,
    energy_estimated: bool,
) -> Headline:
    """The paired ratios of every round figure, and one sentence that states the conditions
    first where they weaken the figures, then leads with the selection's figure, adds
    throughput and energy, and ends with the rounds (see the module docstring). Where the
    unmodified model stays, `chosen` is it as loaded from its artifact (`autotune.load`),
    measured against the plain model, and the figures say what loading it costs."""
    ratios = ratios_to(chosen, baseline)
    rounds = len(chosen.rounds)
    contended = sum(c.contended for c in contention)
    conditions: Conditions = "replayed" if not contention else "contended" if contended else "quiet"
    same = chosen.trial_number == baseline.trial_number
    shown: dict[str, Ratio] = {}
    if not same or chosen.loaded_artifact:
        order = (_lead(selection), THROUGHPUT.name, LATENCY_P95.name, ENERGY.name)
        shown = {m: ratios[m] for m in dict.fromkeys(order) if m in ratios}
    figures = "; ".join(
        _phrase(m, value) + (" (estimated)" if m == ENERGY.name and energy_estimated else "")
        for m, value in shown.items()
    )
    if same:
        stays = "the unmodified model is the best choice: no finalist beat it beyond the noise"
        loaded = f"{stays}; loaded from its artifact, against the plain model: {figures}"
        figures = loaded if shown else stays
    unresolved = [get_metric(m).label for m, value in shown.items() if not _resolved(value)]
    caveat = _caveat(conditions, contended / max(rounds, 1), unresolved)
    closing = f"{rounds} paired rounds" + ("" if caveat else f", {conditions}")
    return Headline(
        text="; ".join(part for part in (caveat, figures, closing) if part),
        ratios=ratios,
        rounds=rounds,
        contended_rounds=contended,
        conditions=conditions,
        same_as_baseline=same,
        resolved=not unresolved,
    )


# An interval wider than this factor (upper end over lower end) does not resolve its figure:
# a contended run's 278-1,100x spans 4x, a quiet digits run's 1.08-2.04x spans 1.9x.
UNRESOLVED_SPAN = 3.0


def _resolved(value: Ratio) -> bool:
    return value.ci_high <= UNRESOLVED_SPAN * value.ci_low


def _caveat(conditions: Conditions, contended_share: float, unresolved: list[str]) -> str:
    """What weakens the figures, said before them: other load in the rounds, or intervals
    too wide to give a figure; empty where neither."""
    if conditions == "contended":
        return (
            f"contended: {contended_share:.0%} of the rounds saw other load; re-run on an idle "
            "machine for a firm figure"
        )
    if unresolved:
        return (
            f"{conditions}, but not resolved: the 95% interval of {_listed(unresolved)} spans "
            f"more than {UNRESOLVED_SPAN:g}×; more rounds (validation.rounds) narrow it"
        )
    return ""


def _listed(words: list[str]) -> str:
    return " and ".join([", ".join(words[:-1]), words[-1]] if len(words) > 1 else words)


def _phrase(name: str, value: Ratio) -> str:
    """A higher-is-better figure (throughput) as its ratio; a lower-is-better one as how many
    times lower (or higher) it is than the baseline's, its interval turned the same way. A
    figure its interval does not resolve is that interval alone."""
    metric = get_metric(name)
    if not _resolved(value):
        return f"{metric.label} {_range(metric, value)}, not resolved"
    interval = _interval(value.ci_low, value.ci_high)
    if metric.direction is Direction.MAXIMIZE:
        return f"{_number(value.ratio)}× {metric.label} {interval}"
    if value.ratio <= 1.0:
        low, high = 1 / value.ci_high, 1 / value.ci_low
        return f"{_number(1 / value.ratio)}× lower {metric.label} {_interval(low, high)}"
    return f"{_number(value.ratio)}× higher {metric.label} {interval}"


def _range(metric: Metric, value: Ratio) -> str:
    """Where the interval puts the figure, in the words `_phrase` would use for it."""
    low, high = value.ci_low, value.ci_high
    if metric.direction is Direction.MAXIMIZE:
        return f"between {_number(low)}× and {_number(high)}×"
    if high <= 1.0:
        return f"between {_number(1 / high)}× and {_number(1 / low)}× lower"
    if low >= 1.0:
        return f"between {_number(low)}× and {_number(high)}× higher"
    return f"between {_number(1 / low)}× lower and {_number(high)}× higher"


def _interval(low: float, high: float) -> str:
    return f"(95% CI {_number(low)}–{_number(high)}×)"


def _number(value: float, digits: int = 3) -> str:
    """`value` to `digits` significant figures in plain digits, thousands separated (1,100;
    4.13; 0.00042), never in exponent notation as `:.3g` writes 1100 (1.1e+03)."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    rounded = float(f"{value:.{digits}g}")
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(rounded))))
    text = f"{rounded:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text
