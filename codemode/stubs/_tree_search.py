"""Search indexes for the stub tree: one per set of visible tools, optionally hybrid.

Each set of visible tools gets its own index, built from those tools only. With one shared index,
BM25's document frequencies and the score scale would depend on tools the principal cannot see,
and hidden hits would have to be over-fetched and dropped. Views of one principal share an index;
a few are kept, least recently used first out.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Final

from codemode.search import EmbeddingCache, SearchDocument, ToolIndex, load_embedder
from codemode.search._catalog_cache import cache_dir
from codemode.search._semantic import SEMANTIC_ENV

__all__ = ["SEMANTIC_ENV", "ViewIndexes", "build_index"]

_MAX_VIEW_INDEXES: Final = 8

_embeddings: EmbeddingCache | None = None
_embeddings_lock = threading.Lock()


def _shared_embeddings() -> EmbeddingCache:
    global _embeddings
    with _embeddings_lock:
        if _embeddings is None:
            _embeddings = EmbeddingCache(cache_dir() / "vectors.npz")
        return _embeddings


def build_index(documents: Sequence[SearchDocument]) -> ToolIndex:
    """BM25, fused with the semantic signal when :data:`SEMANTIC_ENV` is set and the extra installed.

    Tool vectors live in one process-wide cache keyed by the embedded text's hash, kept in the user's
    cache folder, so a re-render after ``list_changed``, another principal's view or the next process
    embeds only tools it has not seen.
    """
    if os.environ.get(SEMANTIC_ENV, "").lower() not in ("1", "true", "yes"):
        return ToolIndex.build(documents)
    embedder = load_embedder()
    if embedder is None:
        return ToolIndex.build(documents)
    cache = _shared_embeddings()
    index = ToolIndex.build(documents, embedder=embedder, cache=cache)
    with contextlib.suppress(OSError):  # a read-only cache folder only costs embedding again next time
        cache.save()
    return index


class ViewIndexes:
    """Indexes keyed by the visible tools' keys (None: every tool), built on first use."""

    def __init__(self) -> None:
        self._indexes: OrderedDict[frozenset[str] | None, ToolIndex] = OrderedDict()
        self._lock = threading.Lock()

    def get(
        self, visible: frozenset[str] | None, documents: Callable[[], Sequence[SearchDocument]]
    ) -> ToolIndex:
        with self._lock:
            index = self._indexes.get(visible)
            if index is not None:
                self._indexes.move_to_end(visible)
                return index
        # Built outside the lock: two threads may build the same view once each, never wrongly.
        index = build_index(documents())
        with self._lock:
            self._indexes[visible] = index
            while len(self._indexes) > _MAX_VIEW_INDEXES:
                self._indexes.popitem(last=False)
        return index
