"""A search index cached on disk, so ``codemode search`` answers without rendering the catalog.

A cold process that must parse codemode.lock, render the stub tree and tokenise every tool spends
about a second at 3,000 tools; loading a cached index takes about 10 ms. The cache is
content-addressed: its key hashes the lock's bytes, the configured servers, the principal's policy
and this package's source, so any change to what is searched, who searches or how it is ranked
names a different file, and a stale entry is never read.

Each entry holds the index (:meth:`ToolIndex.to_bytes`: BM25 and, for a hybrid index, the tool
vectors; callers put the model's id in the key, and loading checks it again) and, per tool, the
fields of a search result at ``summary`` detail. Entries live in the search cache folder
(:func:`~codemode.search._cache_files.cache_dir`), sealed with their sha256 and read back only if
this user alone could have written them (:mod:`codemode.search._cache_files`); only the most recent
few are kept.
"""

from __future__ import annotations

import functools
import hashlib
import marshal
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from codemode.search._cache_files import cache_dir, read_sealed, write_sealed
from codemode.search._index import ToolIndex
from codemode.search._semantic import Embedder

__all__ = ["CachedRow", "CachedSearch", "cache_key"]

_FORMAT = "codemode-search-cache-4"


@functools.cache
def _source_hash(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def cache_key(parts: Iterable[bytes | str], code: Iterable[Path] = ()) -> str:
    """The entry name for a search over ``parts`` (lock bytes, server names, policy ...).

    The key also hashes this package's source and that of the folders in ``code`` (what renders the
    rows), so an index or a summary written by another version of the code is never reused.
    """
    digest = hashlib.sha256(_FORMAT.encode())
    for folder in (Path(__file__).parent, *code):
        digest.update(_source_hash(folder).encode())
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        digest.update(len(data).to_bytes(8, "little") + data)  # length-prefixed: parts cannot run together
    return digest.hexdigest()


def _row_fields(row: CachedRow) -> tuple[str, ...]:
    return (row.server, row.tool, row.module, row.path, row.import_line, row.summary)


_ROW_FIELDS = 6
_HEAD_BYTES = 8


@dataclass(frozen=True, slots=True)
class CachedRow:
    """What a search result shows for one tool, besides its score and detail."""

    server: str
    tool: str
    module: str
    path: str
    import_line: str
    summary: str
    """The result text at ``summary`` detail (at ``name`` detail the text is ``module``)."""


class CachedSearch:
    """An index plus the rows it returns, loaded from or saved to one cache entry."""

    __slots__ = ("_fields", "index")

    def __init__(self, index: ToolIndex, rows: Mapping[str, CachedRow]) -> None:
        self.index = index
        self._fields = {key: _row_fields(row) for key, row in rows.items()}
        """Per key, the fields of its :class:`CachedRow`: a row object is made only for a result."""

    @property
    def rows(self) -> dict[str, CachedRow]:
        return {key: CachedRow(*fields) for key, fields in self._fields.items()}

    @property
    def ranker(self) -> str:
        """What answers :meth:`search`: ``bm25``, ``hybrid`` or ``hybrid:<model>`` (see ToolIndex)."""
        return self.index.ranker

    def search(self, query: str, k: int) -> list[tuple[CachedRow, float]]:
        fields = self._fields
        return [
            (CachedRow(*fields[hit.key]), hit.score)
            for hit in self.index.search(query, k)
            if hit.key in fields
        ]

    def to_bytes(self) -> bytes:
        # The rows' length, the rows, then the index: loading reads the index in place (no copy).
        head = marshal.dumps((_FORMAT, self._fields))
        return len(head).to_bytes(_HEAD_BYTES, "little") + head + self.index.to_bytes()

    @classmethod
    def from_bytes(cls, data: bytes | memoryview, embedder: Embedder | None = None) -> CachedSearch:
        """The entry :meth:`to_bytes` wrote; a hybrid one needs its ``embedder`` (:class:`ValueError`).

        Loading trusts the index's structure past a few checks, so bytes from a file must be sealed:
        :meth:`save` and :meth:`load` keep entries behind their sha256 (:func:`write_sealed`).
        """
        view = memoryview(data)
        size = int.from_bytes(view[:_HEAD_BYTES], "little")
        try:
            if len(view) < _HEAD_BYTES + size:
                raise ValueError("truncated")
            form, table = marshal.loads(view[_HEAD_BYTES : _HEAD_BYTES + size])  # noqa: S302 - see _cache_files.read_private
            if form != _FORMAT:
                raise ValueError("another cache format")
        except (EOFError, TypeError, ValueError, SystemError) as exc:  # marshal's errors for bad data
            raise ValueError(f"not a search cache entry: {exc}") from exc
        if not isinstance(table, dict):
            raise ValueError("not a search cache entry: no rows")
        fields = cast("dict[object, object]", table)
        if not all(isinstance(row, tuple) and len(row) == _ROW_FIELDS for row in fields.values()):  # pyright: ignore[reportUnknownArgumentType]
            raise ValueError("not a search cache entry: damaged rows")
        found = cls(ToolIndex.from_bytes(view[_HEAD_BYTES + size :], embedder), {})
        found._fields = cast("dict[str, tuple[str, ...]]", fields)
        return found

    @classmethod
    def load(
        cls, key: str, directory: Path | None = None, embedder: Embedder | None = None
    ) -> CachedSearch | None:
        """The entry ``key``, or None when it is missing, unreadable, truncated or of another model
        (then the caller rebuilds it: a damaged entry costs one slow search, never a wrong one)."""
        data = read_sealed((directory or cache_dir()) / f"{key}.bin")
        try:
            return cls.from_bytes(data, embedder) if data is not None else None
        except ValueError:
            return None

    def save(self, key: str, directory: Path | None = None) -> bool:
        """Write the entry sealed and atomically, and drop the oldest beyond a few; whether it was
        stored (a failure only costs speed)."""
        return write_sealed((directory or cache_dir()) / f"{key}.bin", self.to_bytes())
