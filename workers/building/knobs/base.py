"""How each declared knob (`autotune.core.knobs`) builds and runs: one implementation class per
knob, a subclass of its declaration, registered with `@implements` under the same key and name.
The declarations decide what may run; these classes do it."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from autotune.core.knobs import ENGINE_KEY, PRECISION_KEY, PRUNE_KEY, Engine, Precision, Pruning
from autotune.core.knobs.base import Knob, all_knobs

if TYPE_CHECKING:
    from pathlib import Path

    from autotune.core.contract import ArtifactInfo, TrialSpec
    from autotune.core.knobs.config import TrialConfig
    from workers.building.runtimes import Session
    from workers.building.variants import BuildContext, Variant
    from workers.cache import LoadedWorkload


class EngineImplementation(Engine):
    """An engine's probe of this machine, its last checks before a session, its session and
    its export."""

    def probe(self) -> set[str]:
        """The capabilities this engine offers on this machine (from `provides`)."""
        return set()

    def check_machine(self, config: TrialConfig) -> None:
        """Raise `Unsupported` for what only this machine can tell (a device or provider that
        is not there); run right before the session is built."""

    def conversion_problem(self, onnx_model: bytes) -> str | None:
        """Why this engine cannot convert this ONNX model (an `Unsupported` reason), from a
        check cheap enough to run when a workload is inspected; None where it can, or where no
        such check exists."""
        return None

    def build_precision(
        self, variant: Variant, config: TrialConfig, context: BuildContext
    ) -> Variant:
        """The variant in `config.precision`, as the precision builds it; an engine that
        builds a precision its own way (OpenVINO's int8_static, by NNCF) overrides this."""
        return precision_of(config.precision).build(variant, config, context)

    def session(self, variant: Variant, config: TrialConfig) -> Session:
        raise NotImplementedError

    def export(
        self, loaded: LoadedWorkload, spec: TrialSpec, config: TrialConfig, directory: Path
    ) -> ArtifactInfo:
        """Write the configuration's optimized model into `directory`, with `variant.json`
        beside it (`workers.building.exports`)."""
        raise NotImplementedError


class PrecisionImplementation(Precision):
    """Turns a variant (fp32, already pruned, in the format its engine runs) into this
    precision."""

    def build(self, variant: Variant, config: TrialConfig, context: BuildContext) -> Variant:
        raise NotImplementedError


class PruningImplementation(Pruning):
    """Prunes the fp32 model in its own format (before an ONNX export)."""

    def apply(self, variant: Variant, config: TrialConfig, context: BuildContext) -> Variant:
        """The variant pruned where this configuration removes anything, else itself."""
        return self.build(variant, config, context) if self.prunes(config) else variant

    def build(self, variant: Variant, config: TrialConfig, context: BuildContext) -> Variant:
        raise NotImplementedError

    def finish(self, variant: Variant, config: TrialConfig) -> Variant:
        """The last step, after precision (2:4 sparse kernels need the final dtype)."""
        return variant


Impl = TypeVar("Impl", bound=Knob)

ENGINE_IMPLEMENTATIONS: dict[str, EngineImplementation] = {}
PRECISION_IMPLEMENTATIONS: dict[str, PrecisionImplementation] = {}
PRUNING_IMPLEMENTATIONS: dict[str, PruningImplementation] = {}
_REGISTRIES: dict[str, dict[str, Knob]] = {
    ENGINE_KEY: ENGINE_IMPLEMENTATIONS,  # type: ignore[dict-item]
    PRECISION_KEY: PRECISION_IMPLEMENTATIONS,  # type: ignore[dict-item]
    PRUNE_KEY: PRUNING_IMPLEMENTATIONS,  # type: ignore[dict-item]
}


def implements(cls: type[Impl]) -> type[Impl]:
    """Register one instance of an implementation class under its declaration's key and name.
    The class must subclass the registered declaration of that name, and only once."""
    declared = next((k for k in all_knobs() if (k.key, k.name) == (cls.key, cls.name)), None)
    if declared is None or not issubclass(cls, type(declared)):
        raise ValueError(f"{cls.__name__} implements no declared knob {cls.key}={cls.name}")
    registry = _REGISTRIES[cls.key]
    if cls.name in registry:
        raise ValueError(f"{cls.key}={cls.name} is already implemented")
    registry[cls.name] = cls()
    return cls


def engine_of(name: str) -> EngineImplementation:
    return ENGINE_IMPLEMENTATIONS[name]


def precision_of(name: str) -> PrecisionImplementation:
    return PRECISION_IMPLEMENTATIONS[name]


def pruning_of(name: str) -> PruningImplementation:
    return PRUNING_IMPLEMENTATIONS[name]


def unimplemented() -> list[str]:
    """The declared knobs this data plane has no implementation of."""
    return [f"{k.key}={k.name}" for k in all_knobs() if k.name not in _REGISTRIES[k.key]]
