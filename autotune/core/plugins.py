"""Plugins: autotune's own components and the installed packages that add engines, precision
modes, energy meters, search strategies, executors, execution providers, measured metrics and
trackers.

A distribution names its modules in entry points (`[project.entry-points."<group>"]` of its
pyproject.toml), one group per kind of registry:

- `autotune.engines`: a module of knob declarations (`@register` of `autotune.core.knobs`:
  engines, pruning methods), loaded wherever the declarations are (both planes);
- `autotune.precisions`: a module of precision mode declarations (`@register` as well), loaded
  right after the engines, wherever the declarations are;
- `autotune.engine_implementations`: a module of the data-plane implementations of engines,
  precision modes and pruning methods (`@implements` of `workers.building.knobs`), loaded by
  the data plane only;
- `autotune.meters`: a module of energy meter factories (`@register_meter` of
  `workers.measuring.energy`);
- `autotune.strategies`: a module of search strategies (`@register_strategy` of
  `autotune.strategies`);
- `autotune.executors`: a module of executor kinds (`register_executor` of
  `autotune.execution.registry`), loaded by the control plane only;
- `autotune.providers`: a module of ONNX Runtime execution providers;
- `autotune.metrics`: a module of measured metrics carried in the map of measured figures
  (`Metric(meter=...)` registered in `autotune.core.metrics`), loaded wherever metrics are;
- `autotune.figure_meters`: a module of the meters of those metrics (`@register_figure_meter`
  of `workers.measuring.figure_meter`), loaded by the data plane only;
- `autotune.trackers`: a module of trackers, observers of a study a user adds by name
  (`@register_tracker` of `autotune.search.trackers`), loaded by the control plane only.

The convention: an entry point's value is a module (`package.module`, no `:attribute`), and
importing it is the whole of loading it: its decorators (or calls) register what it defines.
Autotune's own components are entry points of its own pyproject.toml, the one list of them.
Each registry loads its group once per process, at the end of the module that completes it:
autotune's own entries first, so a plugin cannot take a built-in name, then those of the other
installed distributions. Autotune's own entries come from its installed metadata where that
distribution is the one imported; otherwise (a source tree on PYTHONPATH, with no or another
installation) from the pyproject.toml beside the package. One of autotune's own modules that
fails to load raises: it is a bug in autotune. A plugin that fails to import, or whose
registration raises (a name already registered included), is a `PluginWarning` naming the
entry point, its group, its distribution and the error; the process goes on without it. What
such a module registered before the error stays registered.

Only the standard library is imported here: both planes call this module.
"""

from __future__ import annotations

import functools
import json
import tomllib
import warnings
from collections.abc import Iterable
from importlib.metadata import (
    Distribution,
    EntryPoint,
    PackageNotFoundError,
    distribution,
    entry_points,
)
from pathlib import Path

ENGINES_GROUP = "autotune.engines"
PRECISIONS_GROUP = "autotune.precisions"
ENGINE_IMPLEMENTATIONS_GROUP = "autotune.engine_implementations"
METERS_GROUP = "autotune.meters"
STRATEGIES_GROUP = "autotune.strategies"
EXECUTORS_GROUP = "autotune.executors"
PROVIDERS_GROUP = "autotune.providers"
METRICS_GROUP = "autotune.metrics"
FIGURE_METERS_GROUP = "autotune.figure_meters"
TRACKERS_GROUP = "autotune.trackers"
GROUPS = (
    ENGINES_GROUP,
    PRECISIONS_GROUP,
    ENGINE_IMPLEMENTATIONS_GROUP,
    METERS_GROUP,
    STRATEGIES_GROUP,
    EXECUTORS_GROUP,
    PROVIDERS_GROUP,
    METRICS_GROUP,
    FIGURE_METERS_GROUP,
    TRACKERS_GROUP,
)

DISTRIBUTION = "autotune"
PACKAGE_DIR = Path(__file__).resolve().parents[1]
SOURCE_PYPROJECT = PACKAGE_DIR.parent / "pyproject.toml"

_loaded_groups: set[str] = set()


