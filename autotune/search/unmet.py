"""Bounds that no measured configuration meets: named during the search (after the baseline
and after each trial, while none meets them) and when a study ends with nothing feasible
(`autotune.conclusion.unmet`), each with the best value reached, how far that is from the
bound, and the bound that value would meet."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from autotune.core.metrics import BOUNDS, DIMENSIONLESS, Bound, BoundKind
from autotune.results.records import Candidate

# How many significant digits a figure is told with.
DIGITS = 4


@dataclass(frozen=True)
class Unmet:
    """A bound no configuration meets, and the configuration closest to it."""

    name: str  # the request's field under `constraints`
    bound: float
    best: float
    trial: int

    @property
    def kind(self) -> Bound:
        return BOUNDS[self.name]

    def said(self, by_none: str) -> str:
        """`min_throughput_per_s 1,500 is met by <by_none>: the best reached is 7.143
        samples/s (trial 3), 210× below the bound`."""
        best = _with_unit(self.best, self.kind.metric.unit)
        return (
            f"{self.name} {figure(self.bound)} is met by {by_none}: the best reached is {best} "
            f"(trial {self.trial}), {self._how_far()}"
        )

    def loosened(self) -> str:
        """The bound the best value reached would meet, as the request would say it."""
        return (
            f"constraints.{self.name}: {figure(self.meeting_bound()).replace(',', '')} would be met"
        )

    def meeting_bound(self) -> float:
        """The best value reached, rounded to DIGITS significant digits towards a looser
        bound (so that it meets it)."""
        upper = self.kind.kind is BoundKind.UPPER
        if self.best == 0:
            return 0.0
        scale = 10.0 ** (DIGITS - 1 - math.floor(math.log10(abs(self.best))))
        rounded = math.ceil(self.best * scale) if upper else math.floor(self.best * scale)
        return rounded / scale

    def _how_far(self) -> str:
        if self.kind.kind is BoundKind.UPPER:
            if self.bound > 0:
                return f"{figure(self.best / self.bound)}× the bound"
            return f"{figure(self.best - self.bound)} over it"
        if self.best > 0:
            return f"{figure(self.bound / self.best)}× below the bound"
        return f"{figure(self.bound - self.best)} under it"


def unmet_bounds(candidates: Iterable[Candidate], constraints: Mapping[str, float]) -> list[Unmet]:
    """Each bound of `constraints` (name -> bound) that no candidate measured against it
    meets, with the candidate closest to it; a bound nothing was measured against yet is
    left out."""
    judged = [c for c in candidates if c.violations]
    unmet = []
    for name, bound in constraints.items():
        scored = [c for c in judged if name in c.violations]
        if not scored:
            continue
        closest = min(scored, key=lambda c: c.violations[name])
        if closest.violations[name] > 0:
            value = float(closest.metrics[BOUNDS[name].metric.name])
            unmet.append(Unmet(name, bound, value, closest.trial_number))
    return unmet


def unmet_note(candidates: Iterable[Candidate], constraints: Mapping[str, float]) -> str | None:
    """The line the search tells while some bound is met by no configuration so far."""
    unmet = unmet_bounds(candidates, constraints)
    if not unmet:
        return None
    return "note: " + "; ".join(u.said("no configuration so far") for u in unmet)


def figure(value: float) -> str:
    """A figure as a person reads it: DIGITS significant digits, never an exponent, the
    thousands separated, no trailing zeros (`42,070`, `7.143`, `0.02`, `0.0001234`)."""
    if value == 0 or not math.isfinite(value):
        return format(value, "g")
    magnitude = math.floor(math.log10(abs(value)))
    decimals = max(DIGITS - 1 - magnitude, 0)
    shown = f"{round(value, decimals):,.{decimals}f}"
    return shown.rstrip("0").rstrip(".") if decimals else shown


def _with_unit(value: float, unit: str) -> str:
    return figure(value) if unit in DIMENSIONLESS else f"{figure(value)} {unit}"
