"""Answers the frozen policy gives once per key (a principal and a tool), kept for a gate's life."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TypeVar

__all__ = ["MEMO_ENTRIES", "remembered"]

MEMO_ENTRIES = 65_536
"""Bound on each memo (one entry per principal and tool in use): past it, the memo starts over."""

_K = TypeVar("_K", bound=Hashable)
_V = TypeVar("_V")


def remembered(memo: dict[_K, _V], key: _K, work_out: Callable[[], _V]) -> _V:
    """``memo[key]``, worked out with ``work_out()`` the first time it is asked for."""
    try:
        return memo[key]
    except KeyError:
        if len(memo) >= MEMO_ENTRIES:
            memo.clear()
        value = memo[key] = work_out()
        return value
