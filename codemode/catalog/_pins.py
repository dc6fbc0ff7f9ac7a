"""The live view of pins while codemode runs: which listed tools are usable right now.

``Pins`` combines the lock file with the catalogs the host currently holds. When a server
re-lists its tools (``notifications/tools/list_changed``), the host hands the new catalog to
:meth:`Pins.record`, which writes the observation to the lock file exactly as ``codemode sync``
would, so drift found while running shows up in ``codemode pin`` for review.

Another process may write the lock file while codemode runs (``codemode pin --approve`` beside a
``codemode serve``): :meth:`Pins.reload_if_changed` notices that by the file's identity (inode,
size, modification time; one ``stat``) and re-reads it, so an approval takes effect at the next
run without a restart.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

from codemode.catalog._lock import (
    HintReview,
    LockFile,
    ServerDiff,
    accept_hints,
    approve,
    load_lock,
    locked,
    observe,
    save_lock,
    status_of,
)
from codemode.catalog._model import ServerCatalog, ToolSpec, ToolStatus


class Pins:
    def __init__(self, lock_path: Path) -> None:
        self.path = lock_path
        self._seen = file_identity(lock_path)  # before reading: a write in between is seen next time
        self._lock = load_lock(lock_path)
        self._mutex = threading.Lock()

    def reload_if_changed(self) -> bool:
        """Re-read the lock file if it changed since this process last read or wrote it."""
        seen = file_identity(self.path)
        if seen == self._seen:
            return False
        with self._mutex:  # writers replace the file atomically: this reads one whole version
            self._lock = load_lock(self.path)
            self._seen = seen
        return True

    @property
    def lock(self) -> LockFile:
        return self._lock

    def status(self, spec: ToolSpec) -> ToolStatus:
        return status_of(self._lock, spec)

    def usable(self, catalogs: Iterable[ServerCatalog]) -> list[ServerCatalog]:
        """The catalogs with only approved tools left in them (what stubs may be rendered from),
        each marked :attr:`ToolSpec.hints_accepted` where its review accepted its hints."""
        return [
            catalog.model_copy(
                update={
                    "tools": tuple(
                        self._as_reviewed(t) for t in catalog.tools if self.status(t) is ToolStatus.APPROVED
                    )
                }
            )
            for catalog in catalogs
        ]

    def _as_reviewed(self, spec: ToolSpec) -> ToolSpec:
        entry = self._lock.servers.get(spec.server, {}).get(spec.name)
        accepted = (
            entry is not None and entry.approved is not None and entry.approved.accepted_risk is not None
        )
        return spec.model_copy(update={"hints_accepted": True}) if accepted else spec

    def record(self, catalog: ServerCatalog) -> ServerDiff:
        """Write one server's live listing into the lock file (under the cross-process lock)."""
        return self.record_all([catalog])[0]

    def record_all(
        self, catalogs: Iterable[ServerCatalog], *, save_unchanged: bool = False
    ) -> list[ServerDiff]:
        """Record several listings in one read-modify-write of the lock file (``codemode sync``).

        Only servers that listed successfully belong here: a server that failed to answer must not
        make its tools look removed.
        """
        diffs: list[ServerDiff] = []
        with self._mutex, locked(self.path):
            current = load_lock(self.path)
            updated = current
            for catalog in catalogs:
                updated, diff = observe(updated, catalog)
                diffs.append(diff)
            if save_unchanged or updated != current:
                save_lock(self.path, updated)
            self._lock, self._seen = updated, file_identity(self.path)
        return diffs

    def approve(self, selectors: Sequence[str | None] = (None,)) -> list[str]:
        """Approve what is pending for ``selectors`` (see :func:`codemode.catalog.approve`)."""
        with self._mutex, locked(self.path):
            updated, done = approve(load_lock(self.path), selectors)
            save_lock(self.path, updated)
            self._lock, self._seen = updated, file_identity(self.path)
        return done

    def accept_hints(
        self, selectors: Sequence[str | None] = (None,), *, approve_first: bool = False
    ) -> tuple[list[str], list[HintReview]]:
        """Accept the hints of the tools ``selectors`` match (see :func:`codemode.catalog.accept_hints`),
        approving what is pending for them first when ``approve_first``, in one write of the file.
        A running ``codemode serve`` sees the change at its next run (:meth:`reload_if_changed`)."""
        with self._mutex, locked(self.path):
            updated, done = load_lock(self.path), []
            if approve_first:
                updated, done = approve(updated, selectors, require_pending=False)
            updated, reviews = accept_hints(updated, selectors)
            save_lock(self.path, updated)
            self._lock, self._seen = updated, file_identity(self.path)
        return done, reviews


def file_identity(path: Path) -> tuple[int, int, int] | None:
    """Inode, size and modification time: a file replaced or edited in place shows a new one."""
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return None
    return (stat.st_ino, stat.st_size, stat.st_mtime_ns)
