"""ONNX Runtime's execution providers, declared: the values of `runtime.provider`, in
registration order. Each names ONNX Runtime's provider and the providers that take the nodes it
cannot run (`fallbacks`), where its sessions run (`device`), the precision modes its kernels do
not run (`refuses`), the capabilities it needs beyond its own, the extra of autotune that
installs an ONNX Runtime with it (`package`, None where the engine's own extras do) and its
typed provider options (`options`), which the session passes to ONNX Runtime as they are.

A provider is `ort.<name>` among a node's capabilities where that node's ONNX Runtime has it
(`HardwareProfile.onnxruntime_providers`). Option values are the declared defaults; a request
cannot change them. Providers are the `autotune.providers` entry points
(`autotune.core.plugins`): autotune's own (`ort_providers.py`) first, then installed plugins',
loaded at the end of this module. Nothing here imports ONNX Runtime.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict

from autotune.core.knobs.base import DEFAULTS, DEVICE_KEY, PRECISION_KEY, Package
from autotune.core.plugins import PROVIDERS_GROUP, load_plugins

if TYPE_CHECKING:
    from autotune.core.knobs.base import Target

PROVIDER_KEY = "runtime.provider"


class ProviderOptions(BaseModel):
    """A provider's options, each field named as ONNX Runtime names it; none by default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def for_onnxruntime(self) -> dict[str, str]:
        """The options as ONNX Runtime reads them: strings, true/false for flags."""
        return {key: _as_text(value) for key, value in self.model_dump().items()}


def _as_text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


class ExecutionProvider:
    """One value of `runtime.provider`; subclasses are registered by name
    (`register_provider`)."""

    name: ClassVar[str]
    ort_name: ClassVar[str]
    fallbacks: ClassVar[tuple[str, ...]] = ()  # registered providers, most preferred first
    device: ClassVar[Literal["cpu", "cuda"]] = "cpu"
    refuses: ClassVar[frozenset[str]] = frozenset()
    needs: ClassVar[tuple[str, ...]] = ()
    package: ClassVar[Package | None] = None
    options: ClassVar[ProviderOptions] = ProviderOptions()

    @property
    def capability(self) -> str:
        return f"ort.{self.name}"

    def chain(self) -> list[tuple[str, dict[str, str]]]:
        """What an ONNX Runtime session is given: this provider and its fallbacks, each with
        its options."""
        providers = [self, *(PROVIDERS[name] for name in self.fallbacks)]
        return [(p.ort_name, p.options.for_onnxruntime()) for p in providers]

    def unavailable(self, target: Target) -> str | None:
        """Why this provider cannot run on `target`: ONNX Runtime there lacks it, or the
        target lacks a capability it needs."""
        subject = f"{PROVIDER_KEY}={self.name}"
        if self.capability not in target.capabilities:
            hint = "" if self.package is None else f"; {self.package.install_hint(subject)}"
            return f"{subject}: {self.ort_name} is not available here{hint}"
        unmet = target.unmet(self.needs)
        return None if unmet is None else f"{subject} {unmet}"

    def refuses_device(self, device: str) -> str | None:
        """Why a session of this provider cannot run on `device` (left at its default, the
        device is where the provider runs)."""
        if device in (DEFAULTS[DEVICE_KEY], self.device):
            return None
        return (
            f"{DEVICE_KEY}={device} with {PROVIDER_KEY}={self.name}: onnxruntime runs where "
            f"its provider does; ask for {PROVIDER_KEY}={_names(lambda p: p.device == device)}"
        )

    def refuses_precision(self, precision: str) -> str | None:
        if precision not in self.refuses:
            return None
        return (
            f"{PRECISION_KEY}={precision} is not supported by onnxruntime's {self.ort_name}; "
            f"it needs {PROVIDER_KEY}={_names(lambda p: precision not in p.refuses)}"
        )


def _names(chosen: Callable[[ExecutionProvider], bool]) -> str:
    """The registered providers `chosen` picks, as 'a or b or c'."""
    return " or ".join(p.name for p in PROVIDERS.values() if chosen(p))


P = TypeVar("P", bound=ExecutionProvider)
PROVIDERS: dict[str, ExecutionProvider] = {}


def register_provider(cls: type[P]) -> type[P]:
    """Register one instance of a provider class under its `name`; its fallbacks must be
    registered before it."""
    if cls.name in PROVIDERS:
        raise ValueError(f"{PROVIDER_KEY}={cls.name} is already registered")
    unknown = [name for name in cls.fallbacks if name not in PROVIDERS]
    if unknown:
        raise ValueError(
            f"{PROVIDER_KEY}={cls.name}: fallbacks {unknown} are not registered providers "
            f"(registered: {list(PROVIDERS)})"
        )
    PROVIDERS[cls.name] = cls()
    return cls


load_plugins(PROVIDERS_GROUP)
