"""A registry: named entries in registration order, each name registered once."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TypeVar

T = TypeVar("T")


class Registry(Mapping[str, T]):
    """Named entries in registration order; a name is registered once."""

    def __init__(self, kind: str) -> None:
        self._kind = kind
        self._entries: dict[str, T] = {}

    def register(self, name: str, entry: T) -> T:
        if name in self._entries:
            raise ValueError(f"{self._kind} {name!r} is already registered")
        self._entries[name] = entry
        return entry

    def registers(self, name: str) -> Callable[[T], T]:
        """A decorator that registers what it decorates as `name`."""

        def register(entry: T) -> T:
            return self.register(name, entry)

        return register

    def unregister(self, name: str) -> T:
        if name not in self._entries:
            raise KeyError(f"{self._kind} {name!r} is not registered")
        return self._entries.pop(name)

    def __getitem__(self, name: str) -> T:
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)
