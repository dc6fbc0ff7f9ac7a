"""The semantic signal: the embedder seam, tool vectors cached on disk, and their fusion with BM25.

An :class:`Embedder` turns tools and queries into unit vectors; two ship as extras, chosen by
``[search] semantic`` (:mod:`codemode.search._ranking`): static word embeddings
(:mod:`codemode.search._wordllama`) and multilingual-e5-small (:mod:`codemode.search._e5`).
Relevance is the cosine of a tool's vector with the query's, fused with BM25 (:class:`SemanticIndex`).

Embedding a catalog is the cost (3,500 tools with e5: about two minutes on two idle cores, ten on
two busy ones), so tool vectors live in an :class:`EmbeddingCache` keyed by the model's id and the
embedded text: only tools never seen before are embedded, on a first build or after servers
change. A long first build reports its progress to whoever asked for it (:func:`embedding_progress`).

numpy is imported only inside functions, so ``codemode.search`` works (BM25 alone) without it.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import io
import logging
import re
import threading
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast

from codemode.search._cache_files import read_private, write_atomic
from codemode.search._model import SearchDocument

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    Vectors = NDArray[np.float32]

__all__ = ["Embedder", "EmbeddingCache", "Progress", "SemanticIndex", "embedding_progress"]

log = logging.getLogger(__name__)

_MAX_QUERY_CHARS = 1_000
# Tools are embedded in chunks this large: progress moves, and an interrupted build keeps what it did.
_CHUNK = 32
# A build embedding more tools than this is worth a line in the log when nobody shows progress.
_LOG_AT = 256
_DIMENSION_KEY = re.compile(r"keys(\d*)")


class Embedder(Protocol):
    """A model that turns tools and queries into unit vectors (the seam for every model).

    ``model_id`` names the model and its weights: it is part of every cache key, so another model,
    or another version of one, never reuses a vector. ``document_text`` is how a tool reads to this
    model (its conventions: which fields, what form); ``fusion_weight`` is the share of the cosine in
    the fused score, tuned per model on the benchmark's dev queries.
    """

    @property
    def model_id(self) -> str: ...

    @property
    def fusion_weight(self) -> float: ...

    def document_text(self, doc: SearchDocument) -> str: ...

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One unit row per tool text (from :meth:`document_text`)."""
        ...

    def embed_query(self, query: str) -> Vectors:
        """The query's unit vector (one dimension), with whatever prefix the model expects."""
        ...


Progress = Callable[[int, int], object]
"""Called with ``(embedded so far, to embed)`` while tools are embedded: ``(0, n)`` first, ``(n, n)`` last."""
_progress: contextvars.ContextVar[Progress | None] = contextvars.ContextVar("progress", default=None)


@contextlib.contextmanager
def embedding_progress(report: Progress) -> Generator[None]:
    """Report the progress of every embedding done in this context (this thread or task).

    ``codemode search`` draws a progress bar with it while a first build embeds the catalog.
    """
    token = _progress.set(report)
    try:
        yield
    finally:
        _progress.reset(token)


