"""What every knob declares, and the registries that hold them.

A knob is one value of a selecting dimension: a runtime engine (`runtime.engine`), a
precision mode (`precision.mode`) or a pruning method (`prune.method`). Every such choice
defines the model variant (accuracy is measured once per variant); an engine's own option
does where it says so (`Option.defines_variant`). Its class says which further dimension
keys it owns (`options`), which hardware capabilities it needs (`needs`) and
`supports(config, target)`: why it cannot run a configuration on a target, decided before
anything is built. The search space takes its validity rules from these classes, so a
combination a knob rejects is never proposed; the build checks the same rules again.

These are declarations: nothing here imports torch, ONNX Runtime or OpenVINO, and both planes
read them. How each knob builds, runs and exports is its data-plane implementation
(`workers.building.knobs`), registered under the same key and name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal, TypeVar

from autotune.core.errors import Unsupported

if TYPE_CHECKING:
    from autotune.core.contract import HardwareProfile
    from autotune.core.knobs.config import TrialConfig

# A configuration value: what a search space dimension takes.
ConfigValue = str | int | float | bool
ModelKind = Literal["torch", "onnx"]
ENGINE_KEY = "runtime.engine"
PRECISION_KEY = "precision.mode"
PRUNE_KEY = "prune.method"
# Of an int8 model, how many of its nodes most sensitive to quantization stay in float.
FALLBACK_KEY = "precision.fallback"
DEVICE_KEY = "runtime.device"
# What a configuration that leaves these keys out runs.
DEFAULTS: dict[str, str] = {DEVICE_KEY: "cpu", PRECISION_KEY: "fp32", PRUNE_KEY: "none"}


@dataclass(frozen=True)
class Target:
    """What a configuration is judged against before anything is built: the hardware's
    capabilities (`autotune.core.contract.CAPABILITIES` names and the engines' own), the
    model's format (None while planning without a model: anything a model could use) and the
    modules the knobs need that are not installed there (`Package.module`)."""

    capabilities: frozenset[str]
    model_kind: ModelKind | None = None
    missing_modules: frozenset[str] = frozenset()

    def unmet(self, needs: Sequence[str]) -> str | None:
        """'needs a, b or c' for the needs this target does not meet ('b|c' is met by either
        capability), or None when it meets them all."""
        missing = [n for n in needs if not any(alt in self.capabilities for alt in n.split("|"))]
        if not missing:
            return None
        return "needs " + ", ".join(n.replace("|", " or ") for n in missing)


def positive_integer(value: ConfigValue) -> str | None:
    """The rule of an open option that counts something."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return "must be an integer >= 1"
    return None


@dataclass(frozen=True)
class Option:
    """A dimension key a knob owns: its allowed values (None: open, any value its `rule`
    allows, an integer >= 1 unless it says otherwise), its default, and whether it changes the
    model's numerics."""

    key: str
    values: tuple[ConfigValue, ...] | None
    default: ConfigValue
    defines_variant: bool = False
    # An open option's rule: why a value is refused ('must be ...'), or None.
    rule: Callable[[ConfigValue], str | None] = positive_integer

    def parse(self, config: Mapping[str, ConfigValue]) -> ConfigValue:
        value = config.get(self.key, self.default)
        if self.values is None:
            reason = self.rule(value)
            if reason is not None:
                raise Unsupported(f"{self.key}={value!r} {reason}")
        elif value not in self.values or self._flag_mismatch(value):
            raise Unsupported(f"{self.key}={value!r} is not one of {list(self.values)}")
        return value

    def _flag_mismatch(self, value: ConfigValue) -> bool:
        """Whether a true/false option was given something else (1 equals True in Python,
        and would name another variant)."""
        flags = self.values is not None and all(isinstance(v, bool) for v in self.values)
        return flags and not isinstance(value, bool)


@dataclass(frozen=True)
class Package:
    """A module a knob's implementation imports that autotune's own dependencies leave out,
    and the extras of autotune that install it (`pyproject.toml`'s optional dependencies)."""

    module: str
    extras: tuple[str, ...]

    def install_hint(self, subject: str) -> str:
        """'install autotune[a] or autotune[b] to search <subject>'."""
        extras = " or ".join(f"autotune[{extra}]" for extra in self.extras)
        return f"install {extras} to search {subject}"


class Knob:
    """One value of a selecting dimension; subclasses are registered by name. `package` is
    what must be installed for it to run at all (None: autotune's own dependencies)."""

    key: ClassVar[str]
    name: ClassVar[str]
    options: ClassVar[tuple[Option, ...]] = ()
    needs: ClassVar[tuple[str, ...]] = ()
    package: ClassVar[Package | None] = None

    def supports(self, config: TrialConfig, target: Target) -> str | None:
        """Why this knob cannot run `config` on `target`, or None."""
        package = self.package
        subject = f"{self.key}={self.name}"
        if package is not None and package.module in target.missing_modules:
            return f"{subject}: {package.module} is not installed; {package.install_hint(subject)}"
        unmet = target.unmet(self.needs)
        return None if unmet is None else f"{subject} {unmet}"


class Precision(Knob):
    """A numeric format. The engines that run it say so (`Engine.precisions`). Its data-plane
    implementation turns a variant (fp32, already pruned, in the format its engine runs) into
    this precision; an engine that applies a precision itself at run time
    (`Engine.applies_precisions`) gets the variant unchanged."""

    key = PRECISION_KEY


class Pruning(Knob):
    """A way of removing weights, applied to the fp32 model in its own format (before an
    ONNX export)."""

    key = PRUNE_KEY
    takes_ratio: ClassVar[bool] = False  # reads prune.ratio

    def prunes(self, config: TrialConfig) -> bool:
        """Whether this configuration removes anything (a ratio of 0 does not)."""
        return config.prune_ratio > 0.0 if self.takes_ratio else True


class Engine(Knob):
    """A runtime that runs variants in one format (`model_format`: a torch model is exported
    to ONNX for an ONNX engine) in the precision modes it declares (`precisions`); `applies`
    the shared kernel and sharding fields of `TrialConfig`
    it honours (any other must keep its default); `software` the distributions whose
    versions the provenance records; `provides` the capabilities it may offer on a node,
    which its implementation's `probe` reports there (`offered` reads them off the node's
    profile)."""

    key = ENGINE_KEY
    model_format: ClassVar[ModelKind]
    precisions: ClassVar[frozenset[str]]
    applies_precisions: ClassVar[frozenset[str]] = frozenset()
    # A precision mode this engine runs on one device only: that device, and the reason the
    # other refuses it.
    precision_devices: ClassVar[dict[str, tuple[Literal["cpu", "cuda"], str]]] = {}
    applies: ClassVar[frozenset[str]] = frozenset()
    software: ClassVar[tuple[str, ...]] = ()
    provides: ClassVar[tuple[str, ...]] = ()
    concurrent_calls: ClassVar[bool] = False  # one session is safe to call from threads
    # How the model registry serves this engine's artifact: "onnx", MLflow's onnx flavour (ONNX
    # Runtime with the measured provider, threads and graph level); "autotune", autotune's
    # pyfunc loader (`workers.serving`), which runs the artifact on this engine as measured;
    # "files", the files as they are, for `autotune.load`.
    served_as: ClassVar[Literal["onnx", "autotune", "files"]]

    def supports(self, config: TrialConfig, target: Target) -> str | None:
        if self.model_format == "torch" and target.model_kind == "onnx":
            return f"{self.key}={self.name} runs torch models only; this model is ONNX"
        if config.precision not in self.precisions:
            return (
                f"{PRECISION_KEY}={config.precision} does not run on {self.key}={self.name} "
                f"(it runs {', '.join(sorted(self.precisions & PRECISIONS.keys()))})"
            )
        only = self.precision_devices.get(config.precision)
        if only is not None and only[0] != ("cuda" if self.on_cuda(config) else "cpu"):
            return only[1]
        return super().supports(config, target)

    def on_cuda(self, config: TrialConfig) -> bool:
        """Whether the session runs on CUDA devices."""
        return config.device == "cuda"

    def offered(self, profile: HardwareProfile) -> set[str]:
        """The capabilities of `provides` a node's profile shows: those its probe reported
        (`HardwareProfile.engines`); an engine whose probe fills a field of the profile of its
        own reads them from there."""
        return set(self.provides) & set(profile.engines)


K = TypeVar("K", bound=Knob)

ENGINES: dict[str, Engine] = {}
PRECISIONS: dict[str, Precision] = {}
PRUNINGS: dict[str, Pruning] = {}
_REGISTRIES: dict[str, dict[str, Knob]] = {
    ENGINE_KEY: ENGINES,  # type: ignore[dict-item]
    PRECISION_KEY: PRECISIONS,  # type: ignore[dict-item]
    PRUNE_KEY: PRUNINGS,  # type: ignore[dict-item]
}


def register(cls: type[K]) -> type[K]:
    """Register one instance of a knob class under its `key` and `name`."""
    registry = _REGISTRIES[cls.key]
    if cls.name in registry:
        raise ValueError(f"{cls.key}={cls.name} is already registered")
    registry[cls.name] = cls()
    return cls


def engine_options() -> list[Option]:
    """Every registered engine's own option keys."""
    return [option for engine in ENGINES.values() for option in engine.options]


def option_default(key: str) -> ConfigValue:
    return next(o.default for o in engine_options() if o.key == key)


def knob(key: str, name: str) -> Knob:
    registry = _REGISTRIES[key]
    if name not in registry:
        raise Unsupported(f"{key}={name!r} is not one of {sorted(registry)}")
    return registry[name]


def selecting_keys() -> tuple[str, ...]:
    return tuple(_REGISTRIES)


def declared_values(key: str) -> list[ConfigValue] | None:
    """The values the knobs declare for `key`, in registration order: a selecting key's knob
    names (plugins' after autotune's), an engine option's values; None for a key that no knob
    declares or whose values are open (`Option.rule`)."""
    if key in _REGISTRIES:
        return list(_REGISTRIES[key])
    option = next((o for o in engine_options() if o.key == key), None)
    return None if option is None or option.values is None else list(option.values)


def all_knobs() -> list[Knob]:
    return [k for registry in _REGISTRIES.values() for k in registry.values()]


def supports(config: TrialConfig, target: Target) -> str | None:
    """Why `config` cannot run on `target`: the first reason its engine, precision or pruning
    method gives, or None."""
    chosen: list[Knob] = [
        ENGINES[config.engine],
        PRECISIONS[config.precision],
        PRUNINGS[config.prune_method],
    ]
    return next((r for k in chosen if (r := k.supports(config, target)) is not None), None)
