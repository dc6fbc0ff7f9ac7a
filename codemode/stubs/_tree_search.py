"""Search indexes for the stub tree: one per set of visible tools (and saved skills), optionally hybrid.

Each set of visible tools gets its own index, built from those tools only. With one shared index,
BM25's document frequencies and the score scale would depend on tools the principal cannot see,
and hidden hits would have to be over-fetched and dropped. Views of one principal share an index;
a few are kept, least recently used first out.

A tree rendered after a catalog change (``render_tree(..., previous=tree)``) inherits the previous
tree's indexes as *bases*: its first search for a set of visible tools updates the closest base
(:meth:`ToolIndex.updated_to`) instead of indexing every tool again.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Final

from codemode.config import SemanticChoice
from codemode.search import (
    SEMANTIC_ENV,
    EmbeddingCache,
    SearchDocument,
    SemanticSetting,
    ToolIndex,
    cache_dir,
    load_embedder,
    missing_model,
    ranker_name,
    semantic_setting,
)

__all__ = ["SEMANTIC_ENV", "SemanticChoice", "ViewIndexes", "build_index", "semantic_wanted"]

log = logging.getLogger(__name__)

_MAX_VIEW_INDEXES: Final = 8
# An update touching more than this share of the documents is no cheaper than building afresh.
_MAX_UPDATE_SHARE: Final = 0.5

_embeddings: EmbeddingCache | None = None
_embeddings_lock = threading.Lock()


def _shared_embeddings() -> EmbeddingCache:
    global _embeddings
    with _embeddings_lock:
        if _embeddings is None:
            _embeddings = EmbeddingCache(cache_dir() / "vectors.npz")
        return _embeddings


def semantic_wanted(choice: SemanticChoice | None) -> bool:
    """Whether to rank with the semantic signal, before knowing whether the extra is installed."""
    return semantic_setting(choice) != "off"


@functools.cache
def _warn_missing_model(setting: SemanticSetting) -> None:
    warning = missing_model(setting)
    if warning is not None:
        log.warning(warning)


def build_index(
    documents: Sequence[SearchDocument],
    *,
    semantic: SemanticChoice | None = None,
    base: ToolIndex | None = None,
) -> ToolIndex:
    """BM25, fused with the semantic signal when wanted (:func:`semantic_wanted`) and installed.

    With a ``base`` of the same kind (hybrid or not), the index is ``base`` updated to ``documents``:
    only the tools that differ are tokenised and embedded, and it ranks exactly as a fresh build.
    Tool vectors live in one process-wide cache keyed by the embedded text's hash, kept in the user's
    cache folder, so a re-render after ``list_changed``, another principal's view or the next process
    embeds only tools it has not seen.
    """
    setting = semantic_setting(semantic)
    embedder = load_embedder(setting)
    if embedder is None:
        _warn_missing_model(setting)
        if base is not None and not base.hybrid:
            return base.updated_to(documents)
        return ToolIndex.build(documents)
    cache = _shared_embeddings()
    # A base of another model (the override changed between renders) is not updated: built afresh.
    if base is not None and base.ranker == ranker_name(embedder.model_id):
        index = base.updated_to(documents, cache=cache)
    else:
        index = ToolIndex.build(documents, embedder=embedder, cache=cache)
    with contextlib.suppress(OSError):  # a read-only cache folder only costs embedding again next time
        cache.save()
    return index


ViewKey = frozenset[str] | None
IndexKey = tuple[ViewKey, tuple[SearchDocument, ...]]
"""The visible tools and the extra documents (equal documents, equal key: no digest to forge)."""


class ViewIndexes:
    """Indexes keyed by the visible tools' keys (None: every tool), built on first use.

    ``previous`` (the indexes of the tree this one replaces) lends its indexes as bases; each base is
    used at most once and dropped then, so an old tree's indexes do not outlive their use.
    """

    def __init__(self, semantic: SemanticChoice | None = None, previous: ViewIndexes | None = None) -> None:
        self._semantic: SemanticChoice | None = semantic
        self._indexes: OrderedDict[IndexKey, ToolIndex] = OrderedDict()
        self._bases: list[ToolIndex] = previous.handover() if previous is not None else []
        self._lock = threading.Lock()

    def handover(self) -> list[ToolIndex]:
        """The indexes a successor may update from: these views' indexes, then unused bases."""
        with self._lock:
            indexes = [*reversed(self._indexes.values()), *self._bases]
        return [index for index in indexes if index.updatable][:_MAX_VIEW_INDEXES]

    def get(
        self,
        visible: ViewKey,
        documents: Callable[[], Sequence[SearchDocument]],
        extra: tuple[SearchDocument, ...] = (),
    ) -> ToolIndex:
        """The index of the visible tools' ``documents`` and, after them, the ``extra`` documents
        (a view's saved skills). Each set of extra documents has its own index, made from the
        tools' index by adding them: a view without them is ranked as if they did not exist."""
        key: IndexKey = (visible, extra)
        with self._lock:
            index = self._indexes.get(key)
            if index is not None:
                self._indexes.move_to_end(key)
                return index
        # Built outside the lock: two threads may build the same view once each, never wrongly.
        if extra:
            tools = self.get(visible, documents)
            index = build_index([*tools.documents(), *extra], semantic=self._semantic, base=tools)
        else:
            docs = documents()
            index = build_index(docs, semantic=self._semantic, base=self._take_base(docs))
        with self._lock:
            self._indexes[key] = index
            while len(self._indexes) > _MAX_VIEW_INDEXES:
                self._indexes.popitem(last=False)
        return index

    def _take_base(self, docs: Sequence[SearchDocument]) -> ToolIndex | None:
        """The base whose tools differ least from ``docs`` (removed from the bases), if close enough."""
        with self._lock:
            if not self._bases:
                return None
            keys = {doc.key for doc in docs}
            best, best_diff = None, len(keys) * _MAX_UPDATE_SHARE
            for base in self._bases:
                diff = len(keys.symmetric_difference(base.keys()))
                if diff <= best_diff:
                    best, best_diff = base, diff
            if best is not None:
                self._bases.remove(best)
            return best