class EmbeddingCache:
    """Tool vectors keyed by ``(model id, sha256 of the embedded text)``, optionally kept in a file.

    The embedded text is derived from the tool's name, description and schema, so its hash is the
    schema hash that matters here: a tool whose definition did not change is never embedded again, and
    a tool whose definition changed can never be served a stale vector. Models of any dimension share
    one file (one array per dimension).
    """

    def __init__(self, path: Path | None = None) -> None:
        self._path = path
        self._vectors: dict[str, Vectors] = {}
        self._lock = threading.Lock()
        self._dirty = False
        if path is not None and path.is_file():
            self._load(path)

    @staticmethod
    def key(model_id: str, text: str) -> str:
        return hashlib.sha256(f"{model_id}\x00{text}".encode()).hexdigest()

    def __len__(self) -> int:
        return len(self._vectors)

    def vectors(self, embedder: Embedder, texts: Sequence[str]) -> Vectors:
        """One unit vector per text, embedding only the texts not seen before.

        New texts are embedded in chunks, reported to :func:`embedding_progress`; an interruption
        (Ctrl-C) keeps the chunks done, and writes them to the file, so the next build resumes there.
        """
        import numpy as np

        keys = [self.key(embedder.model_id, text) for text in texts]
        with self._lock:
            missing = {k: t for k, t in zip(keys, texts, strict=True) if k not in self._vectors}
        if missing:
            try:
                self._embed(embedder, missing)
            except BaseException:
                with contextlib.suppress(Exception):  # the interruption is what the caller must see
                    self.save()
                raise
        with self._lock:
            if not keys:
                return np.zeros((0, 0), dtype=np.float32)
            return np.stack([self._vectors[k] for k in keys])

    def _embed(self, embedder: Embedder, missing: Mapping[str, str]) -> None:
        report = _progress.get()
        total = len(missing)
        if total > _LOG_AT:
            log.info("embedding %d tools for search with %s (cached after)", total, embedder.model_id)
        if report is not None:
            report(0, total)
        pending = list(missing.items())
        for start in range(0, total, _CHUNK):
            chunk = pending[start : start + _CHUNK]
            fresh = embedder.embed([text for _, text in chunk])
            with self._lock:
                for (k, _), vector in zip(chunk, fresh, strict=True):
                    self._vectors[k] = vector
                self._dirty = True
            if report is not None:
                report(start + len(chunk), total)

    def save(self) -> None:
        """Write the cache to its file (atomically) if it has a file and changed."""
        import numpy as np

        path = self._path
        if path is None or not self._dirty:
            return
        with self._lock:
            by_dimension: dict[int, list[str]] = {}
            for k in sorted(self._vectors):
                by_dimension.setdefault(len(self._vectors[k]), []).append(k)
            arrays = {
                name: array
                for dim, keys in by_dimension.items()
                for name, array in (
                    (f"keys{dim}", np.asarray(keys)),
                    (f"vectors{dim}", np.stack([self._vectors[k] for k in keys])),
                )
            }
            self._dirty = False
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)  # pyright: ignore[reportArgumentType]
        write_atomic(path, buffer.getvalue(), keep=1)

    def _load(self, path: Path) -> None:
        """The vectors in ``path``: per dimension ``keys<dim>`` / ``vectors<dim>``, or the one pair
        ``keys`` / ``vectors`` of files written before models of several dimensions shared them."""
        import numpy as np

        loaded: dict[str, Vectors] = {}
        try:
            with np.load(io.BytesIO(read_private(path)), allow_pickle=False) as data:
                for name in data.files:
                    found = _DIMENSION_KEY.fullmatch(name)
                    if found is None:
                        continue
                    keys = [str(k) for k in data[name]]
                    matrix = data[f"vectors{found.group(1)}"].astype(np.float32, copy=False)
                    if len(keys) != len(matrix) or matrix.ndim != 2:
                        return  # a damaged cache is only a slower start
                    loaded.update(zip(keys, matrix, strict=True))
        except (OSError, ValueError, KeyError):
            return
        self._vectors = loaded


