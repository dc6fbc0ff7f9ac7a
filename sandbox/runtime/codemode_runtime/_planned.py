"""The result of a call that a dry run planned instead of sending (``codemode run --plan``).

A planned call has no result yet: what the program gets back is a :class:`PlannedResult`, which it
may carry along - keep it, put it in a list, pass it (or one of its fields) to another call - but
not look into. Looking into it would let the program branch on a value that does not exist, and
the plan would then describe a program that never runs; so every use as data raises
:class:`PlannedValueError`, naming the planned call.

Passed to a call, a planned result travels as a reference, ``{"$planned": N}`` (with ``"path"``
for a field of it), which the broker digests like any argument: the plan binds "the result of
planned call N", and the real run matches it against that call's actual result.
"""

from __future__ import annotations

import json
from typing import Any, NoReturn

REFERENCE_KEY = "$planned"


class PlannedValueError(TypeError):
    """A planned result was used as data during a dry run."""


def _refusing(use: str) -> Any:
    """A special method that refuses, saying what the program tried to do with the value."""

    def refuse(self: PlannedResult, *_args: Any, **_kwargs: Any) -> NoReturn:
        self._refuse(use)  # pyright: ignore[reportPrivateUsage] - the class's own helper

    return refuse


_ARITHMETIC = "used in arithmetic"
_COMPARED = "compared"
_NUMBER = "turned into a number"


class PlannedResult:
    """The placeholder a dry run returns for a call it did not send."""

    __slots__ = ("_index", "_label", "_path")
    _index: int
    _label: str
    _path: tuple[str | int, ...]

    def __init__(self, index: int, label: str, path: tuple[str | int, ...] = ()) -> None:
        object.__setattr__(self, "_index", index)
        object.__setattr__(self, "_label", label)
        object.__setattr__(self, "_path", path)

    def _name(self) -> str:
        where = "".join(f"[{step!r}]" for step in self._path)
        return f"the result of planned call #{self._index} ({self._label}){where}"

    def _refuse(self, use: str) -> NoReturn:
        raise PlannedValueError(
            f"{self._name()} does not exist yet: this is a dry run (--plan), and the call was planned, "
            f"not sent. A planned result can be kept and passed to other calls, not {use}."
        )

    def __getitem__(self, key: Any) -> PlannedResult:
        # A field of a planned result is itself a planned value (a record created, then linked by
        # its id): still opaque, passed along as a reference with a path.
        if not isinstance(key, str | int) or isinstance(key, bool):
            self._refuse(f"indexed with a {type(key).__name__}")
        return PlannedResult(self._index, self._label, (*self._path, key))

    def __getattr__(self, name: str) -> NoReturn:
        self._refuse(f"read as an attribute (.{name})")

    def __setattr__(self, name: str, value: Any) -> NoReturn:
        self._refuse("changed")

    def __repr__(self) -> str:
        return f"<{self._name()}>"

    __str__ = _refusing("turned into text")
    __format__ = _refusing("formatted into text")
    __bytes__ = _refusing("turned into bytes")
    __bool__ = _refusing("tested for truth")
    __len__ = _refusing("measured")
    __iter__ = _refusing("iterated")
    __contains__ = _refusing("searched")
    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _refusing(_COMPARED)
    __hash__ = _refusing("hashed")
    __int__ = __float__ = __index__ = _refusing(_NUMBER)
    __neg__ = __pos__ = __abs__ = __invert__ = _refusing(_ARITHMETIC)
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _refusing(_ARITHMETIC)
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = _refusing(_ARITHMETIC)
    __mod__ = __rmod__ = __pow__ = __rpow__ = _refusing(_ARITHMETIC)
    __and__ = __rand__ = __or__ = __ror__ = __xor__ = __rxor__ = _refusing(_ARITHMETIC)

    def reference(self) -> dict[str, Any]:
        """How the broker sees this value in a call's arguments."""
        ref: dict[str, Any] = {REFERENCE_KEY: self._index}
        if self._path:
            ref["path"] = list(self._path)
        return ref


def with_references(arguments: dict[str, Any]) -> dict[str, Any]:
    """``arguments`` with every planned result in it replaced by its reference.

    Only walked when one is there: a cheap JSON encoding finds out first, so a program that
    holds none pays one encoding, which the runtime makes anyway to check the arguments.
    """
    found: list[bool] = []

    def spot(value: Any) -> Any:
        if isinstance(value, PlannedResult):
            found.append(True)
            return value.reference()
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")

    json.dumps(arguments, default=spot, allow_nan=False)
    return _replaced(arguments) if found else arguments


def _replaced(value: Any) -> Any:
    if isinstance(value, PlannedResult):
        return value.reference()
    if isinstance(value, dict):
        return {key: _replaced(item) for key, item in value.items()}  # pyright: ignore[reportUnknownVariableType]
    if isinstance(value, list | tuple):
        return [_replaced(item) for item in value]  # pyright: ignore[reportUnknownVariableType]
    return value
