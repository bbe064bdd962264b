"""A machine that never turns quiet: after three trials in a row that waited the whole
`contention_max_wait_s` and still measured under load, the study stops waiting (its trials
measure at once, marked contended) and says so once; a wait that found quiet starts the
count again."""

from __future__ import annotations

from autotune.core.contract import Contention, TrialResult, TrialSpec
from autotune.search.quiet import GIVE_UP_AFTER, QuietWaits
from tests.coordinator_support import ScriptedExecutor, make_rig

MAX_WAIT_S = 10.0  # the default contention_max_wait_s


def contention(waited_s: float, contended: bool) -> Contention:
    return Contention(
        seconds=0.2,
        cores=1,
        other_cpu_share=0.9 if contended else 0.0,
        machine_other_cpu_share=0.9 if contended else 0.0,
        steal_share=0.0,
        cores_to_itself=0.1 if contended else 1.0,
        waited_s=waited_s,
        contended=contended,
    )


class BusyMachine(ScriptedExecutor):
    """Every trial waited `waited_s(spec)` for quiet and measured under load."""

    def __init__(self, waited_s: float = MAX_WAIT_S, quiet_on: int | None = None) -> None:
        super().__init__()
        self.waited_s = waited_s
        self.quiet_on = quiet_on

    def _result(self, spec: TrialSpec) -> TrialResult:
        result = super()._result(spec)
        assert result.provenance is not None
        quiet = spec.trial_number == self.quiet_on
        seen = contention(1.0 if quiet else self.waited_s, not quiet)
        provenance = result.provenance.model_copy(update={"contention": seen})
        return result.model_copy(update={"provenance": provenance})


def policies(executor: ScriptedExecutor) -> list[str]:
    return [spec.measurement.contention for spec in executor.submitted]


def test_a_study_stops_waiting_after_three_vain_waits_and_says_so_once() -> None:
    rig = make_rig(executor=BusyMachine(), trials=6)
    rig.search()
    assert policies(rig.executor) == ["wait"] * GIVE_UP_AFTER + ["warn"] * 3
    said = [note for note in rig.notes if "stayed busy" in note]
    assert len(said) == 1 and "measurement.contention: fail" in said[0]


def test_a_wait_that_found_quiet_starts_the_count_again() -> None:
    rig = make_rig(executor=BusyMachine(quiet_on=1), trials=6)
    rig.search()
    assert policies(rig.executor) == ["wait"] * 5 + ["warn"]


def test_a_short_wait_is_no_vain_wait() -> None:
    rig = make_rig(executor=BusyMachine(waited_s=MAX_WAIT_S / 2), trials=6)
    rig.search()
    assert policies(rig.executor) == ["wait"] * 6
    assert not [note for note in rig.notes if "stayed busy" in note]


def test_other_policies_are_left_as_they_are() -> None:
    rig = make_rig(trials=1)
    settings = rig.coordinator.tuning.request.measurement.model_copy(update={"contention": "fail"})
    waits = QuietWaits(settings)
    assert waits.measurement().contention == "fail"
