"""ONNX Runtime's execution providers, declared: the values of `runtime.provider`, in
registration order. Each names ONNX Runtime's provider and the providers that take the nodes it
cannot run (`fallbacks`), where its sessions run (`device`), the precision modes its kernels do
not run (`refuses`), the capabilities it needs beyond its own, the extra of autotune that
installs an ONNX Runtime with it (`package`, None where the engine's own extras do) and its
typed provider options (`options`), which the session passes to ONNX Runtime as they are.

A provider is `ort.<name>` among a node's capabilities where that node's ONNX Runtime has it
(`HardwareProfile.onnxruntime_providers`). Each option is a configuration key of the
onnxruntime engine, `runtime.provider.<provider>.<option>` (`option_keys`), typed by its field:
a search space fixes or searches it like any engine option, and it travels in the
configuration to the worker, the tuned file and `autotune.load`. Left out, it is the declared
default. A provider option may change what the kernels compute (TensorRT's fp16, an OpenVINO
GPU's precision), so each one names its own model variant: accuracy is measured again for a
value away from the default. Providers are the `autotune.providers` entry points
(`autotune.core.plugins`): autotune's own (`ort_providers.py`) first, then installed plugins',
loaded at the end of this module. Nothing here imports ONNX Runtime.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, ClassVar, Literal, TypeVar, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationError

from autotune.core.knobs.base import (
    DEFAULTS,
    DEVICE_KEY,
    PRECISION_KEY,
    ConfigValue,
    Option,
    Package,
)
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


def _declared(annotation: object) -> tuple[ConfigValue, ...] | None:
    """The values a field's type lists (a flag's, a `Literal`'s), or None."""
    if annotation is bool:
        return (False, True)
    if get_origin(annotation) is Literal:
        return get_args(annotation)
    return None


def _field_rule(model: type[ProviderOptions], field: str, value: ConfigValue) -> str | None:
    """Why `value` is not one the options' `field` takes (its type, strictly, and bounds)."""
    try:
        model.model_validate({field: value}, strict=True)
    except ValidationError as error:
        return f"is refused by {model.__name__}.{field}: {error.errors()[0]['msg']}"
    return None


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

    def option_key(self, field: str) -> str:
        return f"{PROVIDER_KEY}.{self.name}.{field}"

    def option_keys(self) -> tuple[Option, ...]:
        """Each option as a configuration key: a flag offers false and true, a `Literal` field
        its values; any other field is open, its values checked against the field's type and
        bounds."""
        model = type(self.options)
        return tuple(
            Option(
                self.option_key(field),
                _declared(info.annotation),
                getattr(self.options, field),
                defines_variant=True,
                rule=partial(_field_rule, model, field),
            )
            for field, info in model.model_fields.items()
        )

    def options_in(self, config: Mapping[str, ConfigValue]) -> ProviderOptions:
        """The options a configuration gives this provider (the declared default for a key it
        leaves out)."""
        fields = type(self.options).model_fields
        given = {f: config[key] for f in fields if (key := self.option_key(f)) in config}
        if not given:
            return self.options
        return self.options.model_validate({**self.options.model_dump(), **given}, strict=True)

    def chain(
        self, config: Mapping[str, ConfigValue] | None = None
    ) -> list[tuple[str, dict[str, str]]]:
        """What an ONNX Runtime session is given: this provider and its fallbacks, each with
        the options `config` gives it."""
        providers = [self, *(PROVIDERS[name] for name in self.fallbacks)]
        return [(p.ort_name, p.options_in(config or {}).for_onnxruntime()) for p in providers]

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