class SemanticIndex:
    """Document vectors plus the fusion of their cosine with BM25 scores.

    Row ``i`` of the matrix is the vector of the document in slot ``i``; free slots (see
    :meth:`~codemode.search.ToolIndex.updated`) have a zero row and never appear in results.
    """

    __slots__ = ("_embedder", "_free", "_matrix")

    def __init__(self, embedder: Embedder, matrix: Vectors, free: Sequence[int] = ()) -> None:
        self._embedder = embedder
        self._matrix = matrix
        self._free = tuple(free)

    @property
    def model_id(self) -> str:
        return self._embedder.model_id

    def rows(self, slots: Sequence[int] | None = None) -> Vectors:
        """The matrix (float32), or its rows ``slots`` in that order (what a cache stores)."""
        return self._matrix if slots is None else self._matrix[list(slots)]

    def texts(self, documents: Iterable[SearchDocument]) -> list[str]:
        """What the model embeds for ``documents`` (whose fields the index has capped already)."""
        return [self._embedder.document_text(doc) for doc in documents]

    @classmethod
    def build(
        cls, embedder: Embedder, documents: Sequence[SearchDocument], cache: EmbeddingCache | None = None
    ) -> SemanticIndex:
        texts = [embedder.document_text(doc) for doc in documents]
        matrix = (cache if cache is not None else EmbeddingCache()).vectors(embedder, texts)
        return cls(embedder, matrix)

    @classmethod
    def from_stored(
        cls, stored: object, raw: memoryview, count: int, embedder: Embedder | None
    ) -> tuple[SemanticIndex, float]:
        """The vectors and fusion weight :meth:`stored` described (``raw``: the matrix's bytes) for
        ``count`` documents; :class:`ValueError` when they do not fit, or are another model's than
        ``embedder`` (which embeds the queries)."""
        import numpy as np

        if not isinstance(stored, tuple) or len(stored) != 5:  # pyright: ignore[reportUnknownArgumentType]
            raise ValueError("damaged vectors in a serialised tool index")
        model_id, weight, rows, cols, size = cast("tuple[object, ...]", stored)
        if not (isinstance(rows, int) and isinstance(cols, int) and isinstance(size, int)):
            raise ValueError("damaged vectors in a serialised tool index")
        if rows != count or not isinstance(weight, float) or not len(raw) == size == rows * cols * 4:
            raise ValueError("inconsistent vectors in a serialised tool index")
        if embedder is None or embedder.model_id != model_id:
            raise ValueError(f"a hybrid index of model {model_id!r} needs that model to search")
        # Read-only over the loaded bytes (no copy): updates build new matrices, nothing writes to this one.
        return cls(embedder, np.frombuffer(raw, dtype="<f4").reshape(rows, cols)), weight

    def stored(
        self, weight: float, slots: Sequence[int] | None = None
    ) -> tuple[tuple[str, float, int, int, int], bytes]:
        """What :meth:`from_stored` reads back: a description (model, ``weight``, shape, size) and the
        bytes of the rows ``slots`` (all when None), float32."""
        matrix = self.rows(slots)
        raw = matrix.astype("<f4", copy=False).tobytes()
        cols = matrix.shape[1] if matrix.ndim == 2 else 0
        return (self.model_id, weight, matrix.shape[0], cols, len(raw)), raw

    def updated(
        self,
        capacity: int,
        free: Sequence[int],
        added: Mapping[int, str],
        cache: EmbeddingCache | None = None,
    ) -> SemanticIndex:
        """A copy with ``capacity`` slots, ``free`` ones zeroed, and the texts ``added`` (slot -> text)
        embedded in their slots: only those are embedded (or looked up in ``cache``)."""
        import numpy as np

        fresh = (cache if cache is not None else EmbeddingCache()).vectors(
            self._embedder, list(added.values())
        )
        old = self._matrix
        dim = old.shape[1] if old.size else (fresh.shape[1] if fresh.size else 0)
        matrix = np.zeros((capacity, dim), dtype=np.float32)
        rows = min(len(old), capacity)
        if old.size and rows:
            matrix[:rows] = old[:rows]
        if free:
            matrix[list(free)] = 0.0
        if added:
            matrix[list(added)] = fresh
        return SemanticIndex(self._embedder, matrix, free)

    def fuse(
        self,
        query: str,
        bm25: Mapping[int, float],
        boost: Mapping[int, float],
        weight: float,
        k: int,
        positions: Sequence[int] | None = None,
    ) -> list[tuple[int, float]]:
        """The ``k`` best documents by ``(1 - weight) * bm25 / max(bm25) + weight * cosine + boost``.

        BM25 is scaled by its best score so the weight means the same for every query. Documents BM25
        did not match still compete on the cosine alone, which is what rescues paraphrases. Ties keep
        document order: ``positions[slot]``, or the slot order when None.
        """
        import numpy as np

        n = len(self._matrix)
        live = n - len(self._free)
        if live <= 0:
            return []
        query_vector = self._embedder.embed_query(query[:_MAX_QUERY_CHARS])
        fused = (self._matrix @ query_vector) * weight
        if bm25:
            top = max(bm25.values())
            if top > 0:
                ids = np.fromiter(bm25.keys(), dtype=np.int64, count=len(bm25))
                values = np.fromiter(bm25.values(), dtype=np.float64, count=len(bm25))
                fused[ids] += (1.0 - weight) * values / top
        for i, extra in boost.items():
            fused[i] += extra
        if self._free:
            fused[list(self._free)] = -np.inf  # below every document, so never among the k best
        if k < live:
            # Everything scoring at least the k-th best (ties included), then an exact sort of those few.
            kth = np.partition(fused, n - k)[n - k]
            candidates = np.flatnonzero(fused >= kth)
        else:
            candidates = np.flatnonzero(np.isfinite(fused))
        place = positions.__getitem__ if positions is not None else int
        order = sorted(candidates.tolist(), key=lambda i: (-float(fused[i]), place(i)))[:k]
        return [(int(i), float(fused[i])) for i in order]
