"""Why a study ended with nothing feasible: each bound no configuration met
(`autotune.search.unmet`), with the best value reached and the bound it would meet."""

from __future__ import annotations

from collections.abc import Mapping

from autotune.results.records import Candidate
from autotune.search.unmet import unmet_bounds


def infeasible_message(candidates: list[Candidate], constraints: Mapping[str, float]) -> str:
    """Why a study ended with no feasible configuration: each bound no configuration met,
    with the best reached and what bound it would meet; or that each bound was met by some
    configuration, but none met them all."""
    told = f"none of {len(candidates)} measured configurations meets the constraints"
    unmet = unmet_bounds(candidates, constraints)
    if not unmet:
        return f"{told}: each bound is met by some configuration, but none meets them all"
    return f"{told}: " + "; ".join(f"{u.said('none of them')}; {u.loosened()}" for u in unmet)
