"""Plugins: installed packages that add engines, energy meters, search strategies and
executors.

A plugin names its modules in entry points (`[project.entry-points."<group>"]` of its
pyproject.toml), one group per kind of registry:

- `autotune.engines`: a module of knob declarations (`@register` of `autotune.core.knobs`),
  loaded wherever the declarations are (both planes);
- `autotune.engine_implementations`: a module of their data-plane implementations
  (`@implements` of `workers.building.knobs`), loaded by the data plane only;
- `autotune.meters`: a module of energy meter factories (`@register_meter` of
  `workers.measuring.energy`);
- `autotune.strategies`: a module of search strategies (`@register_strategy` of
  `autotune.strategies`);
- `autotune.executors`: a module of executor kinds (`register_executor` of
  `autotune.execution.registry`), loaded by the control plane only.

The convention: an entry point's value is a module (`package.module`, no `:attribute`), and
importing it is the whole of loading it: its decorators (or calls) register what it defines,
exactly as the project's own modules do. Each registry loads its group once per process, at the
end of the module that completes it (after the project's own entries), so a plugin cannot take
a built-in name. A plugin that fails to import, or whose registration raises (a name already
registered included), is a `PluginWarning` naming the entry point, its group, its distribution
and the error; the process goes on without it. What such a module registered before the error
stays registered.

Only the standard library is imported here: both planes call this module.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from importlib.metadata import EntryPoint, entry_points

ENGINES_GROUP = "autotune.engines"
ENGINE_IMPLEMENTATIONS_GROUP = "autotune.engine_implementations"
METERS_GROUP = "autotune.meters"
STRATEGIES_GROUP = "autotune.strategies"
EXECUTORS_GROUP = "autotune.executors"
PROVIDERS_GROUP = "autotune.providers"
GROUPS = (
    ENGINES_GROUP,
    ENGINE_IMPLEMENTATIONS_GROUP,
    METERS_GROUP,
    STRATEGIES_GROUP,
    EXECUTORS_GROUP,
    PROVIDERS_GROUP,
)

_loaded_groups: set[str] = set()


class PluginWarning(UserWarning):
    """An installed plugin was not loaded (or only in part), and why."""


def load_plugins(group: str) -> list[str]:
    """Import the modules the installed distributions name in `group`, the first time this
    process asks for it; the entry points loaded (none on a later call). A group is marked
    loaded before its modules are imported, so a plugin that imports the registry it extends
    does not load the group again."""
    if group not in GROUPS:
        raise ValueError(f"{group!r} is not a plugin group; one of {list(GROUPS)}")
    if group in _loaded_groups:
        return []
    _loaded_groups.add(group)
    return load_entry_points(entry_points(group=group))


def load_entry_points(entries: Iterable[EntryPoint]) -> list[str]:
    """Import each entry point's module; a `PluginWarning` for each that cannot be loaded, never
    an exception. The names of those loaded, in order."""
    loaded = []
    for entry in entries:
        problem = _load(entry)
        if problem is None:
            loaded.append(entry.name)
        else:
            warnings.warn(
                f"plugin {entry.name!r} ({entry.group} = {entry.value!r}, from {_origin(entry)}) "
                f"was not loaded: {problem}",
                PluginWarning,
                stacklevel=2,
            )
    return loaded


def _load(entry: EntryPoint) -> str | None:
    """Why `entry` could not be loaded, or None once its module is imported."""
    if entry.attr is not None:
        return f"an entry point names a module, not an object (give {entry.module!r})"
    try:
        entry.load()
    except Exception as error:  # a plugin's failure is reported, never the host's crash
        return f"{type(error).__name__}: {error}"
    return None


def _origin(entry: EntryPoint) -> str:
    dist = entry.dist
    if dist is None:
        return "no installed distribution"
    return f"distribution {dist.name} {dist.version}"
