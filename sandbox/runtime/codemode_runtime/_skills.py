"""Which saved skill made a call: the innermost ``skills.<name>`` module on the caller's stack.

The host serves each skill module with ``__codemode_skill__ = "<name>@<version>"`` as its last
line, and a skill's source may not name that variable (the host checks it when the skill is
saved), so the label is the one the host served. It is sent with the call for the ledger's
audit only: the broker never reads it to decide anything, and a program that fakes a label
fakes only its own audit trail, still under its own principal's gates.
"""

from __future__ import annotations

import contextvars
import sys
from types import FrameType

LABEL = "__codemode_skill__"
LABEL_MAX = 200

_caller_of_parallel: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "codemode_calling_skill", default=None
)
"""The skill that called ``parallel``: its worker threads' stacks do not reach that skill."""


def _label(frame: FrameType) -> str | None:
    found = frame.f_globals
    name = found.get("__name__")
    label = found.get(LABEL)
    if isinstance(name, str) and name.startswith("skills.") and isinstance(label, str):
        return label[:LABEL_MAX]
    return None


def calling_skill() -> str | None:
    """``name@version`` of the innermost skill on this thread's stack (or of the skill that
    started this ``parallel`` worker); None for the program's own calls."""
    frame: FrameType | None = sys._getframe(1)  # pyright: ignore[reportPrivateUsage]
    while frame is not None:
        label = _label(frame)
        if label is not None:
            return label
        frame = frame.f_back
    return _caller_of_parallel.get()


def worker_context() -> contextvars.Context:
    """A copy of the caller's context for one ``parallel`` worker, knowing the calling skill."""
    skill = calling_skill()
    context = contextvars.copy_context()
    context.run(_caller_of_parallel.set, skill)
    return context
