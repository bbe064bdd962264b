"""What failed trials teach autotune's strategy: an error that names its type and stage rules
out the variant's other batch sizes and threads, and a refusal of the batch size alone rules
out no other batch size."""

from __future__ import annotations

import traceback

from autotune.core.contract import TrialResult, TrialSpec
from autotune.requests.request import parse_request
from autotune.strategies.autotune import ERROR_LIKE, AutotuneStrategy, Ledger
from autotune.strategies.reasons import error_signature, one_line, staged
from tests.coordinator_support import WORKLOAD, small_space

ONNX = {
    "runtime.engine": "onnxruntime",
    "runtime.graph_opt": "all",
    "batch.size": 8,
    "precision.mode": "fp32",
    "prune.method": "none",
}
FIDELITY_ERROR = "IndexError in fidelity: index 1 is out of bounds for axis 0 with size 1"


def spec(number: int, config: dict[str, object]) -> TrialSpec:
    return TrialSpec(study="s", trial_number=number, workload=WORKLOAD, config=config)


def strategy() -> AutotuneStrategy:
    return AutotuneStrategy(small_space(), parse_request({"name": "r"}, replay=True), 0)


def test_an_error_with_its_stage_skips_the_variant_at_other_batch_sizes_naming_its_trial() -> None:
    autotune = strategy()
    failed = spec(3, ONNX)
    autotune.after_trial(failed, TrialResult.for_spec(failed, "error", FIDELITY_ERROR))
    for batch in (1, 64):
        answer = autotune.answer("s", spec(4, {**ONNX, "batch.size": batch}), set())
        assert answer is not None and answer.result is not None
        assert answer.result.status == "skipped"
        assert answer.result.reason == (
            f"{ERROR_LIKE} #3, whose error would repeat: {FIDELITY_ERROR}"
        )
    other_variant = {**ONNX, "precision.mode": "int8_static"}
    assert autotune.answer("s", spec(5, other_variant), set()) is None


def test_an_error_without_a_stage_rules_out_nothing() -> None:
    ledger = Ledger(small_space(), designed=[])
    failed = spec(3, ONNX)
    ledger.settle(3, failed, TrialResult.for_spec(failed, "error", "measured on other hardware"))
    assert ledger.unsupported_like({**ONNX, "batch.size": 1}) is None


def test_a_refused_batch_size_rules_out_no_other_batch_size() -> None:
    ledger = Ledger(small_space(), designed=[])
    at_64 = {**ONNX, "batch.size": 64}
    refused = spec(3, at_64)
    reason = "batch.size=64: the model only takes batches of 1"
    ledger.settle(3, refused, TrialResult.for_spec(refused, "unsupported", reason))
    assert ledger.unsupported_like({**ONNX, "batch.size": 1}) is None
    assert ledger.unsupported_like({**ONNX, "batch.size": 8}) is None
    like = ledger.unsupported_like(at_64)
    assert like is not None and like.trial_number == 3
    proposals = [ledger.next_proposal(lambda: [at_64], set()) for _ in range(3)]
    assert ({**ONNX, "batch.size": 8}, "neighbour") in proposals


def fidelity(outputs: list[float]) -> float:
    return outputs[1]


def test_a_workers_error_reason_gains_the_stage_it_was_raised_in() -> None:
    try:
        fidelity([0.5])
    except IndexError as error:
        told = traceback.format_exception(error)
        reason = f"{type(error).__name__}: {error}"
    shown = staged(reason, "".join(told))
    assert shown == "IndexError in fidelity: list index out of range"
    assert error_signature(shown) == ("IndexError", "fidelity")
    assert staged(shown, "".join(told)) == shown
    assert error_signature(reason) is None


def test_a_shown_reason_is_one_line_of_bounded_length() -> None:
    shown = one_line("ValueError in run: " + "long\nline " * 100)
    assert "\n" not in shown and len(shown) <= 160 and shown.endswith("…")
