"""A trial whose engine could not convert the model rules out, without building them, the
configurations of that engine and model variant that differ in batch size, threads or the
engine's own options (OpenVINO's hint and streams apply only to a converted model); any other
unsupported trial rules out other batch sizes and thread counts only."""

from __future__ import annotations

from pathlib import Path

from autotune.core.contract import ConfigValue, ModelRef, TrialResult, TrialSpec
from autotune.core.errors import CannotConvert
from autotune.search.budget import SearchBudget
from autotune.search.coordinator import Coordinator, Tuning
from autotune.space.search_space import EffectiveSpace
from autotune.strategies import Strategy, make_strategy
from autotune.strategies.autotune import UNCONVERTIBLE_LIKE, UNSUPPORTED_LIKE
from tests.coordinator_support import (
    INFO,
    PROFILE,
    WORKLOAD,
    Dimension,
    RecordingTracker,
    ScriptedExecutor,
    deadline,
    make_request,
    open_store,
    space_of,
)
from tests.unconvertible import digits_through_det
from tests.workers_support import digits_workload, spec_for
from workers import run_trial
from workers.cache import WorkloadCache

HINT = "runtime.ov_performance_hint"
OPENVINO: dict[str, ConfigValue] = {
    "runtime.engine": "openvino",
    HINT: "latency",
    "runtime.threads": 1,
    "batch.size": 4,
    "precision.mode": "fp32",
}
CANNOT_CONVERT = str(CannotConvert("openvino", "OpenVINO", "No conversion rule for Det-17"))


def openvino_space() -> EffectiveSpace:
    dims: list[Dimension] = [
        ("runtime.engine", ["torch_eager", "openvino"], {}),
        (HINT, ["latency", "throughput"], {"runtime.engine": ["openvino"]}),
        ("runtime.threads", [1, 2], {}),
        ("batch.size", [4, 8], {}),
        ("precision.mode", ["fp32", "bf16"], {}),
    ]
    return space_of("openvino", dims)


def autotune_strategy() -> Strategy:
    return make_strategy("autotune", openvino_space(), make_request(10), seed=0)


def spec(number: int, **changes: ConfigValue) -> TrialSpec:
    config = {**OPENVINO, **{key.replace("__", "."): v for key, v in changes.items()}}
    return TrialSpec(study="s", trial_number=number, workload=WORKLOAD, config=config)


def skip_reason(strategy: Strategy, trial: TrialSpec) -> str | None:
    answer = strategy.answer("s", trial, set())
    if answer is None:
        return None
    assert answer.result is not None and answer.result.status == "skipped"
    return answer.result.reason


def test_a_real_conversion_refusal_skips_other_threads_hints_and_batches(tmp_path: Path) -> None:
    model = digits_through_det(tmp_path / "digits-det.onnx")
    first = spec_for(digits_workload(model=ModelRef(onnx=str(model))), OPENVINO)
    result = run_trial(first, WorkloadCache())
    assert result.status == "unsupported", result.reason
    strategy = autotune_strategy()
    strategy.after_trial(first, result)
    for changes in ({"runtime__threads": 2}, {HINT.replace(".", "__"): "throughput"}):
        reason = skip_reason(strategy, spec(1, **changes))
        assert reason == f"{UNCONVERTIBLE_LIKE} #0: {result.reason}"
    assert skip_reason(strategy, spec(1, batch__size=8, runtime__threads=2)) is not None
    assert skip_reason(strategy, spec(1, precision__mode="bf16")) is None, "another variant"


def test_another_unsupported_reason_does_not_rule_out_the_engine_s_options() -> None:
    strategy = autotune_strategy()
    refused = "runtime.ov_streams: OpenVINO's CPU plugin was asked for streams 2 but compiled 1"
    strategy.after_trial(spec(0), TrialResult.for_spec(spec(0), "unsupported", refused))
    assert skip_reason(strategy, spec(1, runtime__threads=2)) == f"{UNSUPPORTED_LIKE} #0: {refused}"
    assert skip_reason(strategy, spec(1, **{HINT.replace(".", "__"): "throughput"})) is None


class RefusingOpenVino(ScriptedExecutor):
    """Every OpenVINO trial cannot convert the model; the rest are measured from the table."""

    def _result(self, spec: TrialSpec) -> TrialResult:
        if spec.config.get("runtime.engine") == "openvino":
            return TrialResult.for_spec(spec, "unsupported", CANNOT_CONVERT)
        return super()._result(spec)


def test_a_study_builds_one_openvino_configuration_per_variant() -> None:
    space, request = openvino_space(), make_request(24)
    strategy = make_strategy("autotune", space, request, seed=0)
    executor = RefusingOpenVino()
    store = open_store(request, strategy, space)
    tuning = Tuning(request, WORKLOAD, INFO, space, PROFILE, Path("unused-artifacts"))
    coordinator = Coordinator(
        tuning, store, strategy, executor, RecordingTracker(), SearchBudget(24, None)
    )
    with deadline(30.0):
        coordinator.search()
    built = [s.config for s in executor.submitted if s.config["runtime.engine"] == "openvino"]
    assert sorted(c["precision.mode"] for c in built) == ["bf16", "fp32"]
    skipped = [r for r in store.records() if r.status == "skipped"]
    assert all(r.reason and r.reason.startswith(UNCONVERTIBLE_LIKE) for r in skipped)
    assert any(r.config[HINT] == "throughput" for r in skipped), "the hint was proposed too"
