"""Plugins by installation (`autotune.core.plugins`): the loader's failure behaviour, and the
example plugin (tests/plugins/autotune_example_plugin) installed into a virtual environment of
its own, where its engine, meter, strategy and executor run studies."""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from onnx import TensorProto, helper, numpy_helper

from autotune.core import plugins
from autotune.core.errors import RequestError
from autotune.core.plugins import (
    EXECUTORS_GROUP,
    METERS_GROUP,
    STRATEGIES_GROUP,
    PluginWarning,
    load_entry_points,
    load_plugins,
)
from autotune.execution import build, registry
from autotune.execution.in_process import InProcessExecutor
from autotune.strategies import STRATEGIES
from autotune.strategies.optuna_samplers import Random
from tests.conftest import FAST_MEASUREMENT, FAST_VALIDATION, REPO, copy_mlflow_store

EXAMPLE = REPO / "tests" / "plugins" / "autotune_example_plugin"
ENGINE = "ort_tuned_session"
METER = "example_cpu_time"
STRATEGY = "example_random"
EXECUTOR = "example_in_process"


def test_a_plugin_that_cannot_be_imported_is_a_warning_naming_it() -> None:
    broken = EntryPoint(name="broken_meter", value="no_such_module", group=METERS_GROUP)
    with pytest.warns(PluginWarning) as warned:
        assert load_entry_points([broken]) == []
    [warning] = warned
    assert str(warning.message) == (
        "plugin 'broken_meter' (autotune.meters = 'no_such_module', from no installed "
        "distribution) was not loaded: ModuleNotFoundError: No module named 'no_such_module'"
    )


def test_a_plugin_that_takes_a_registered_name_is_a_warning_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "taken_strategy_name.py").write_text(
        "from autotune.strategies import register_strategy\n"
        "from autotune.strategies.optuna_samplers import TPE\n\n"
        "@register_strategy\n"
        "class Impostor(TPE):\n"
        "    name = 'random'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    taken = EntryPoint(name="impostor", value="taken_strategy_name", group=STRATEGIES_GROUP)
    with pytest.warns(PluginWarning, match="'impostor'.*a strategy named 'random' is already"):
        assert load_entry_points([taken]) == []
    assert STRATEGIES["random"] is Random


def test_an_entry_point_naming_an_object_is_a_warning_and_is_not_called() -> None:
    named = EntryPoint(name="an_object", value="json:dumps", group=STRATEGIES_GROUP)
    with pytest.warns(PluginWarning, match="names a module, not an object.*'json'"):
        assert load_entry_points([named]) == []


def test_a_group_is_loaded_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []

    def installed(group: str) -> list[EntryPoint]:
        asked.append(group)
        return [EntryPoint(name="stdlib", value="json", group=group)]

    monkeypatch.setattr(plugins, "entry_points", installed)
    monkeypatch.setattr(plugins, "own_entry_points", tuple)
    monkeypatch.setattr(plugins, "_loaded_groups", set())
    assert load_plugins(METERS_GROUP) == ["stdlib"]
    assert load_plugins(METERS_GROUP) == []
    assert asked == [METERS_GROUP]
    with pytest.raises(ValueError, match="'autotune.loggers' is not a plugin group"):
        load_plugins("autotune.loggers")


@pytest.fixture
def example_on_path(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The example's sources importable, and what they register forgotten afterwards."""
    monkeypatch.setattr(registry, "_KINDS", dict(registry._KINDS))
    monkeypatch.syspath_prepend(str(EXAMPLE / "src"))
    yield
    for name in [name for name in sys.modules if name.startswith("autotune_example_plugin")]:
        del sys.modules[name]


def test_the_example_executor_registers_its_type_and_runs_trials_in_this_process(
    example_on_path: None,
) -> None:
    entry = EntryPoint(EXECUTOR, "autotune_example_plugin.executor", EXECUTORS_GROUP)
    assert load_entry_points([entry]) == [EXECUTOR]
    config = registry.parse_executor_config({"type": EXECUTOR, "memory_limit_mb": 2048})
    assert config.start_note() == (
        "start: example_in_process runs the trials in this process, 2048 MB each"
    )
    (executor,) = build.make_executors(config, several=False)
    try:
        assert isinstance(executor, InProcessExecutor)
        assert executor.trial_memory_mb == 2048
    finally:
        executor.close()
    with pytest.raises(RequestError) as refused:
        registry.parse_executor_config({"type": EXECUTOR, "memory_limit_mb": 1})
    assert refused.value.field == f"executor.{EXECUTOR}.memory_limit_mb"


# --- the example plugin, installed --------------------------------------------------------

WIDTH = 8
SAMPLES = 64


def two_layer_model() -> bytes:
    """Two MatMuls with a Relu between: a model every ONNX engine runs in fp32."""
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.normal(size=(WIDTH, WIDTH)).astype(np.float32), f"w{i}")
        for i in range(2)
    ]
    nodes = [
        helper.make_node("MatMul", ["input", "w0"], ["h"]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("MatMul", ["r", "w1"], ["output"]),
    ]
    graph = helper.make_graph(
        nodes,
        "two-layers",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", WIDTH])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", WIDTH])],
        weights,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_an_engine_sets_session_options_of_its_own_on_the_ort_session() -> None:
    """The hook the example's engine uses: called with the options autotune set, before the
    session is built from them."""
    from workers.building.ort_session import OnnxRuntimeSession

    given: list[Any] = []

    def configure(options: Any) -> None:
        given.append(options.intra_op_num_threads)
        options.enable_mem_pattern = False

    session = OnnxRuntimeSession(two_layer_model(), threads=1, configure=configure)
    assert given == [1]
    assert session._session.get_session_options().enable_mem_pattern is False
    assert session.run(np.ones((2, WIDTH), np.float32)).shape == (2, WIDTH)


