"""One program to run, as every run layer passes it on: the manager, a session, a live sandbox.

Who the run acts for (the :class:`~codemode.calls.RunBinding`), where its imports and calls go
(the module provider and call handler) stay apart: they belong to the host, not the program.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Program"]


@dataclass(frozen=True)
class Program:
    """The code of one run, with what it starts from and how long it may take."""

    code: str
    bindings: Mapping[str, Any] = field(default_factory=dict[str, Any])
    """Set as globals before the code runs: JSON values by identifier (a batch item's ``INPUT``)."""
    wall_time_s: float | None = None
    """The run's wall-time limit; None: the sandbox configuration's ``wall_time_s``."""
    fresh: bool = False
    """Start from an empty namespace in a reused (session) sandbox; a new sandbox always does."""
