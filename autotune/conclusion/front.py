"""The choice of one configuration from a feasible Pareto front (`autotune.search.front`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from autotune.core.metrics import ACCURACY, OBJECTIVES, selection_objective
from autotune.requests.request import Selection
from autotune.results.records import Candidate
from autotune.search.front import oriented


def select(front: Sequence[Candidate], selection: Selection) -> Candidate:
    """Pick the one configuration to return from a non-empty feasible front."""
    if not front:
        raise ValueError("cannot select from an empty front")
    strategy = selection.strategy
    if strategy == "weighted":
        weights = {str(name): w for name, w in (selection.weights or {}).items()}
        return min(front, key=lambda c: _weighted_score(c, front, weights))
    metric = selection_objective(selection.strategy)
    # Ties on the chosen metric go to higher accuracy, then to the lower trial number.
    return min(
        front,
        key=lambda c: (
            oriented(c, [metric])[0],
            oriented(c, [ACCURACY])[0],
            c.trial_number,
        ),
    )


def _weighted_score(
    candidate: Candidate, front: Sequence[Candidate], weights: Mapping[str, float]
) -> float:
    score = 0.0
    for objective, weight in weights.items():
        metric = OBJECTIVES[objective]
        values = [oriented(c, [metric])[0] for c in front]
        low, high = min(values), max(values)
        span = high - low
        mine = oriented(candidate, [metric])[0]
        score += weight * ((mine - low) / span if span > 0 else 0.0)
    return score
