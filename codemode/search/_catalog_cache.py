"""A search index cached on disk, so ``codemode search`` answers without rendering the catalog.

A cold process that must parse codemode.lock, render the stub tree and tokenise every tool spends
about a second at 3,000 tools; loading a cached index takes about 10 ms. The cache is
content-addressed: its key hashes the lock's bytes, the configured servers, the principal's policy
and this package's source, so any change to what is searched, who searches or how it is ranked
names a different file, and a stale entry is never read.

Each entry holds the index (:meth:`ToolIndex.to_bytes`: BM25 and, for a hybrid index, the tool
vectors; callers put the model's id in the key, and loading checks it again) and, per tool, the
fields of a search result at ``summary`` detail. Entries live in ``$CODEMODE_CACHE_DIR``, else
``$XDG_CACHE_HOME/codemode/search``, else ``~/.cache/codemode/search``; only the most recent few
are kept.
"""

from __future__ import annotations

import functools
import hashlib
import marshal
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from codemode.search._index import ToolIndex
from codemode.search._semantic import Embedder

__all__ = ["CachedRow", "CachedSearch", "cache_dir", "cache_key"]

_FORMAT = "codemode-search-cache-2"
_KEEP = 16  # entries: one per catalog version and principal; older ones are deleted


def cache_dir() -> Path:
    explicit = os.environ.get("CODEMODE_CACHE_DIR")
    if explicit:
        return Path(explicit) / "search"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "codemode" / "search"


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


def _private(path: Path) -> bool:
    """Whether only this user could have written ``path``.

    Entries are read with :mod:`marshal` (four times faster than JSON here, which matters within a
    300 ms cold start). It builds plain values and runs no code, but it is not hardened against crafted
    input, so an entry someone else could have written is ignored and rebuilt.
    """
    info = path.stat()
    owner_ok = not hasattr(os, "getuid") or info.st_uid == os.getuid()
    return owner_ok and not info.st_mode & 0o022


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

    __slots__ = ("index", "rows")

    def __init__(self, index: ToolIndex, rows: Mapping[str, CachedRow]) -> None:
        self.index = index
        self.rows = dict(rows)

    @property
    def ranker(self) -> str:
        """``hybrid`` (BM25 fused with embeddings) or ``bm25``: what answers :meth:`search`."""
        return "hybrid" if self.index.hybrid else "bm25"

    def search(self, query: str, k: int) -> list[tuple[CachedRow, float]]:
        return [
            (self.rows[hit.key], hit.score) for hit in self.index.search(query, k) if hit.key in self.rows
        ]

    def to_bytes(self) -> bytes:
        rows = tuple(
            (key, (r.server, r.tool, r.module, r.path, r.import_line, r.summary))
            for key, r in self.rows.items()
        )
        return marshal.dumps((_FORMAT, self.index.to_bytes(), rows))

    @classmethod
    def from_bytes(cls, data: bytes, embedder: Embedder | None = None) -> CachedSearch:
        """The entry :meth:`to_bytes` wrote; a hybrid one needs its ``embedder`` (:class:`ValueError`)."""
        try:
            form, index_bytes, rows = marshal.loads(data)  # noqa: S302 - see _private
            if form != _FORMAT:
                raise ValueError("another cache format")
            table = {key: CachedRow(*fields) for key, fields in rows}
        except (EOFError, TypeError, ValueError) as exc:
            raise ValueError(f"not a search cache entry: {exc}") from exc
        if not isinstance(index_bytes, bytes):
            raise ValueError("not a search cache entry: no index")
        return cls(ToolIndex.from_bytes(index_bytes, embedder), table)  # pyright: ignore[reportUnknownArgumentType]

    @classmethod
    def load(
        cls, key: str, directory: Path | None = None, embedder: Embedder | None = None
    ) -> CachedSearch | None:
        """The entry ``key``, or None when it is missing, unreadable, truncated or of another model
        (then the caller rebuilds it: a damaged entry costs one slow search, never a wrong one)."""
        path = (directory or cache_dir()) / f"{key}.bin"
        try:
            if not _private(path):
                return None
            return cls.from_bytes(path.read_bytes(), embedder)
        except (OSError, ValueError):
            return None

    def save(self, key: str, directory: Path | None = None) -> None:
        """Write the entry atomically and drop the oldest beyond a few; a failure only costs speed."""
        folder = directory or cache_dir()
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
            with os.fdopen(fd, "wb") as f:
                f.write(self.to_bytes())
            os.replace(tmp, folder / f"{key}.bin")
            entries = sorted(folder.glob("*.bin"), key=lambda p: p.stat().st_mtime, reverse=True)
            for old in entries[_KEEP:]:
                old.unlink(missing_ok=True)
        except OSError:
            return
