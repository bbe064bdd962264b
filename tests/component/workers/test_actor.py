from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

from autotune.core.contract import ModelRef, Workload
from tests.workers_support import digits_workload, spec_for
from workers.actor import TrialWorker


def counted_workload(tmp_path: Path, make_module: Callable[[str], str]) -> tuple[Workload, str]:
    name = make_module(
        """
        from experiments.digits.model import build_model

        BUILDS = []

        def build():
            BUILDS.append(1)
            return build_model()
        """
    )
    workload = digits_workload(model=ModelRef(entry_point=f"{name}:build"), extra_path=[tmp_path])
    return workload, name


def test_repeated_calls_do_not_reload_the_model(
    tmp_path: Path, make_module: Callable[[str], str]
) -> None:
    workload, module_name = counted_workload(tmp_path, make_module)
    worker = TrialWorker()
    info = worker.inspect(workload)
    first = worker.run(spec_for(workload, {"batch.size": 2}))
    second = worker.run(spec_for(workload, {"batch.size": 4, "runtime.threads": 1}))
    artifact = worker.export(spec_for(workload, {}), str(tmp_path / "out"))
    assert (first.status, second.status) == ("ok", "ok")
    assert len(sys.modules[module_name].BUILDS) == 1
    assert worker.store.loads == 1
    assert first.provenance and first.provenance.model_sha256 == info.sha256
    assert Path(artifact.path).is_file()


def test_workers_keep_separate_caches(tmp_path: Path, make_module: Callable[[str], str]) -> None:
    workload, module_name = counted_workload(tmp_path, make_module)
    TrialWorker().inspect(workload)
    TrialWorker().inspect(workload)
    assert len(sys.modules[module_name].BUILDS) == 2


def test_ping() -> None:
    reply = TrialWorker().ping()
    assert reply["pid"] == os.getpid() and isinstance(reply["hostname"], str)