class PluginWarning(UserWarning):
    """An installed plugin was not loaded (or only in part), and why."""


def load_plugins(group: str) -> list[str]:
    """Import the modules of `group`, the first time this process asks for it: autotune's own
    (an error raises), then the other installed distributions' (an error is a `PluginWarning`).
    The names of the plugins loaded, in order (none on a later call). A group is marked loaded
    before its modules are imported, so a module that imports the registry it extends does not
    load the group again."""
    if group not in GROUPS:
        raise ValueError(f"{group!r} is not a plugin group; one of {list(GROUPS)}")
    if group in _loaded_groups:
        return []
    _loaded_groups.add(group)
    for entry in own_entry_points():
        if entry.group == group:
            load_own(entry)
    return load_entry_points(e for e in entry_points(group=group) if not _is_autotune(e.dist))


def load_own(entry: EntryPoint) -> None:
    """Import one of autotune's own modules; an entry point that names an object, or a module
    that fails to import, raises."""
    if entry.attr is not None:
        raise ValueError(
            f"autotune's entry point {entry.name!r} ({entry.group} = {entry.value!r}) must name "
            "a module, not an object"
        )
    entry.load()


@functools.cache
def own_entry_points() -> tuple[EntryPoint, ...]:
    """Autotune's own entry points, every group: from the installed distribution's metadata
    where it is the package imported here, else from the pyproject.toml beside the package."""
    installed = installed_autotune()
    if installed is not None:
        return tuple(installed.entry_points)
    return source_tree_entry_points(SOURCE_PYPROJECT)


def installed_autotune() -> Distribution | None:
    """The installed `autotune` distribution, where the package imported here is its own (an
    editable install of this source tree included); None where none is installed or it is
    another copy."""
    try:
        installed = distribution(DISTRIBUTION)
    except PackageNotFoundError:
        return None
    return installed if installs_this_package(installed) else None


def installs_this_package(installed: Distribution) -> bool:
    """Whether `installed` is the distribution of the package imported here: an editable
    install of its source tree, or files installed where this package is."""
    editable_root = _editable_root(installed)
    if editable_root is not None:
        return editable_root.resolve() == PACKAGE_DIR.parent
    init = Path(str(installed.locate_file(f"{PACKAGE_DIR.name}/__init__.py")))
    return init.resolve() == PACKAGE_DIR / "__init__.py"


def _editable_root(installed: Distribution) -> Path | None:
    """The source directory of an editable install (its direct_url.json), else None."""
    text = installed.read_text("direct_url.json")
    if not text:
        return None
    direct_url = json.loads(text)
    url = str(direct_url.get("url", ""))
    if not direct_url.get("dir_info", {}).get("editable") or not url.startswith("file://"):
        return None
    return Path(url.removeprefix("file://"))


def source_tree_entry_points(pyproject: Path) -> tuple[EntryPoint, ...]:
    """The entry points of the `[project.entry-points]` tables of a source tree's
    pyproject.toml, in the order written; a missing file raises (autotune cannot find its own
    components)."""
    if not pyproject.is_file():
        raise FileNotFoundError(
            f"autotune's own components are named in {pyproject}, which does not exist, and no "
            f"installed {DISTRIBUTION!r} distribution is the package at {PACKAGE_DIR}"
        )
    with pyproject.open("rb") as file:
        tables = tomllib.load(file)["project"].get("entry-points", {})
    return tuple(
        EntryPoint(name=name, value=value, group=group)
        for group, entries in tables.items()
        for name, value in entries.items()
    )


def load_entry_points(entries: Iterable[EntryPoint]) -> list[str]:
    """Import each plugin entry point's module; a `PluginWarning` for each that cannot be
    loaded, never an exception. The names of those loaded, in order."""
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


def _is_autotune(dist: Distribution | None) -> bool:
    return dist is not None and _normalized(dist.name) == DISTRIBUTION


def _normalized(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _origin(entry: EntryPoint) -> str:
    dist = entry.dist
    if dist is None:
        return "no installed distribution"
    return f"distribution {dist.name} {dist.version}"
