"""A re-tune's comparison with the configuration a previous tuning of the model chose.

The previous choice is measured in the same interleaved head-to-head rounds as the chosen
configuration (`autotune.conclusion.head_to_head`), so the comparison is their paired ratios
with a 95% interval each, from the rounds the headline comes from. Two figures measured at
different times, on a machine that may have been busier at one of them, are never set
against each other. Where the configuration did not change there is nothing to measure:
the comparison says `same configuration: no change`.

The previous choice is rebuilt for the new model from this study's trial of its
configuration (a warm start queues it right after the baseline). It is one more contestant:
where it meets the constraints re-measured it can be chosen, by the rules that choose among
the finalists (`autotune.conclusion.decision.decide`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from autotune.conclusion.decision import Conditions, Ratio, headline
from autotune.core.contract import ConfigValue, Contention, EntrantOutcome, Strict
from autotune.requests.request import Selection
from autotune.results.records import Candidate

SAME_CONFIGURATION = "same configuration: no change"


@dataclass(frozen=True)
class PreviousChoice:
    """The configuration a previous tuning chose, where it was recorded, and this study's
    measurement of it (None: no trial of this study completed it)."""

    config: dict[str, Any]
    study: str
    run_id: str
    measured: Candidate | None


def previous_choice(tuned: dict[str, Any], candidates: Sequence[Candidate]) -> PreviousChoice:
    """The previous tuned document's choice, and the first of `candidates` (this study's
    completed trials, the baseline first) with its configuration."""
    config = dict(tuned["config"])
    measured = next((c for c in candidates if c.config == config), None)
    return PreviousChoice(config, tuned["study"]["name"], tuned["mlflow"]["run_id"], measured)


class ConfigChange(Strict):
    before: ConfigValue | None = Field(description="the previous choice's value (None: unset)")
    after: ConfigValue | None = Field(description="the new choice's value (None: unset)")


class PreviousComparison(Strict):
    """The chosen configuration against the previous tuning's choice, measured side by side."""

    previous: dict[str, str] = Field(description="the previous tuning's study and MLflow run")
    previous_trial: int | None = Field(
        description="this study's trial of the previous configuration (None: none completed)"
    )
    config_changes: dict[str, ConfigChange]
    same_configuration: bool
    text: str = Field(
        description="the new choice against the previous one in the headline's words; "
        f"'{SAME_CONFIGURATION}'; or 'not compared: ' and why"
    )
    ratios: dict[str, Ratio] = Field(
        default_factory=dict, description="metric -> chosen / previous, paired per round"
    )
    rounds: int = 0
    contended_rounds: int = 0
    conditions: Conditions | None = Field(
        default=None, description="of the rounds compared; None where nothing was compared"
    )
    resolved: bool = True


def config_changes(before: dict[str, Any], after: dict[str, Any]) -> dict[str, ConfigChange]:
    """Every setting whose value differs (None for a setting on one side only)."""
    return {
        key: ConfigChange(before=before.get(key), after=after.get(key))
        for key in sorted(before.keys() | after.keys())
        if before.get(key) != after.get(key)
    }


def compared_with_previous(
    previous: PreviousChoice,
    chosen: Candidate,
    outcomes: dict[int, EntrantOutcome],
    contention: Sequence[Contention],
    selection: Selection,
) -> PreviousComparison:
    """The chosen configuration over the previous choice, from the rounds in `outcomes` and
    `contention` (those the headline comes from)."""
    measured = previous.measured
    common: dict[str, Any] = {
        "previous": {"study": previous.study, "run_id": previous.run_id},
        "previous_trial": None if measured is None else measured.trial_number,
        "config_changes": config_changes(previous.config, chosen.config),
    }
    if not common["config_changes"]:
        return PreviousComparison(**common, same_configuration=True, text=SAME_CONFIGURATION)
    outcome = None if measured is None else outcomes.get(measured.trial_number)
    if outcome is None or outcome.status != "ok" or not outcome.rounds:
        text = f"not compared: {_why_not_measured(outcome)}"
        return PreviousComparison(**common, same_configuration=False, text=text)
    estimated = chosen.metrics["energy_source"] == "estimate"
    summary = headline(outcomes[chosen.trial_number], outcome, contention, selection, estimated)
    return PreviousComparison(
        **common,
        same_configuration=False,
        text=summary.text,
        ratios=summary.ratios,
        rounds=summary.rounds,
        contended_rounds=summary.contended_rounds,
        conditions=summary.conditions,
        resolved=summary.resolved,
    )


def _why_not_measured(outcome: EntrantOutcome | None) -> str:
    if outcome is None:
        return (
            "no trial of this study measured the previous configuration to the end (its trial "
            "failed or was screened out, or the search space cannot produce it), so it was not "
            "measured alongside the new choice"
        )
    return f"the previous configuration did not run in the head-to-head ({outcome.reason})"
