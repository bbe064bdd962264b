"""The one exception hierarchy of autotune."""

from __future__ import annotations

import re
from typing import Any


class AutotuneError(Exception):
    """Root of every error autotune raises on purpose.

    Every subclass survives pickling with its message and attributes, whatever its
    `__init__` takes (Ray hands a worker's exception to the driver pickled)."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuilt, (type(self), self.args, dict(self.__dict__)))


def _rebuilt(cls: type[AutotuneError], args: tuple[Any, ...], state: dict[str, Any]) -> Any:
    """An exception as pickled: its args and attributes, without calling its `__init__`."""
    error = cls.__new__(cls, *args)
    error.args = args
    error.__dict__.update(state)
    return error


class RequestError(AutotuneError):
    """Bad user input. Names the field, the rule it broke and the value received."""

    def __init__(self, field: str, rule: str, value: Any) -> None:
        self.field = field
        self.rule = rule
        self.value = value
        super().__init__(f"{field}: {rule} (got {value!r})")


class TooLarge(RequestError):
    """Input over a size cap: a request document, an upload, what a zip unpacks to (413
    over HTTP)."""


class SpaceError(RequestError):
    """A search-space file that does not validate."""


class Unsupported(AutotuneError):
    """A transform or runtime cannot build this configuration; the trial is pruned, not failed."""


class CannotConvert(Unsupported):
    """An engine cannot convert this model into its own form (an op it has no rule for).
    Conversion comes before any of the engine's options applies, so no option, thread count
    or batch size changes it; `engine_that_cannot_convert` reads the engine back from the
    reason a trial recorded."""

    def __init__(self, engine: str, label: str, detail: str) -> None:
        super().__init__(f"runtime.engine={engine}: {label} {_CANNOT_CONVERT} ({detail})")


_CANNOT_CONVERT = "cannot convert this model"
_CANNOT_CONVERT_REASON = re.compile(rf"runtime\.engine=(\S+): .*? {_CANNOT_CONVERT} \(")


def engine_that_cannot_convert(reason: str | None) -> str | None:
    """The engine a `CannotConvert` reason names, or None for any other reason."""
    found = _CANNOT_CONVERT_REASON.match(reason or "")
    return None if found is None else found.group(1)


class MeasurementContended(AutotuneError):
    """Other load on the machine made a measurement worthless, and the request's
    `measurement.contention` is 'fail'."""


class CallTooSlow(AutotuneError):
    """One call of a trial took far longer than a call should (`measurement.max_call_ms`);
    `call_ms` is how long it took."""

    def __init__(self, message: str, call_ms: float | None = None) -> None:
        super().__init__(message)
        self.call_ms = call_ms


class AccuracyBelowFloor(AutotuneError):
    """A variant's accuracy on a subset of the data is below what the constraints allow,
    beyond the subset's uncertainty."""


class NoFeasibleConfiguration(AutotuneError):
    """The study finished, but no measured configuration meets the constraints."""


class MostTrialsFailed(AutotuneError):
    """The search ended with more than half of the trials that ran failed (error, timeout,
    out of memory, unsupported, contended): the study is not concluded, and its message
    counts the trials by status with the most common reason of each."""


class MissingDependency(AutotuneError):
    """An optional heavy package is needed for a feature that was asked for."""

    def __init__(self, package: str, feature: str) -> None:
        super().__init__(f"{feature} needs the package {package!r}; install it to use this feature")


class Interrupted(AutotuneError):
    """The user stopped the study (Ctrl-C); running the same command resumes it."""


class NodesGone(AutotuneError):
    """No node of the study's kind was alive for `cluster.node_wait_s`: the study stopped,
    keeping what it measured; running the same command resumes it."""


class NoTrialNodes(AutotuneError):
    """No alive node offers its cores to trials now: the cluster's nodes are still joining, or
    all of them left. The service is unavailable (503) until one joins, not broken."""


class Unauthorized(AutotuneError):
    """A service call without a valid, unrevoked token."""


class NotFound(AutotuneError):
    """A job or watch that does not exist, or belongs to another team."""


class Conflict(AutotuneError):
    """The call is valid but the resource's state does not allow it (e.g. no result yet)."""
