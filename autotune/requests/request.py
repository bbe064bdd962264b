"""The tuning request: what the user submits (YAML), validated strictly."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from pathlib import Path
from types import UnionType
from typing import TYPE_CHECKING, Annotated, Any, Union, get_args, get_origin

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    ValidationError,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError

from autotune.core.contract import (
    MAX_SECONDS,
    DataRef,
    MeasurementSettings,
    MetricRef,
    ModelRef,
    Strict,
    Workload,
)
from autotune.core.errors import RequestError
from autotune.core.metrics import (
    BOUNDS,
    OBJECTIVES,
    SELECTIONS,
    Bound,
    Metric,
    Study,
    selection_objective,
)
from autotune.core.model_files import workload_python_path

REQUIRED_UNLESS_REPLAY = "is required (except with --replay)"

# Upper bounds of the request's numbers (MeasurementSettings has its own, the bounds registry
# those of the constraints): generous, but finite, so that no number overflows a database
# column or asks for a study without end.
MAX_TRIALS = 100_000
MAX_WEIGHT = 1e6
MAX_NEIGHBOURS = 100
MAX_ROUNDS = 1000
MAX_ROUND_SECONDS = 3600.0
MAX_PRICE_PER_HOUR = 1e6
MAX_GCO2_PER_KWH = 1e4

# How alike (difflib's ratio) a valid key must be to an unknown one to be offered in its
# place: 'max_latency_p95_ms' for 'max_latncy' (0.71), not 'cluster' for 'colour' (0.62).
SUGGESTION_CUTOFF = 0.7


class RegisteredName:
    """A name that must be in a registry, read at validation time (so a newly registered one
    is accepted at once), with the registry's names as the JSON schema's enum."""

    def __init__(self, names: Callable[[], list[str]]) -> None:
        self.names = names

    def __call__(self, value: Any) -> Any:
        if not isinstance(value, str) or value not in self.names():
            expected = {"expected": _one_of(self.names())}
            raise PydanticCustomError("literal_error", "Input should be {expected}", expected)
        return value

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {**handler(schema), "enum": self.names()}


def _one_of(names: list[str]) -> str:
    """'a', 'b' or 'c', as pydantic words a Literal's choices."""
    quoted = [repr(name) for name in names]
    return " or ".join(filter(None, [", ".join(quoted[:-1]), quoted[-1]]))


# An objective (`autotune.core.metrics.OBJECTIVES`). `latency` is the p95 of one call (one
# batch); `latency_per_sample` (ms per sample at the configuration's batch size) and
# `throughput` (samples/s) are per sample.
_OBJECTIVES = RegisteredName(lambda: list(OBJECTIVES))
Objective = Annotated[str, BeforeValidator(_OBJECTIVES), _OBJECTIVES]
# A selection strategy: one that ranks by a registered objective (`SELECTIONS`), or weighted.
_SELECTIONS = RegisteredName(lambda: [*SELECTIONS, "weighted"])
SelectionStrategy = Annotated[str, BeforeValidator(_SELECTIONS), _SELECTIONS]


