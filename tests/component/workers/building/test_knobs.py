"""Every declared knob has its implementation, and the registry of implementations refuses what
would make the two drift apart."""

from __future__ import annotations

import pytest

from autotune.core.knobs import ENGINES, PRECISIONS, PRUNINGS, Precision, register
from workers.building.knobs import (
    EngineImplementation,
    PrecisionImplementation,
    PruningImplementation,
    engine_of,
    implements,
    precision_of,
    pruning_of,
    unimplemented,
)
from workers.building.probe import probe


def test_every_declared_knob_is_implemented_by_a_subclass_of_its_declaration() -> None:
    assert unimplemented() == []
    for name, engine in ENGINES.items():
        assert isinstance(engine_of(name), type(engine))
        assert isinstance(engine_of(name), EngineImplementation)
    for name, precision in PRECISIONS.items():
        assert isinstance(precision_of(name), type(precision))
        assert isinstance(precision_of(name), PrecisionImplementation)
    for name, pruning in PRUNINGS.items():
        assert isinstance(pruning_of(name), type(pruning))
        assert isinstance(pruning_of(name), PruningImplementation)


def test_every_engine_states_how_the_registry_serves_it_and_exports_its_artifact() -> None:
    for name, engine in ENGINES.items():
        assert engine.served_as in ("onnx", "autotune", "files"), name
        assert type(engine_of(name)).export is not EngineImplementation.export, name


def test_what_an_engine_probes_here_is_what_it_declares_it_may_offer() -> None:
    """A node's profile is read by the declarations (`Engine.offered`): a probe that reported
    a capability its declaration does not provide would leave it unknown to every space."""
    profile = probe()
    for name, engine in ENGINES.items():
        assert engine_of(name).probe() <= set(engine.provides), name
        assert engine.offered(profile) <= set(engine.provides), name
    offered = {capability for engine in ENGINES.values() for capability in engine.offered(profile)}
    assert offered <= profile.capabilities()


def test_every_engine_runs_registered_precisions() -> None:
    for name, engine in ENGINES.items():
        assert engine.precisions and engine.precisions <= PRECISIONS.keys(), name


def test_a_declared_knob_without_an_implementation_is_named() -> None:
    class Int4WeightOnlyDraft(Precision):
        name = "int4_draft"

    register(Int4WeightOnlyDraft)
    try:
        assert unimplemented() == ["precision.mode=int4_draft"]
    finally:
        del PRECISIONS["int4_draft"]


def test_an_implementation_needs_a_declaration_and_is_registered_once() -> None:
    class Undeclared(PrecisionImplementation):
        name = "int3"

    with pytest.raises(ValueError, match="implements no declared knob precision.mode=int3"):
        implements(Undeclared)

    fp32 = type(PRECISIONS["fp32"])

    class SecondFp32(PrecisionImplementation, fp32):  # type: ignore[misc,valid-type]
        pass

    with pytest.raises(ValueError, match="precision.mode=fp32 is already implemented"):
        implements(SecondFp32)
