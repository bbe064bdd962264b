"""Autotune's own components as entry points (`autotune.core.plugins`): where they are read
from (the installed distribution of this tree, else the pyproject.toml beside the package), and
their place before any plugin's when a group is loaded."""

from __future__ import annotations

import json
import sys
import tomllib
from collections.abc import Iterator
from importlib.metadata import Distribution, EntryPoint, PackageNotFoundError
from pathlib import Path

import pytest

from autotune.core import plugins
from autotune.core.plugins import PROVIDERS_GROUP, PluginWarning

SOURCE_ROOT = plugins.PACKAGE_DIR.parent
OWN_MODULES = ["autotune.core.knobs.engines", "workers.measuring.counters"]


class FakeDistribution(Distribution):
    """An installed `autotune` with one entry point and the files given."""

    def __init__(self, files: dict[str, str], site: Path) -> None:
        self.files_text = files
        self.site = site

    def read_text(self, filename: str) -> str | None:
        return self.files_text.get(filename)

    def locate_file(self, path: str | Path) -> Path:
        return self.site / path


ENTRY_POINTS_TXT = "[autotune.meters]\ninstalled = installed_meters\n"


def editable_of(root: Path) -> str:
    return json.dumps({"url": f"file://{root}", "dir_info": {"editable": True}})


@pytest.fixture
def uncached() -> Iterator[None]:
    plugins.own_entry_points.cache_clear()
    yield
    plugins.own_entry_points.cache_clear()


def installed_as(monkeypatch: pytest.MonkeyPatch, dist: Distribution | None) -> None:
    def lookup(name: str) -> Distribution:
        assert name == "autotune"
        if dist is None:
            raise PackageNotFoundError(name)
        return dist

    monkeypatch.setattr(plugins, "distribution", lookup)


def source_tables() -> dict[str, dict[str, str]]:
    with (SOURCE_ROOT / "pyproject.toml").open("rb") as file:
        return tomllib.load(file)["project"]["entry-points"]


def as_tables(entries: tuple[EntryPoint, ...]) -> dict[str, dict[str, str]]:
    tables: dict[str, dict[str, str]] = {}
    for entry in entries:
        tables.setdefault(entry.group, {})[entry.name] = entry.value
    return tables


def test_an_editable_install_of_this_tree_gives_its_metadata(
    uncached: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    files = {"entry_points.txt": ENTRY_POINTS_TXT, "direct_url.json": editable_of(SOURCE_ROOT)}
    installed_as(monkeypatch, FakeDistribution(files, tmp_path))
    assert as_tables(plugins.own_entry_points()) == {
        "autotune.meters": {"installed": "installed_meters"}
    }


def test_an_install_whose_files_are_this_package_gives_its_metadata(
    uncached: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = {"entry_points.txt": ENTRY_POINTS_TXT}
    installed_as(monkeypatch, FakeDistribution(files, SOURCE_ROOT))
    assert [e.value for e in plugins.own_entry_points()] == ["installed_meters"]


@pytest.mark.parametrize(
    "files",
    [
        {"entry_points.txt": ENTRY_POINTS_TXT, "direct_url.json": editable_of(Path("/elsewhere"))},
        {"entry_points.txt": ENTRY_POINTS_TXT},
        None,
    ],
    ids=["editable-install-of-another-tree", "install-of-another-copy", "not-installed"],
)
def test_without_an_install_of_this_package_the_source_trees_pyproject_is_read(
    uncached: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, files: dict[str, str] | None
) -> None:
    installed_as(monkeypatch, None if files is None else FakeDistribution(files, tmp_path))
    assert plugins.installed_autotune() is None
    assert as_tables(plugins.own_entry_points()) == source_tables()


def test_a_source_tree_without_its_pyproject_is_an_error_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "pyproject.toml"
    with pytest.raises(FileNotFoundError, match=f"named in {missing}, which does not exist"):
        plugins.source_tree_entry_points(missing)


def test_pyproject_names_a_module_of_autotune_for_each_registry() -> None:
    tables = source_tables()
    assert set(plugins.GROUPS) - {PROVIDERS_GROUP} <= set(tables) <= set(plugins.GROUPS)
    values = [value for table in tables.values() for value in table.values()]
    assert all(":" not in value for value in values)
    assert set(OWN_MODULES) <= set(values)
    assert all(value.split(".")[0] in ("autotune", "workers") for value in values)


def test_the_installed_metadata_matches_pyproject(uncached: None) -> None:
    """Fails where the entry points changed since the last `pip install -e .`."""
    installed = plugins.installed_autotune()
    if installed is None:
        pytest.skip("autotune is not installed from this source tree")
    autotune_groups = tuple(e for e in installed.entry_points if e.group in plugins.GROUPS)
    assert as_tables(autotune_groups) == source_tables()


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Modules in tmp_path that record their import in `order`; forgotten afterwards."""
    order: list[str] = []
    monkeypatch.setattr(sys, "plugin_import_order", order, raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(plugins, "_loaded_groups", set())
    recording = ("own_one", "own_two", "third_party", "autotune_again")
    for name in recording:
        (tmp_path / f"{name}.py").write_text(
            f"import sys\nsys.plugin_import_order.append({name!r})\n"
        )
    (tmp_path / "own_broken.py").write_text("raise RuntimeError('a bug in autotune')\n")
    (tmp_path / "third_party_broken.py").write_text("raise RuntimeError('a bug in a plugin')\n")
    yield order
    for name in (*recording, "own_broken", "third_party_broken"):
        sys.modules.pop(name, None)


def entries(*values: str, dist: Distribution | None = None) -> list[EntryPoint]:
    made = [EntryPoint(name=value, value=value, group=PROVIDERS_GROUP) for value in values]
    return [entry._for(dist) if dist is not None else entry for entry in made]  # type: ignore[attr-defined]


def test_autotunes_own_entries_load_first_and_the_installed_autotune_is_not_a_plugin(
    modules: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    own = tuple(entries("own_one", "own_two"))
    monkeypatch.setattr(plugins, "own_entry_points", lambda: own)
    autotune = FakeDistribution({"METADATA": "Name: autotune\n"}, tmp_path)
    installed = [*entries("third_party"), *entries("autotune_again", dist=autotune)]
    monkeypatch.setattr(plugins, "entry_points", lambda group: installed)
    assert plugins.load_plugins(PROVIDERS_GROUP) == ["third_party"]
    assert modules == ["own_one", "own_two", "third_party"]


def test_one_of_autotunes_own_modules_that_fails_raises(
    modules: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(plugins, "own_entry_points", lambda: tuple(entries("own_broken")))
    monkeypatch.setattr(plugins, "entry_points", lambda group: [])
    with pytest.raises(RuntimeError, match="a bug in autotune"):
        plugins.load_plugins(PROVIDERS_GROUP)


def test_one_of_autotunes_own_entries_that_names_an_object_raises() -> None:
    entry = EntryPoint(name="engines", value="autotune.core.knobs:ENGINES", group=PROVIDERS_GROUP)
    with pytest.raises(ValueError, match="'engines'.*must name a module, not an object"):
        plugins.load_own(entry)


def test_a_plugin_that_fails_is_a_warning_after_autotunes_own(
    modules: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(plugins, "own_entry_points", lambda: tuple(entries("own_one")))
    monkeypatch.setattr(plugins, "entry_points", lambda group: entries("third_party_broken"))
    with pytest.warns(PluginWarning, match="'third_party_broken'.*a bug in a plugin"):
        assert plugins.load_plugins(PROVIDERS_GROUP) == []
    assert modules == ["own_one"]
