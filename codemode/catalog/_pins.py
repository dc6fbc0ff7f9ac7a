"""The live view of pins while codemode runs: which listed tools are usable right now.

``Pins`` combines the lock file with the catalogs the host currently holds. When a server
re-lists its tools (``notifications/tools/list_changed``), the host hands the new catalog to
:meth:`Pins.record`, which writes the observation to the lock file exactly as ``codemode sync``
would, so drift found while running shows up in ``codemode pin`` for review.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path

from codemode.catalog._lock import LockFile, ServerDiff, load_lock, locked, observe, save_lock, status_of
from codemode.catalog._model import ServerCatalog, ToolSpec, ToolStatus


class Pins:
    def __init__(self, lock_path: Path) -> None:
        self.path = lock_path
        self._lock = load_lock(lock_path)
        self._mutex = threading.Lock()

    @property
    def lock(self) -> LockFile:
        return self._lock

    def reload(self) -> None:
        """Pick up approvals made by another process (``codemode pin --approve``)."""
        with self._mutex:
            self._lock = load_lock(self.path)

    def status(self, spec: ToolSpec) -> ToolStatus:
        return status_of(self._lock, spec)

    def usable(self, catalogs: Iterable[ServerCatalog]) -> list[ServerCatalog]:
        """The catalogs with only approved tools left in them (what stubs may be rendered from)."""
        return [
            catalog.model_copy(
                update={"tools": tuple(t for t in catalog.tools if self.status(t) is ToolStatus.APPROVED)}
            )
            for catalog in catalogs
        ]

    def record(self, catalog: ServerCatalog) -> ServerDiff:
        """Write one server's live listing into the lock file (under the cross-process lock)."""
        with self._mutex, locked(self.path):
            current = load_lock(self.path)
            updated, diff = observe(current, catalog)
            if updated != current:
                save_lock(self.path, updated)
            self._lock = updated
        return diff