class RequestPart(Strict):
    """A part of a request: every number in it finite (NaN and infinity bound nothing)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ConstraintBounds(RequestPart):
    """Bounds on the measured metrics; one optional field per registered bound
    (`autotune.core.metrics.BOUNDS`)."""

    if TYPE_CHECKING:

        def __getattr__(self, name: str) -> float | None: ...


def _bound_field(bound: Bound) -> Any:
    return Field(
        default=None,
        ge=0.0 if bound.zero_allowed else None,
        gt=None if bound.zero_allowed else 0.0,
        le=bound.limit,
        description=bound.description,
    )


def build_constraints_model() -> type[ConstraintBounds]:
    """The `Constraints` model of the bounds registered now."""
    fields: dict[str, Any] = {
        name: (float | None, _bound_field(bound)) for name, bound in BOUNDS.items()
    }
    return create_model(
        "Constraints",
        __base__=ConstraintBounds,
        __module__=__name__,
        __doc__=ConstraintBounds.__doc__,
        **fields,
    )


if TYPE_CHECKING:
    Constraints = ConstraintBounds
else:
    Constraints = build_constraints_model()


class Budget(RequestPart):
    trials: int | None = Field(
        default=30, ge=1, le=MAX_TRIALS, description="trials in the study, baseline included"
    )
    timeout_s: float | None = Field(
        default=None,
        gt=0.0,
        le=MAX_SECONDS,
        description="wall time of the whole tuning from the coordinator's start: no trial "
        "starts once what is left is what the head-to-head and the export are expected to "
        "take (from the trials' build times and validation's rounds)",
    )
    trial_timeout_s: float = Field(
        default=600.0,
        gt=0.0,
        le=MAX_SECONDS,
        description="a trial still running after this is a 'timeout'",
    )

    @model_validator(mode="after")
    def _some_bound(self) -> Budget:
        if self.trials is None and self.timeout_s is None:
            raise ValueError("give 'trials', 'timeout_s' or both")
        return self


class Selection(RequestPart):
    """How the one tuned configuration is picked from the feasible Pareto set."""

    strategy: SelectionStrategy = Field(
        default="lowest_latency",
        description="the objective the front's best is picked by (lowest_latency: the lowest "
        "p95 per call; highest_throughput: the most samples per second; ...), or weighted",
    )
    weights: dict[Objective, Annotated[float, Field(le=MAX_WEIGHT)]] | None = Field(
        default=None, description="for 'weighted': objective -> weight on min-max normalized values"
    )

    @model_validator(mode="after")
    def _weights_iff_weighted(self) -> Selection:
        if (self.strategy == "weighted") != (self.weights is not None):
            raise ValueError("'weights' is required for strategy 'weighted' and only for it")
        if self.weights is not None and any(w < 0 for w in self.weights.values()):
            raise ValueError("weights must be >= 0")
        return self


class Validation(RequestPart):
    """The finalists and the baseline measured head to head before one is returned."""

    neighbours: int = Field(
        default=2, ge=0, le=MAX_NEIGHBOURS, description="nearest Pareto neighbours re-measured"
    )
    rounds: int = Field(
        default=10,
        ge=6,
        le=MAX_ROUNDS,
        description="interleaved rounds; 6 is the fewest for which the median of paired "
        "ratios has a distribution-free 95% interval",
    )
    round_seconds: float = Field(
        default=0.3,
        gt=0.0,
        le=MAX_ROUND_SECONDS,
        description="each configuration's timed block in a round",
    )
    remeasure_on_resume: bool = Field(
        default=False,
        description="on a resume that measured nothing new, compare the finalists head to "
        "head again; false: the stored comparison, and so the same figures, are reused",
    )


class Cost(RequestPart):
    """Prices that turn measurements into money and emissions (optional)."""

    price_per_hour: float | None = Field(
        default=None,
        ge=0.0,
        le=MAX_PRICE_PER_HOUR,
        description="what an hour of this hardware costs, any currency",
    )
    grid_gco2_per_kwh: float | None = Field(
        default=None,
        ge=0.0,
        le=MAX_GCO2_PER_KWH,
        description="grid carbon intensity, grams CO2e per kWh",
    )


# How long a study waits, by default, for a node of its kind when none is left.
DEFAULT_NODE_WAIT_S = 600.0
MAX_NODE_WAIT_S = 7 * 24 * 3600.0


class Cluster(RequestPart):
    """How a study rides out a Ray cluster whose nodes come and go."""

    node_wait_s: float = Field(
        default=DEFAULT_NODE_WAIT_S,
        ge=0.0,
        le=MAX_NODE_WAIT_S,
        description="how long a study waits for a node of its kind when the last one left "
        "(or none is there when it starts); past it the study stops, resumable, keeping "
        "what it measured",
    )


class Tracking(RequestPart):
    uri: str = "sqlite:///mlflow.db"
    experiment: str = "autotune"


class TuningRequest(RequestPart):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=100)
    model: ModelRef | None = Field(
        default=None, validate_default=True, description="required, except with --replay"
    )
    data: DataRef | None = Field(
        default=None, validate_default=True, description="required, except with --replay"
    )
    metric: MetricRef = MetricRef()
    objectives: list[Objective] = Field(default=["accuracy", "latency", "energy"], min_length=1)
    constraints: Constraints = Constraints()
    search_space: str | None = Field(
        default=None,
        description="a file in search_spaces/ or a path; default chosen for the hardware",
    )
    target: str | None = Field(
        default=None,
        description="the kind of node to tune for where the trials' nodes are of several: a "
        "hardware fingerprint, a saved profile (`autotune hardware --json`) or a Ray node "
        "label 'key=value'; without it each kind is tuned in a study of its own",
    )
    budget: Budget = Budget()
    selection: Selection = Selection()
    measurement: MeasurementSettings = MeasurementSettings()
    validation: Validation = Validation()
    cost: Cost = Cost()
    cluster: Cluster = Cluster()
    tracking: Tracking = Tracking()
    storage: str = "sqlite:///autotune.db"

    @model_validator(mode="before")
    @classmethod
    def _metric_for_the_task(cls, raw: Any) -> Any:
        """A Hugging Face model without a `metric` is judged as its task suggests: embeddings
        by fidelity, classifiers by accuracy where the data has labels, else by agreement
        with the unmodified model's top-1 class."""
        if not isinstance(raw, dict) or "metric" in raw:
            return raw
        model, data = raw.get("model"), raw.get("data")
        if not isinstance(model, dict) or model.get("hf") is None:
            return raw
        labelled = isinstance(data, dict) and data.get("labels") is not None
        if model.get("task") == "feature-extraction":
            kind = "fidelity"
        else:
            kind = "accuracy" if labelled else "agreement"
        return {**raw, "metric": {"kind": kind}}

    @field_validator("model", "data")
    @classmethod
    def _required_unless_replay(cls, value: Any, info: ValidationInfo) -> Any:
        """A replay answers trials from a recorded table, so it needs no model or data."""
        if value is None and not (info.context or {}).get("replay"):
            raise ValueError(REQUIRED_UNLESS_REPLAY)
        return value

    @field_validator("objectives")
    @classmethod
    def _objectives_distinct(cls, objectives: list[Objective]) -> list[Objective]:
        if len(set(objectives)) != len(objectives):
            raise ValueError("must not repeat")
        measures: dict[str, list[str]] = {}
        for objective in objectives:
            if (measure := OBJECTIVES[objective].measure) is not None:
                measures.setdefault(measure, []).append(objective)
        for measure, named in measures.items():
            if len(named) > 1:
                second = OBJECTIVES[named[1]]
                raise ValueError(
                    f"must not name both {named[0]!r} and {named[1]!r} (one measure, the "
                    f"{measure}: {second.name} = {second.aggregation})"
                )
        return objectives

    @model_validator(mode="after")
    def _metrics_have_what_they_need(self) -> TuningRequest:
        """A metric the request optimizes, picks by or bounds has the request fields its
        derivation needs (the cost per million samples: a price per hour)."""
        for where, metric in self._metrics_used():
            section, _, name = (metric.needs or "").partition(".")
            if metric.needs is not None and getattr(getattr(self, section), name) is None:
                raise ValueError(f"{where} needs {metric.needs}")
        return self

    def _metrics_used(self) -> list[tuple[str, Metric]]:
        used = [(f"objectives: {o}", OBJECTIVES[o]) for o in self.objectives]
        used.append(
            (f"selection: {self.selection.strategy}", selection_objective(self.selection.strategy))
        )
        used += [(f"selection.weights: {o}", OBJECTIVES[o]) for o in self.selection.weights or {}]
        bounds = self.constraints.model_dump(exclude_none=True)
        return used + [(f"constraints.{name}", BOUNDS[name].metric) for name in bounds]

    def study(self, baseline_accuracy: float) -> Study:
        """What this request's derived metrics are derived with (`Metric.derive`)."""
        return Study(baseline_accuracy, self.cost.price_per_hour)

    def workload(self, base_dir: Path) -> Workload:
        """The workload with file paths resolved against the request file's directory.
        A registered model must have been resolved to a file before
        (`autotune.requests.sources`)."""
        model, data = self.model, self.data
        if model is None:
            raise RequestError("model", REQUIRED_UNLESS_REPLAY, None)
        if data is None:
            raise RequestError("data", REQUIRED_UNLESS_REPLAY, None)
        if model.registered is not None:
            raise RequestError(
                "model.registered",
                "must be resolved to a file before the workload is built",
                model.registered,
            )
        model = model.model_copy(update=_resolved(base_dir, model, MODEL_PATHS))
        data = data.model_copy(update=_resolved(base_dir, data, DATA_PATHS))
        python_path = workload_python_path(base_dir)
        return Workload(model=model, data=data, metric=self.metric, python_path=python_path)


