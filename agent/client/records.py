"""Plain records for what a CLI call imports: what `@dataclass` gave them, without importing `dataclasses`.

`dataclasses` imports `inspect` (and with it `ast`, `dis`, `tokenize`), and
each `@dataclass` compiles its methods when its module is imported: together
about 15 ms of CPU of a `leasehold` call whose budget is 150 ms (issue 34,
SPEC §24). The records a call reads (`Lease`, `Claim`, `Settings`,
`HeldAttempt`) declare their fields as `__slots__`, in order, and write their
`__init__` out (so a type checker sees each field); `Record` adds equality,
`repr` and `as_dict`/`replace` over those slots, as a dataclass's were
(`REPR_HIDDEN` names fields kept out of `repr`, like `field(repr=False)`);
`FrozenRecord` refuses assignment after `__init__` and hashes, as
`frozen=True` did. Everywhere else the toolkit uses dataclasses as usual.
"""

from __future__ import annotations

from typing import Any, ClassVar, Self


class Record:
    """Fields in `__slots__` order: equal when of the same class with equal fields; `repr` as a dataclass's."""

    __slots__: ClassVar[tuple[str, ...]] = ()
    REPR_HIDDEN: ClassVar[frozenset[str]] = frozenset()
    __hash__ = None  # type: ignore[assignment]  # mutable, as a dataclass with eq and not frozen

    def as_dict(self) -> dict[str, Any]:
        """The fields by name, in order (the values as they are: the records hold no records)."""
        return {name: getattr(self, name) for name in self.__slots__}

    def replace(self, **changes: Any) -> Self:
        """A copy with `changes` (as `dataclasses.replace`)."""
        return type(self)(**{**self.as_dict(), **changes})

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self.__slots__)

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__ if name not in self.REPR_HIDDEN)
        return f"{self.__class__.__qualname__}({shown})"


class FrozenRecord(Record):
    """A record that cannot change once made (fields are set with `_set` in `__init__`), and so can be hashed."""

    __slots__: ClassVar[tuple[str, ...]] = ()

    def _set(self, **values: Any) -> None:
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}")

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(getattr(self, name) for name in self.__slots__))
