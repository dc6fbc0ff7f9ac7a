"""``--out``: one JSON line per settled item, true after a Ctrl-C or a kill as after a whole run.

The job store is what the file is made from. When a run starts, the file is written anew with
every item that has an outcome and will not run now; each item that settles is then appended
(and flushed) *before* the store marks it settled, so after a SIGKILL, which runs no clean-up,
the file holds every item the store calls settled (and at most the few that were settling, which
a resume runs again). When the run ends, however it ends, the file is written anew with every
settled item in input order. An item that runs again is therefore never listed twice.

Each rewrite replaces the file whole or not at all. A link is written through to what it names;
a pipe or a device (``/dev/stdout``) is written once, as the items settle, never rewritten.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from codemode._atomic import replace_file
from codemode.batch._runner import BatchError, ItemResult

if TYPE_CHECKING:
    from codemode.batch._jobs import JobStore, Runnable, StoredItem


class OutFileError(BatchError):
    """The results file cannot be written: the job stops (and can be resumed)."""


class ResultsFile:
    """The ``--out`` file of one run of a job (see the module's docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        target = Path(os.path.realpath(path)) if path.is_symlink() else path
        self._stream = target.exists() and not target.is_file()
        """A pipe or a device: written as items settle, never replaced."""
        self._target = target
        self._handle: TextIO | None = None
        self._lock = threading.Lock()  # items settle on several threads at once

    def begin(self, store: JobStore, job_id: str, runs: Runnable) -> None:
        """Write the items that have an outcome and that this run will not run again."""
        items = store.settled(job_id, leaving_out=runs)
        try:
            if self._stream:
                self._handle = self._target.open("w", encoding="utf-8")
                _write(self._handle, items)
                self._handle.flush()
                return
            replace_file(self._target, lambda handle: _write(handle, items), keep_mode=True)
            self._handle = self._target.open("a", encoding="utf-8")
        except OSError as exc:
            raise OutFileError(f"cannot write the results to {self.path}: {exc}") from exc

    def add(self, result: ItemResult) -> None:
        """Append the line of an item that is settling (before the store says it settled)."""
        line = json.dumps(result.to_json(), ensure_ascii=False, default=str) + "\n"
        with self._lock:
            if self._handle is None:
                return
            try:
                self._handle.write(line)
                self._handle.flush()  # in the kernel's hands now: a SIGKILL no longer loses it
            except OSError as exc:
                raise OutFileError(f"cannot write the results to {self.path}: {exc}") from exc

    def end(self, store: JobStore, job_id: str) -> None:
        """Write every settled item, in input order (a pipe has had its lines already)."""
        with self._lock:
            handle, self._handle = self._handle, None
        if handle is not None:
            handle.close()
        if self._stream:
            return
        items = store.settled(job_id)
        replace_file(self._target, lambda out: _write(out, items), keep_mode=True)


def item_line(item: StoredItem) -> str:
    """The JSON line of a stored item, as :meth:`ItemResult.to_json` gives it."""
    error = item.error if item.status != "done" else None
    result = ItemResult(
        item.key,
        item.line,
        item.status,
        item.attempts,
        item.run_id,
        item.result,
        error,
        item.calls,
        item.duration_ms,
    )
    return json.dumps(result.to_json(), ensure_ascii=False, default=str) + "\n"


def _write(handle: TextIO | Any, items: Iterable[StoredItem]) -> None:
    for item in items:
        handle.write(item_line(item))
