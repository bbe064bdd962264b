"""Every autotune exception crosses a process boundary intact (Ray pickles a worker's)."""

from __future__ import annotations

import importlib
import inspect
import pickle
import pkgutil

import pytest

import autotune
import autotune.core.errors
from autotune.core.errors import AutotuneError


def _every_exception_class() -> list[type[BaseException]]:
    """The classes of autotune.core.errors, and every subclass of AutotuneError that a module of
    the package defines (imported first, so that none is missed)."""
    for module in pkgutil.walk_packages(autotune.__path__, "autotune."):
        if not module.name.endswith("__main__"):  # importing it runs the command line
            importlib.import_module(module.name)
    found: dict[str, type[BaseException]] = {
        f"{cls.__module__}.{cls.__qualname__}": cls
        for _, cls in inspect.getmembers(autotune.core.errors, inspect.isclass)
        if issubclass(cls, BaseException) and cls.__module__ == autotune.core.errors.__name__
    }
    pending = [AutotuneError]
    while pending:
        cls = pending.pop()
        if cls.__module__.startswith("autotune"):
            found[f"{cls.__module__}.{cls.__qualname__}"] = cls
        pending.extend(cls.__subclasses__())
    return [found[name] for name in sorted(found)]


EXCEPTIONS = _every_exception_class()


def _instance(cls: type[BaseException]) -> BaseException:
    """An instance made through the class's own constructor, one string per parameter."""
    parameters = [
        p
        for p in inspect.signature(cls.__init__).parameters.values()
        if p.name != "self" and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if not parameters:  # Exception's own (*args, **kwargs)
        return cls(f"what went wrong in {cls.__name__}")
    return cls(*(f"{p.name} of {cls.__name__}" for p in parameters))


def test_the_discovery_finds_the_exceptions_with_their_own_constructors() -> None:
    names = {cls.__name__ for cls in EXCEPTIONS}
    assert {"AutotuneError", "RequestError", "SpaceError", "MissingDependency"} <= names
    assert "UploadTooLarge" in names  # defined in autotune.requests.sources


@pytest.mark.parametrize("cls", EXCEPTIONS, ids=lambda cls: cls.__name__)
def test_pickle_round_trip_keeps_type_message_and_attributes(cls: type[BaseException]) -> None:
    error = _instance(cls)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is cls
    assert str(copy) == str(error)
    assert copy.args == error.args
    assert vars(copy) == vars(error)
