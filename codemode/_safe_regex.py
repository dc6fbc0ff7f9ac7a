"""Server-supplied regular expressions, searched without letting one hang the process.

Python's ``re`` backtracks: ``^([a-z]+)+$`` against 29 letters and a ``!`` takes seconds, each
extra letter doubling it, and all that time inside one C call that holds the GIL, so no thread
and no timeout can stop it. Here a pattern (ECMA-262, see :mod:`codemode._ecma_regex`) is
searched by RE2, which never backtracks: its time grows with the text's length times the size
of the compiled pattern, and it releases the GIL while it works.

Some searches may not run in this process, and raise :class:`NeedsIsolation` instead:

* a pattern RE2 cannot run (a look-around, a back reference, a repetition above 1000, a
  program above :data:`MAX_PROGRAM_MEMORY`): only a backtracking engine runs it;
* a text with a lone surrogate (RE2 reads UTF-8, which cannot hold one);
* more RE2 work than :data:`IN_PROCESS_WORK` in one :func:`regex_budget`: RE2's worst case,
  text length times program size, is linear but not small (a megabyte against a pattern of a
  few thousand instructions takes seconds).

The caller then repeats the whole check in a separate process that it can kill, where
``regex_budget(isolated=True)`` lets every search run, by RE2 when it can and by Python's
``re`` otherwise (see :mod:`codemode._schema_isolation`).
"""

from __future__ import annotations

import contextvars
import functools
import re
from collections.abc import Generator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final, cast

import re2

from codemode._ecma_regex import EcmaSyntaxError, translate

__all__ = [
    "IN_PROCESS_WORK",
    "NeedsIsolation",
    "PatternError",
    "RegexBudget",
    "compiled",
    "isolation_reason",
    "regex_budget",
    "search",
]

MAX_PROGRAM_MEMORY: Final = 1 << 21
"""RE2's memory for one pattern (2 MiB, and 128 patterns are kept compiled): compiling costs
time and memory in step with it, and a pattern that needs more goes to the separate process."""
IN_PROCESS_WORK: Final = 50_000_000
"""RE2 work (bytes searched times program size, summed) allowed in one budget in this process:
about a tenth of a second at RE2's slowest."""


class PatternError(ValueError):
    """A pattern that neither engine takes (invalid ECMA-262, or unsupported where it must run)."""


class NeedsIsolation(Exception):
    """A search that must run in a separate process (see the module's list)."""

    def __init__(self, pattern: str, reason: str) -> None:
        super().__init__(f"the pattern {pattern!r} {reason}")
        self.reason = reason


@dataclass(frozen=True)
class Compiled:
    """One ECMA-262 pattern, compiled for the engines that take it."""

    source: str
    re2: Any | None
    """The RE2 program (``re2._Regexp``, untyped upstream); None when RE2 cannot run it."""
    python: re.Pattern[str] | None
    """Python's ``re``; only compiled when RE2 cannot run the pattern (None if ``re`` cannot)."""
    why_not_re2: str | None
    """Why RE2 cannot run it (shown at pin review); None when it can."""


def _re2_options() -> Any:
    options = re2.Options()
    options.never_capture = True  # only "is there a match": no submatch work
    options.log_errors = False  # a refused pattern is an answer here, not a log line
    options.max_mem = MAX_PROGRAM_MEMORY
    return options


_OPTIONS: Final = _re2_options()
_RE2_ERROR: Final = cast(type[Exception], re2.error)


def _error_text(exc: Exception) -> str:
    # RE2 gives its message as bytes.
    detail: object = exc.args[0] if exc.args else exc
    return detail.decode(errors="replace") if isinstance(detail, bytes) else str(detail)


@functools.lru_cache(maxsize=128)
def compiled(pattern: str) -> Compiled:
    """``pattern`` compiled (cached); raises :class:`PatternError` when no engine takes it."""
    try:
        translation = translate(pattern)
    except EcmaSyntaxError as exc:
        raise PatternError(f"not an ECMA-262 regular expression: {exc}") from None
    why_not: str | None = None
    program: Any | None = None
    if translation.backtracking:
        why_not = f"uses {' and '.join(translation.backtracking)}, which RE2 cannot run"
    else:
        try:
            program = re2.compile(translation.re2, _OPTIONS)
        except _RE2_ERROR as exc:
            why_not = f"is beyond RE2 ({_error_text(exc)})"
    python: re.Pattern[str] | None = None
    if program is None:
        if translation.python is None:
            raise PatternError(f"the pattern {pattern!r} {why_not}, and uses \\p{{…}}, which re lacks")
        try:
            python = re.compile(translation.python, re.ASCII)
        except (re.error, OverflowError, RecursionError) as exc:
            raise PatternError(f"the pattern {pattern!r} {why_not}, and re refuses it: {exc}") from None
    return Compiled(pattern, program, python, why_not)


def isolation_reason(pattern: str) -> str | None:
    """Why ``pattern`` is searched in a separate process (None: RE2 runs it here); raises
    :class:`PatternError` for a pattern that cannot be used at all."""
    return compiled(pattern).why_not_re2


class RegexBudget:
    """The searches of one check: how much RE2 work they did, and whether they may run
    anything (``isolated``: in the separate process, which is killed when it takes too long)."""

    def __init__(self, *, isolated: bool) -> None:
        self.isolated = isolated
        self.work = 0

    def search(self, pattern: str, text: str) -> bool:
        """Whether ``pattern`` matches somewhere in ``text``."""
        program = compiled(pattern)
        if program.re2 is not None:
            try:
                data = text.encode()
            except UnicodeEncodeError:
                data = None
            if data is not None:
                self.work += len(data) * max(program.re2.programsize, 1)
                if self.isolated or self.work <= IN_PROCESS_WORK:
                    return program.re2.search(data) is not None
                raise NeedsIsolation(pattern, "needs more work than this process does inline")
            if not self.isolated:
                raise NeedsIsolation(pattern, "is searched in a text with a lone surrogate")
            python = program.python or _python_only(pattern)
        elif not self.isolated:
            raise NeedsIsolation(pattern, program.why_not_re2 or "cannot run here")
        else:
            python = program.python
        assert python is not None, "compiled() refuses a pattern no engine takes"
        return python.search(text) is not None


def _python_only(pattern: str) -> re.Pattern[str]:
    """Python's ``re`` for a pattern RE2 runs, for a text RE2 cannot read."""
    translation = translate(pattern)
    if translation.python is None:
        raise PatternError(
            f"the pattern {pattern!r} uses \\p{{…}}, which cannot be searched in a text with a lone surrogate"
        )
    return re.compile(translation.python, re.ASCII)


_CURRENT: contextvars.ContextVar[RegexBudget | None] = contextvars.ContextVar("regex_budget", default=None)


@contextmanager
def regex_budget(*, isolated: bool = False) -> Generator[RegexBudget]:
    """Run the enclosed searches (:func:`search`) under one fresh budget."""
    budget = RegexBudget(isolated=isolated)
    token = _CURRENT.set(budget)
    try:
        yield budget
    finally:
        _CURRENT.reset(token)


def search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` (ECMA-262) matches somewhere in ``text``, under the current budget."""
    budget = _CURRENT.get()
    if budget is None:
        raise RuntimeError("a regular expression was searched outside regex_budget()")
    return budget.search(pattern, text)
