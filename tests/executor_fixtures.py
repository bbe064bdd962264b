"""Every `Executor` implementation, set up to run the digits example, for the conformance
suite (tests/system/autotune/execution/test_executor_conformance.py).

An `ExecutorCase` says how to make one executor and what it is given: a workload, a
configuration that runs and one that cannot be built. Where an implementation legitimately
differs from the others, a capability field says so; where it differs without a reason (an
inconsistency), `inconsistencies` names the test that shows it.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import pytest

from autotune.core.contract import ConfigValue, TrialResult, Workload
from autotune.execution import registry
from autotune.execution.base import Executor
from autotune.execution.build import make_executors
from autotune.execution.in_process import InProcessExecutor
from autotune.execution.ray_executor import RayExecutor
from autotune.execution.registry import parse_executor_config
from autotune.execution.replay import ReplayExecutor
from autotune.execution.replay_table import ReplayTable
from tests.workers_support import REPO, digits_workload

DIGITS_TABLE = REPO / "experiments" / "tables" / "digits.csv"

# Rows of the recorded digits table, so that one configuration means the same to every
# executor: the unmodified model on torch, at two batch sizes, and bf16 on ONNX Runtime's
# CPU provider, which no CPU build can run (recorded as unsupported).
_COMMON: dict[str, ConfigValue] = {
    "runtime.threads": 1,
    "prune.method": "none",
}
RUNNABLE: dict[str, ConfigValue] = {
    **_COMMON,
    "runtime.engine": "torch_eager",
    "batch.size": 1,
    "precision.mode": "fp32",
}
RUNNABLE_BATCHED: dict[str, ConfigValue] = {**RUNNABLE, "batch.size": 8}
UNBUILDABLE: dict[str, ConfigValue] = {
    **_COMMON,
    "runtime.engine": "onnxruntime",
    "batch.size": 1,
    "precision.mode": "bf16",
}


@dataclass
class ExecutorCase:
    name: str
    make: Callable[[], Executor]
    workload: Workload
    # The model identity that `inspect` must report when it is known beforehand (a replay's
    # is its table's content hash); otherwise only its agreement with the results is checked.
    model_sha256: str | None
    # A real executor loads the model and times it; a replay reads figures from its table.
    loads_the_model: bool
    # A real head-to-head observes the machine once per round; a replay has no machine.
    observes_contention: bool
    artifact_formats: frozenset[str]
    inconsistencies: dict[str, str] = field(default_factory=dict)
    # Undoes what making executors left in this process, once the suite is done with the case.
    release: Callable[[], None] = lambda: None
    executor: Executor | None = None

    def live(self) -> Executor:
        """The case's executor, made anew if a test closed the previous one."""
        if self.executor is None:
            self.executor = self.make()
        return self.executor

    def close(self) -> None:
        if self.executor is not None:
            executor, self.executor = self.executor, None
            executor.close()
        self.release()

    def closed_by_test(self) -> None:
        """A test closed the executor itself: the next test gets a fresh one."""
        self.executor = None


def in_process_case() -> ExecutorCase:
    return ExecutorCase(
        name="in-process",
        make=InProcessExecutor,
        workload=digits_workload(),
        model_sha256=None,
        loads_the_model=True,
        observes_contention=True,
        artifact_formats=frozenset({"onnx", "safetensors"}),
    )


def replay_case() -> ExecutorCase:
    table = ReplayTable.load(DIGITS_TABLE)
    return ExecutorCase(
        name="replay",
        make=lambda: ReplayExecutor(table, slots=2),
        workload=table.workload(),
        model_sha256=table.sha256,
        loads_the_model=False,
        observes_contention=False,
        artifact_formats=frozenset({"json"}),  # config.json: a replay has no model to export
    )


def ray_case() -> ExecutorCase:
    return ExecutorCase(
        name="ray",
        make=lambda: RayExecutor(workers=2),
        workload=digits_workload(),
        model_sha256=None,
        loads_the_model=True,
        observes_contention=True,
        artifact_formats=frozenset({"onnx", "safetensors"}),
        release=_shut_down_ray,
    )


# The example plugin's package (tests/plugins/): its executor type, as a plugin registers it.
EXAMPLE_PLUGIN_SOURCE = REPO / "tests" / "plugins" / "autotune_example_plugin" / "src"
EXAMPLE_EXECUTOR = "example_in_process"


def plugin_case() -> ExecutorCase:
    """The example plugin's executor, made as autotune makes any registered type: its
    configuration parsed by the registry, then `make_executors`. Its module is imported from
    the plugin's source (registering the type as its entry point would) and forgotten again
    when the case is released, so that later tests in the process see autotune's own types
    only; tests/system/plugins installs the package and reaches it through its entry point."""
    kinds = dict(registry._KINDS)
    sys.path.insert(0, str(EXAMPLE_PLUGIN_SOURCE))
    importlib.import_module("autotune_example_plugin.executor")
    config = parse_executor_config({"type": EXAMPLE_EXECUTOR, "memory_limit_mb": 2048})

    def make() -> Executor:
        (executor,) = make_executors(config, several=False)
        return executor

    def forget_the_plugin() -> None:
        registry._KINDS.clear()
        registry._KINDS.update(kinds)
        sys.path.remove(str(EXAMPLE_PLUGIN_SOURCE))
        for name in [n for n in sys.modules if n.startswith("autotune_example_plugin")]:
            del sys.modules[name]

    # The plugin's executor runs autotune's in-process one: the same workload and capabilities.
    return replace(in_process_case(), name="example-plugin", make=make, release=forget_the_plugin)


def _shut_down_ray() -> None:
    """Later test modules start their own Ray and check that none is running."""
    import ray

    if ray.is_initialized():
        ray.shutdown()


CASES = [
    pytest.param(in_process_case, id="in-process"),
    pytest.param(replay_case, id="replay"),
    pytest.param(plugin_case, id="example-plugin"),
    pytest.param(ray_case, id="ray", marks=[pytest.mark.slow, pytest.mark.integration]),
]


def drain(executor: Executor) -> list[TrialResult]:
    """Every result still to come; each `wait` with trials pending must return some."""
    results: list[TrialResult] = []
    while executor.pending():
        finished = executor.wait()
        assert finished, f"wait returned nothing with {executor.pending()} pending"
        results += finished
    return results