# The fields of a model or data reference that name files or directories.
MODEL_PATHS = ("onnx", "weights", "hf")
DATA_PATHS = ("npz", "text", "images", "labels")


def _resolved(base_dir: Path, ref: ModelRef | DataRef, fields: tuple[str, ...]) -> dict[str, str]:
    """The path fields of `ref` that are set, resolved against `base_dir`."""
    paths = {name: getattr(ref, name) for name in fields}
    return {name: str(_resolve(base_dir, path)) for name, path in paths.items() if path}


def _resolve(base_dir: Path, path: str) -> Path:
    candidate = Path(path)
    return candidate if candidate.is_absolute() else (base_dir / candidate).resolve()


def load_request(
    path: str | Path, overrides: dict[str, Any] | None = None, replay: bool = False
) -> TuningRequest:
    """Read and validate a request file; every problem becomes a RequestError. For a
    replay (`replay=True`) the model and data may be left out."""
    raw = read_request_file(Path(path))
    for dotted, value in (overrides or {}).items():
        _set_dotted(raw, dotted, value)
    return parse_request(raw, replay)


def read_request_file(path: Path) -> dict[str, Any]:
    """A request file as a mapping, not yet validated; its name defaults to the file's stem."""
    if not path.is_file():
        raise RequestError("request", "must be an existing YAML file", str(path))
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise RequestError("request", f"must be valid YAML ({exc})", str(path)) from None
    if not isinstance(raw, dict):
        raise RequestError("request", "must be a YAML mapping", type(raw).__name__)
    raw.setdefault("name", path.stem)
    return raw


