"""`autotune space --request`: the int8 sensitivity of the request's model, where its space
keeps the most sensitive nodes of an int8 model in float (`precision.fallback`). The ranking
is the one the model's most recent study in the request's storage measured and kept:
measuring it here would quantize and evaluate the model once per node on a trial worker."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.core.knobs import FALLBACK_KEY
from autotune.core.knobs.engines import INT8_MODES

if TYPE_CHECKING:
    from autotune.space.search_space import EffectiveSpace


def int8_modes(space: EffectiveSpace) -> list[str]:
    """The int8 modes the space holds, where it keeps some nodes in float (a
    `precision.fallback` above 0); none elsewhere."""
    values = {dim.name: dim.values or [] for dim in space.dimensions}
    if not any(values.get(FALLBACK_KEY, [])):
        return []
    return [mode for mode in INT8_MODES if mode in values.get("precision.mode", [])]


def sensitivity_lines(space: EffectiveSpace, model_sha256: str, storage: str) -> list[str]:
    """A line per kept ranking of the space's int8 modes (`int8 sensitivity (int8_static): 3
    of 47 operations carry 80% of the drop: ...`) and where it comes from; a line saying
    none was measured yet; nothing where the space keeps no int8 node in float."""
    from autotune.results.model_history import latest_sensitivity

    modes = int8_modes(space)
    if not modes:
        return []
    try:
        found = latest_sensitivity(storage, model_sha256)
    except Exception as error:  # a line of the space's printout, never the command's failure
        return [f"int8 sensitivity: the request's storage was not read ({error})"]
    tables = [] if found is None else [t for t in found.tables if t.mode in modes]
    if found is None or not tables:
        return [
            f"int8 sensitivity ({', '.join(modes)}): not measured for this model yet; a study "
            "whose trials try precision.fallback measures it and keeps it for this command"
        ]
    several = len({t.model_sha256 for t in tables}) > 1
    lines = [
        t.summary() + (f" (ranked model {t.model_sha256[:12]})" if several else "") for t in tables
    ]
    started = f" started {found.started:%Y-%m-%d %H:%M}" if found.started else ""
    seconds = sum(t.seconds for t in tables)
    return [*lines, f"  measured in {seconds:.1f} s by study {found.study}{started} ({storage})"]
