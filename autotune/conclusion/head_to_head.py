"""The finalists head to head: after the search, the provisional choice, its nearest front
neighbours and the baseline are re-measured in interleaved rounds on one slot, and the
choice is made on those paired figures (`autotune.conclusion.decision`). When none of the finalists
is feasible on the re-measured figures, the next ones are tried. The baseline, where it
meets the constraints re-measured, is in the decision too: the unmodified model stays unless
a finalist beats it beyond the noise. On a resume that measured
nothing new the stored comparison is reused, unless the request asks for
`validation.remeasure_on_resume`.

A re-tune's previous choice, where this study measured its configuration, is measured in
every one of these rounds as one more contestant (`autotune.conclusion.previous`).

Where the unmodified model stays, its headline comes from rounds of its own: the model as
`autotune.load` runs it (exported, loaded from its artifact) against the plain model."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune.conclusion.decision import (
    Headline,
    changes_from,
    decide,
    headline,
    nearest_neighbours,
    ratios_to,
    with_metrics,
)
from autotune.conclusion.front import select
from autotune.conclusion.previous import PreviousChoice, PreviousComparison, compared_with_previous
from autotune.conclusion.tuned_file import reported
from autotune.core.contract import (
    Contention,
    Entrant,
    EntrantOutcome,
    HeadToHeadResult,
    HeadToHeadSpec,
    Workload,
)
from autotune.core.errors import AutotuneError, MeasurementContended, NoFeasibleConfiguration
from autotune.core.metrics import OBJECTIVES, constraint_violations, derived, variant_quality
from autotune.requests.request import TuningRequest
from autotune.results.records import Candidate, StoredRevalidation

if TYPE_CHECKING:
    from autotune.execution.base import Executor
    from autotune.results.store import ResultStore


# Where the headline's figures come from (the report's `headline_from`).
CONFIRMING = (
    "a confirming head-to-head of the chosen configuration and the baseline, in fresh builds "
    "and rounds: the rounds that chose it among several finalists do not also rate it"
)
DECIDING = "the rounds that decided"
AS_LOADED = (
    "a head-to-head of the unmodified model as `autotune.load` runs it (exported, loaded from "
    "its artifact) against the plain model, in fresh builds and rounds"
)


@dataclass
class Revalidation:
    chosen: Candidate
    baseline: Candidate
    report: dict[str, Any]
    headline: Headline
    reused: bool = False  # the stored head-to-head of an earlier round, not measured now
    # A re-tune's choice against the previous tuning's, from the rounds of the headline.
    previous: PreviousComparison | None = None


@dataclass
class Revalidator:
    request: TuningRequest
    workload: Workload
    study: str
    executor: Executor
    store: ResultStore
    on_phase: Callable[[str], None]
    previous: PreviousChoice | None = None

    def revalidate(self, front: list[Candidate], baseline: Candidate) -> Revalidation:
        basis = self._basis(front)
        stored = self._stored(front, baseline, basis)
        if stored is not None:
            return stored
        objectives = [OBJECTIVES[o] for o in self.request.objectives]
        remaining = list(front)
        comparisons: list[list[dict[str, Any]]] = []
        while remaining:
            provisional = select(remaining, self.request.selection)
            neighbours = nearest_neighbours(
                provisional, remaining, objectives, self.request.validation.neighbours
            )
            finalists = [provisional, *neighbours]
            alongside = self._alongside(finalists, baseline)
            compared = self._head_to_head(baseline, finalists, alongside=alongside)
            contestants = [*finalists, *alongside]
            outcomes = {o.trial_number: o for o in compared.entrants}
            base_outcome = outcomes[baseline.trial_number]
            remeasured_baseline = self._remeasured(baseline, base_outcome, baseline)
            if remeasured_baseline is None:
                raise AutotuneError(f"re-measuring the baseline failed: {base_outcome.reason}")
            remeasured = [
                self._remeasured(c, outcomes[c.trial_number], remeasured_baseline)
                for c in contestants
            ]
            comparisons.append(
                self._comparison(contestants, remeasured, outcomes, base_outcome, baseline)
            )
            kept = [c for c in remeasured if c is not None and c.feasible]
            if kept:
                return self._decided(
                    self._with_baseline(kept, remeasured_baseline),
                    outcomes,
                    compared,
                    remeasured_baseline,
                    basis,
                    comparisons,
                    baseline,
                )
            done = {c.trial_number for c in finalists}
            remaining = [c for c in remaining if c.trial_number not in done]
        raise NoFeasibleConfiguration("no finalist met the constraints when re-measured")

    def _alongside(self, finalists: list[Candidate], baseline: Candidate) -> list[Candidate]:
        """The previous choice's trial, where this study measured it and it is not in the
        rounds already."""
        measured = None if self.previous is None else self.previous.measured
        present = {c.trial_number for c in [*finalists, baseline]}
        return [measured] if measured is not None and measured.trial_number not in present else []

    @staticmethod
    def _with_baseline(kept: list[Candidate], remeasured_baseline: Candidate) -> list[Candidate]:
        """The finalists and, where it meets the constraints re-measured, the unmodified
        model: a finalist that does not beat it beyond the noise is no reason to change it
        (it has the fewest changes, so it wins a tie)."""
        numbers = {c.trial_number for c in kept}
        if remeasured_baseline.feasible and remeasured_baseline.trial_number not in numbers:
            return [*kept, remeasured_baseline]
        return kept

    def _decided(
        self,
        kept: list[Candidate],
        outcomes: dict[int, EntrantOutcome],
        compared: HeadToHeadResult,
        remeasured_baseline: Candidate,
        basis: dict[str, Any],
        comparisons: list[list[dict[str, Any]]],
        baseline: Candidate,
    ) -> Revalidation:
        request = self.request
        decision = decide(kept, outcomes, request.selection, baseline.config)
        chosen = decision.chosen
        confirmed = None
        if chosen.trial_number != baseline.trial_number and len(kept) > 1:
            confirmed = self._confirmed(chosen, baseline)
        if confirmed is not None:
            compared = confirmed
            outcomes = {o.trial_number: o for o in compared.entrants}
            chosen = self._remeasured(chosen, outcomes[chosen.trial_number], baseline) or chosen
        previous = self._against_previous(chosen, outcomes, compared.contention)
        source = CONFIRMING if confirmed is not None else DECIDING
        mine, theirs, measured = self._headline_rounds(chosen, baseline, compared)
        summary = headline(
            mine,
            theirs,
            measured.contention,
            request.selection,
            chosen.metrics["energy_source"] == "estimate",
        )
        report = {
            "rounds": request.validation.rounds,
            "round_seconds": request.validation.round_seconds,
            "comparisons": comparisons,
            "contention": contention_summary(compared.contention),
            "leader": decision.leader.trial_number,
            "headline_from": AS_LOADED if measured is not compared else source,
            "confirmation": None if confirmed is None else reported(chosen.metrics, request.cost),
            "chosen": chosen.trial_number,
            "chosen_because": decision.because,
            "tied_with": decision.tied_with,
            "baseline_trial": baseline.trial_number,
            "baseline": reported(remeasured_baseline.metrics, request.cost),
        }
        if previous is not None:
            report["previous_trial"] = previous.previous_trial
        self.store.save_revalidation(
            StoredRevalidation(
                report=report,
                basis=basis,
                chosen_metrics=chosen.metrics,
                baseline_metrics=remeasured_baseline.metrics,
                headline=summary.model_dump(mode="json"),
                previous=None if previous is None else previous.model_dump(mode="json"),
            )
        )
        return Revalidation(chosen, remeasured_baseline, report, summary, previous=previous)

    def _headline_rounds(
        self, chosen: Candidate, baseline: Candidate, compared: HeadToHeadResult
    ) -> tuple[EntrantOutcome, EntrantOutcome, HeadToHeadResult]:
        """The outcomes the headline compares, and the rounds they come from: of a change, the
        chosen configuration's and the baseline's in `compared`; where the unmodified model
        stays, it as `autotune.load` runs it (exported, loaded from its artifact, called
        through `Predictor.predict`) against the plain model, in rounds of their own, so its
        figures are measured, not the baseline over itself. A replay has nothing to load; an
        artifact that fails to run leaves the rounds given."""
        outcomes = {o.trial_number: o for o in compared.entrants if not o.loaded_artifact}
        given = (outcomes[chosen.trial_number], outcomes[baseline.trial_number], compared)
        if chosen.trial_number != baseline.trial_number or not compared.contention:
            return given
        loaded = self._head_to_head(baseline, [], "the unmodified model as loaded", loaded=True)
        plain, as_loaded = loaded.entrants
        return given if as_loaded.status != "ok" else (as_loaded, plain, loaded)

    def _against_previous(
        self,
        chosen: Candidate,
        outcomes: dict[int, EntrantOutcome],
        contention: list[Contention],
    ) -> PreviousComparison | None:
        """A re-tune's choice against the previous one, from the rounds given."""
        if self.previous is None:
            return None
        selection = self.request.selection
        return compared_with_previous(self.previous, chosen, outcomes, contention, selection)

    def _basis(self, front: list[Candidate]) -> dict[str, Any]:
        """What a head-to-head's outcome depends on besides the machine: the trials measured,
        the front, and the request's settings that pick, compare and report the finalists."""
        request = self.request
        basis = {
            "n_trials": self.store.counted(),
            "front": sorted(c.trial_number for c in front),
            "selection": request.selection.model_dump(mode="json"),
            "validation": request.validation.model_dump(
                mode="json", exclude={"remeasure_on_resume"}
            ),
            "constraints": request.constraints.model_dump(mode="json"),
            "cost": request.cost.model_dump(mode="json"),
            "measurement": request.measurement.model_dump(mode="json"),
        }
        if self.previous is not None:
            basis["previous"] = {"config": self.previous.config, "study": self.previous.study}
        return basis

    def _stored(
        self, front: list[Candidate], baseline: Candidate, basis: dict[str, Any]
    ) -> Revalidation | None:
        """The stored head-to-head, when it was decided on this very basis (nothing new was
        measured since) and the request does not ask to measure it again."""
        if self.request.validation.remeasure_on_resume:
            return None
        stored = self.store.revalidation()
        if stored is None or stored.basis != basis:
            return None
        # The unmodified model may have stayed, or a re-tune's previous choice been kept.
        candidates = [*front, baseline, *self._alongside(front, baseline)]
        chosen = next((c for c in candidates if c.trial_number == stored.report["chosen"]), None)
        if chosen is None:
            return None
        return Revalidation(
            self._with(chosen, stored.chosen_metrics),
            self._with(baseline, stored.baseline_metrics),
            stored.report,
            Headline.model_validate(stored.headline),
            reused=True,
            previous=None
            if stored.previous is None
            else PreviousComparison.model_validate(stored.previous),
        )

    def _with(self, candidate: Candidate, metrics: dict[str, Any]) -> Candidate:
        bounds = self.request.constraints.model_dump(exclude_none=True)
        return with_metrics(candidate, metrics, constraint_violations(bounds, metrics))

    def _confirmed(self, chosen: Candidate, baseline: Candidate) -> HeadToHeadResult | None:
        """The chosen configuration and the baseline (and a re-tune's previous choice) again,
        in fresh rounds with fresh builds: the rounds that picked it among several favour it
        by the luck of their noise (the winner's curse), so they do not also give its
        headline, nor its comparison with the previous choice. None where the chosen one or
        the baseline fails to run again (the deciding rounds then give both)."""
        alongside = self._alongside([chosen], baseline)
        confirming = self._head_to_head(baseline, [chosen], "confirming the choice", alongside)
        judged = {chosen.trial_number, baseline.trial_number}
        ran = all(o.status == "ok" for o in confirming.entrants if o.trial_number in judged)
        return confirming if ran else None

    def _head_to_head(
        self,
        baseline: Candidate,
        finalists: list[Candidate],
        purpose: str = "",
        alongside: list[Candidate] | None = None,
        loaded: bool = False,
    ) -> HeadToHeadResult:
        """The baseline and the finalists (and those `alongside`: a re-tune's previous
        choice) in interleaved rounds on one slot; `loaded`: the baseline also as
        `autotune.load` runs it, after all of them."""
        entrants: list[Candidate] = [baseline]
        entrants += [c for c in finalists if c.trial_number != baseline.trial_number]
        finalist_count = len(entrants) - 1
        entrants += alongside or []
        validation = self.request.validation
        spec = HeadToHeadSpec(
            study=self.study,
            workload=self.workload,
            entrants=[_entrant(c) for c in entrants]
            + ([_entrant(baseline, loaded_artifact=True)] if loaded else []),
            rounds=validation.rounds,
            round_seconds=validation.round_seconds,
            measurement=self.request.measurement,
            timeout_s=self.request.budget.trial_timeout_s * len(entrants),
        )
        measured = f"baseline and {finalist_count} finalists"
        if loaded:
            measured = "the baseline as built for trials and as loaded from its artifact"
        if alongside:
            measured = f"baseline, {finalist_count} finalists and the previous choice"
        self.on_phase(
            f"head to head{f' ({purpose})' if purpose else ''}: {measured}, "
            f"{validation.rounds} rounds"
        )
        result = self.executor.compare(spec)
        contended = [c for c in result.contention if c.contended]
        if contended and self.request.measurement.contention == "fail":
            raise MeasurementContended(
                f"{len(contended)} of {len(result.contention)} head-to-head rounds saw other "
                f"load ({contended[0].reasons[0]}); measurement.contention is 'fail': re-run "
                "on an idle machine, or set it to 'warn' or 'wait'"
            )
        return result

    def _remeasured(
        self, candidate: Candidate, outcome: EntrantOutcome, baseline: Candidate
    ) -> Candidate | None:
        """The candidate with its head-to-head figures. The peak memory stays the search's:
        a head-to-head holds every finalist's session at once."""
        if outcome.metrics is None:
            return None
        study = self.request.study(baseline.metrics["accuracy"])
        metrics = derived(outcome.metrics.model_dump(), study)
        metrics["peak_memory_mb"] = candidate.metrics["peak_memory_mb"]
        return self._with(candidate, metrics)

    def _comparison(
        self,
        finalists: list[Candidate],
        remeasured: list[Candidate | None],
        outcomes: dict[int, EntrantOutcome],
        base_outcome: EntrantOutcome,
        baseline: Candidate,
    ) -> list[dict[str, Any]]:
        cost = self.request.cost
        rows = []
        for before, after in zip(finalists, remeasured, strict=True):
            outcome = outcomes[before.trial_number]
            ratios = None
            if after is not None:
                ratios = {m: r.model_dump() for m, r in ratios_to(outcome, base_outcome).items()}
            rows.append(
                {
                    "trial": before.trial_number,
                    "changes_from_baseline": changes_from(before.config, baseline.config),
                    "status": outcome.status,
                    "reason": outcome.reason,
                    "search": reported(before.metrics, cost),
                    "revalidated": None if after is None else reported(after.metrics, cost),
                    "to_baseline": ratios,
                    "feasible": after is not None and after.feasible,
                }
            )
        return rows


def _entrant(candidate: Candidate, loaded_artifact: bool = False) -> Entrant:
    return Entrant(
        trial_number=candidate.trial_number,
        config=candidate.config,
        known_accuracy=float(candidate.metrics["accuracy"]),
        known_quality=variant_quality(candidate.metrics),
        loaded_artifact=loaded_artifact,
    )


def contention_summary(rounds: list[Contention]) -> dict[str, Any]:
    """How busy the machine was over a head-to-head's rounds."""
    if not rounds:
        return {"rounds": 0, "contended_rounds": 0}
    return {
        "rounds": len(rounds),
        "contended_rounds": sum(c.contended for c in rounds),
        "max_other_cpu_share": max(c.other_cpu_share for c in rounds),
        "max_steal_share": max(c.steal_share for c in rounds),
        "oversubscribed_rounds": sum(c.oversubscribed for c in rounds),
        "reasons": sorted({r for c in rounds for r in c.reasons}),
    }