@pytest.fixture(scope="module")
def plugin_python(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The Python of a new virtual environment that sees this one's packages (autotune, its
    dependencies, pip, setuptools) and holds the example plugin, installed editable from a
    copy (the install writes its metadata beside the sources, never into the clone). A venv
    made from a venv sees the base interpreter's packages only, so this one's site-packages
    are added by a .pth file, whose own .pth files (autotune's editable install) then apply."""
    root = tmp_path_factory.mktemp("plugin-venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True)
    python = root / "venv" / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    parents = "; ".join(f"site.addsitedir({p!r})" for p in site.getsitepackages())
    (Path(purelib) / "autotune_parent_venv.pth").write_text(f"import site; {parents}\n")
    source = shutil.copytree(EXAMPLE, root / "autotune_example_plugin")
    install = [python, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index"]
    subprocess.run([*install, "-e", str(source)], check=True, capture_output=True, timeout=300)
    yield python


def in_plugin_venv(
    python: Path, arguments: list[str], cwd: Path
) -> subprocess.CompletedProcess[str]:
    """`python -m autotune ...`, run; fails the test with stderr's end where it exits
    non-zero, or where any plugin was not loaded."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [python, "-m", "autotune", *arguments],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "PluginWarning" not in done.stderr, done.stderr[-3000:]
    return done


@pytest.fixture
def plugin_request(tmp_path: Path, mlflow_store_template: Path) -> Path:
    (tmp_path / "model.onnx").write_bytes(two_layer_model())
    inputs = np.random.default_rng(1).normal(size=(SAMPLES, WIDTH)).astype(np.float32)
    np.savez(tmp_path / "data.npz", inputs=inputs)
    dimensions = [
        {"name": "runtime.engine", "values": [ENGINE], "baseline": ENGINE},
        {"name": "runtime.threads", "values": [1], "baseline": 1},
        {"name": "batch.size", "values": [4, 16], "baseline": 4},
        {
            "name": "ort_tuned.execution_mode",
            "values": ["sequential", "parallel"],
            "baseline": "sequential",
        },
        {"name": "ort_tuned.mem_pattern", "values": [True, False], "baseline": True},
    ]
    (tmp_path / "space.yaml").write_text(
        yaml.safe_dump({"name": "plugin", "dimensions": dimensions})
    )
    request: dict[str, Any] = {
        "name": "plugin-study",
        "model": {"onnx": str(tmp_path / "model.onnx")},
        "data": {"npz": str(tmp_path / "data.npz")},
        "metric": {"kind": "fidelity"},
        "constraints": {"max_accuracy_drop": 0.01},
        "search_space": str(tmp_path / "space.yaml"),
        "budget": {"trials": 4},
        "measurement": FAST_MEASUREMENT,
        "validation": FAST_VALIDATION,
        "tracking": {
            "uri": copy_mlflow_store(mlflow_store_template, tmp_path / "mlflow.db"),
            "experiment": "tests",
        },
        "storage": f"sqlite:///{tmp_path / 'study.db'}",
    }
    path = tmp_path / "request.yaml"
    path.write_text(yaml.safe_dump(request))
    return path


# Prints each trial's configuration, whether it was measured, and its metrics (a screened
# trial's: those of its short window), read from the study.
READ_TRIALS = """
import json, sys
from autotune.results.optuna_store import opened_store

with opened_store(sys.argv[2], sys.argv[1], "name") as store:
    print(json.dumps([
        {"config": r.config, "measured": r.measured, "metrics": r.metrics}
        for r in store.records()
    ]))
"""


@pytest.mark.slow
def test_the_installed_plugin_adds_an_engine_a_meter_and_a_strategy_that_run_a_study(
    plugin_python: Path, plugin_request: Path, tmp_path: Path
) -> None:
    space = in_plugin_venv(
        plugin_python, ["space", "--request", str(plugin_request)], tmp_path
    ).stdout
    assert f"runtime.engine: {ENGINE}; baseline {ENGINE}" in space, space
    assert "ort_tuned.execution_mode: sequential, parallel" in space, space
    # The default space lists no engines: it searches every declared one, the plugin's too.
    default = ["space", "--request", str(plugin_request), "--space", "default.yaml"]
    engines = next(
        line
        for line in in_plugin_venv(plugin_python, default, tmp_path).stdout.splitlines()
        if line.strip().startswith("runtime.engine:")
    )
    assert ENGINE in engines and "onnxruntime" in engines, engines

    tune = ["tune", str(plugin_request), "--executor", "inprocess", "--seed", "0"]
    in_plugin_venv(plugin_python, [*tune, "--sampler", STRATEGY], tmp_path)
    assert_measured_by_the_plugin(plugin_python, tmp_path / "study.db", "plugin-study", 4)


def assert_measured_by_the_plugin(python: Path, study_db: Path, study: str, trials: int) -> None:
    """Each of the study's `trials` measured on the plugin's engine, its energy by its meter."""
    read = [str(python), "-c", READ_TRIALS, f"sqlite:///{study_db}", study]
    records = json.loads(subprocess.run(read, check=True, capture_output=True, text=True).stdout)
    measured = [t for t in records if t["measured"] and t["metrics"]]
    assert len(measured) == len(records) == trials, records
    assert {t["config"]["runtime.engine"] for t in measured} == {ENGINE}
    assert {t["metrics"]["energy_source"] for t in measured} == {"estimate"}
    assert {t["metrics"]["energy_model"] for t in measured} == {f"{METER}:flat:12.5 W/core"}


@pytest.mark.slow
def test_the_installed_plugins_executor_is_registered_and_runs_a_study(
    plugin_python: Path, plugin_request: Path, tmp_path: Path
) -> None:
    study_db = tmp_path / "executor-study.db"
    tune = ["tune", str(plugin_request), "--executor", EXECUTOR, "--trials", "2"]
    tune += ["--study", "executor-study", "--storage", f"sqlite:///{study_db}"]
    told = in_plugin_venv(plugin_python, [*tune, "--sampler", STRATEGY, "--seed", "0"], tmp_path)
    note = "start: example_in_process runs the trials in this process, a share of the memory each"
    assert note in told.stderr, told.stderr[-3000:]
    assert_measured_by_the_plugin(plugin_python, study_db, "executor-study", 2)