def parse_request(raw: dict[str, Any], replay: bool = False) -> TuningRequest:
    try:
        return TuningRequest.model_validate(raw, context={"replay": replay})
    except ValidationError as exc:
        raise request_error_from(exc) from None


def request_error_from(exc: ValidationError) -> RequestError:
    """The first problem pydantic found, as field, rule and value; an unknown key comes with
    the closest key valid in its place (`did you mean max_accuracy_drop?`)."""
    first = exc.errors()[0]
    field = ".".join(str(p) for p in first["loc"]) or "request"
    rule = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        *where, unknown = first["loc"]
        keys = _keys_at(TuningRequest, tuple(where))
        close = difflib.get_close_matches(str(unknown), keys, n=1, cutoff=SUGGESTION_CUTOFF)
        rule += f"; did you mean {close[0]}?" if close else ""
    return RequestError(field, rule, first.get("input"))


def _keys_at(model: type[BaseModel], location: tuple[int | str, ...]) -> list[str]:
    """The keys a mapping at `location` (an error's, inside a `model`) may hold."""
    kinds: list[Any] = [model]
    for part in location:
        kinds = [inner for kind in kinds for inner in _held_at(kind, part)]
    models = [member for kind in kinds for member in _members(kind) if _is_model(member)]
    return sorted({name for member in models for name in member.model_fields})


def _held_at(kind: Any, part: int | str) -> list[Any]:
    """The types of what a value of type `kind` holds at `part` of an error's location: a
    model's field, a list's item, a mapping's value, or the union member pydantic names."""
    held: list[Any] = []
    for member in _members(kind):
        origin, args = get_origin(member), get_args(member)
        if getattr(member, "__name__", None) == part:
            held.append(member)
        elif _is_model(member) and str(part) in member.model_fields:
            held.append(member.model_fields[str(part)].annotation)
        elif (origin is list and isinstance(part, int)) or origin is dict:
            held.append(args[-1])
    return held


def _members(kind: Any) -> list[Any]:
    """A union's members (each unwrapped), an Annotated type's type, or the type itself."""
    origin, args = get_origin(kind), get_args(kind)
    if origin is Annotated:
        return _members(args[0])
    if origin in (Union, UnionType):
        return [member for arg in args for member in _members(arg)]
    return [kind]


def _is_model(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, BaseModel)


def _set_dotted(raw: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = raw
    for key in parents:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise RequestError(dotted, "parent must be a mapping", node)
    node[leaf] = value
