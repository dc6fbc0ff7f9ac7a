"""The optional semantic signal: a static word-embedding model whose weights ship inside a wheel.

Install it with the ``semantic`` extra (``wordllama``): its wheel carries the ``l2_supercat`` token
embedding table (32,000 x 256, 16 MB) and its tokenizer, so nothing is downloaded at run time. A text's
vector is the mean of its tokens' vectors, normalised; relevance is the cosine with the query's vector.

The package's own loader is not used: it looks for its bundled tokenizer in the wrong folder and then
tries the network, and importing it reconfigures the root logger. Only its two data files are read
(located without importing the package), with ``tokenizers`` and ``numpy``.

This module imports numpy and tokenizers only inside functions, so ``codemode.search`` works (BM25
alone) when the extra is missing; :func:`load_embedder` then returns None.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import io
import json
import os
import re
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from codemode.search._cache_files import cache_dir, read_private, write_atomic

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray
    from tokenizers import Tokenizer

    from codemode.search._bpe import BpeTable

    Vectors = NDArray[np.float32]

__all__ = [
    "MISSING_EXTRA",
    "SEMANTIC_ENV",
    "Embedder",
    "EmbeddingCache",
    "SemanticIndex",
    "SemanticSetting",
    "StaticEmbedder",
    "load_embedder",
    "semantic_ranking",
    "semantic_setting",
    "semantic_text",
]

SEMANTIC_ENV = "CODEMODE_SEARCH_SEMANTIC"
"""Overrides ``[search] semantic`` for one process: ``1``/``true``/``yes``/``on`` rank the stub tree's
search with the semantic extra (when installed), ``auto`` uses it if installed, any other value not."""
_ON = frozenset({"1", "true", "yes", "on"})

SemanticSetting = Literal["auto", "on", "off"]
"""``[search] semantic``, taken as a plain value: configuration is a layer of its own, beside this
one, and names the same three values (:data:`codemode.config.SemanticChoice`; a test keeps them equal)."""


def semantic_setting(choice: SemanticSetting | None) -> SemanticSetting:
    """The setting in force: :data:`SEMANTIC_ENV` when set - ``1`` / ``true`` / ``yes`` / ``on`` mean
    on, ``auto`` defers to the extra being installed, anything else means off - else ``choice`` (the
    ``[search] semantic`` setting); None, from callers that pass no configuration, means off.

    The one place this is decided, for the engine's tree and for ``codemode search`` / ``tree``, so the
    CLI and a running server never rank one catalog differently.
    """
    env = os.environ.get(SEMANTIC_ENV, "").strip().lower()
    if env:
        return "on" if env in _ON else "auto" if env == "auto" else "off"
    return choice or "off"


MISSING_EXTRA = (
    '[search] semantic = "on" but the semantic extra is not installed'
    " (pip install 'codemode[semantic]'); ranking with BM25 alone"
)
"""What the engine logs and the CLI prints when the signal is asked for and cannot be had."""

MODEL_PACKAGE = "wordllama"
_WEIGHTS = ("weights", "l2_supercat_256.safetensors")
_TOKENIZER = ("tokenizers", "l2_supercat_tokenizer_config.json")
_TENSOR = "embedding.weight"
_SAFETENSOR_DTYPES = {"F16": "<f2", "F32": "<f4"}
# Enough of a description to place the tool; the tail of long descriptions is mostly parameter detail.
_MAX_TEXT_CHARS = 1_500
_MAX_QUERY_CHARS = 1_000

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_SEPARATORS = re.compile(r"[_\-./:]+")


class Embedder(Protocol):
    """Turns texts into unit vectors; ``model_id`` names the model (part of every cache key)."""

    @property
    def model_id(self) -> str: ...

    def embed(self, texts: Sequence[str]) -> Vectors: ...


def _words(identifier: str) -> str:
    """``getHTTPResponse`` / ``get_http-response`` -> ``get HTTP Response`` (what the tokenizer knows)."""
    return _SEPARATORS.sub(" ", _CAMEL.sub(" ", identifier)).strip()


def semantic_text(name: str, title: str | None, description: str, parameters: Sequence[str]) -> str:
    """The text embedded for one tool: its words, not its identifiers, and the head of its description.

    The server name is left to BM25: in a mean of token vectors it only blurs what the tool does.
    """
    parts = [_words(name), title or "", description, " ".join(_words(p) for p in parameters)]
    return " . ".join(part for part in parts if part)[:_MAX_TEXT_CHARS]


def _read_safetensor(path: Path, name: str, *, mapped: bool = False) -> Vectors:
    """One tensor from a ``.safetensors`` file (8-byte header size, JSON header, raw data): float32,
    or with ``mapped`` memory-mapped in its stored type (float16 here).

    Mapped, loading costs about 1 ms instead of 85 ms (reading 16 MB and widening it): a query
    touches a dozen rows, which :meth:`StaticEmbedder.embed` widens when it gathers them.
    """
    import numpy as np

    with path.open("rb") as f:
        header_size = int.from_bytes(f.read(8), "little")
        header: dict[str, dict[str, object]] = json.loads(f.read(header_size))
    entry = header[name]
    dtype = _SAFETENSOR_DTYPES.get(str(entry["dtype"]))
    if dtype is None:
        raise ValueError(f"{path.name}: {name} is {entry['dtype']}, expected F16 or F32")
    shape = entry["shape"]
    offsets = entry["data_offsets"]
    if not isinstance(shape, list) or not isinstance(offsets, list):
        raise ValueError(f"{path.name}: malformed header for {name}")
    rows, cols = (int(x) for x in shape)  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
    start = 8 + header_size + int(offsets[0])  # pyright: ignore[reportUnknownArgumentType]
    if mapped:
        return np.memmap(path, dtype=dtype, mode="r", offset=start, shape=(rows, cols))  # pyright: ignore[reportReturnType]
    data = np.fromfile(path, dtype=dtype, count=rows * cols, offset=start)
    return data.reshape(rows, cols).astype(np.float32, copy=False)


class StaticEmbedder:
    """Mean-pooled static token embeddings (thread-safe: the tokenizers are used under a lock).

    ``tokenizer`` is a ``tokenizers.Tokenizer``, or the path of its file, loaded on first use. A single
    text (a query) is encoded by a :class:`~codemode.search._bpe.BpeTable` instead when ``table_cache``
    (a folder) is given and the tokenizer is of the pipeline that table reproduces: same ids, loaded
    in a millisecond instead of ``tokenizers``' ~60 ms (see :mod:`codemode.search._bpe`).
    """

    def __init__(
        self, table: Vectors, tokenizer: object, model_id: str, table_cache: Path | None = None
    ) -> None:
        self._table = table
        self._tokenizer = tokenizer
        self._model_id = model_id
        self._table_cache = table_cache
        self._bpe: BpeTable | Literal[False] | None = False  # False: not looked for yet
        self._lock = threading.Lock()

    @property
    def model_id(self) -> str:
        return self._model_id

    @classmethod
    def from_package(cls, table_cache: Path | None = None) -> StaticEmbedder:
        """Load the model shipped in the ``wordllama`` wheel; :class:`ImportError` if it is missing.

        The tokenizer file is read only when first needed; ``table_cache``: see the class.
        """
        spec = importlib.util.find_spec(MODEL_PACKAGE)  # finds the folder without running its __init__
        if spec is None or not spec.submodule_search_locations:
            raise ImportError(f"the semantic extra is not installed (no {MODEL_PACKAGE} package)")
        root = Path(next(iter(spec.submodule_search_locations)))
        weights, tokenizer_file = root.joinpath(*_WEIGHTS), root.joinpath(*_TOKENIZER)
        if not weights.is_file() or not tokenizer_file.is_file():
            raise ImportError(f"{MODEL_PACKAGE} is installed without its bundled model files")
        if importlib.util.find_spec("tokenizers") is None:  # imported on first use, so checked here
            raise ImportError("the semantic extra is not installed (no tokenizers package)")
        digest = hashlib.sha256(f"{weights.stat().st_size}:{tokenizer_file.stat().st_size}".encode())
        return cls(
            _read_safetensor(weights, _TENSOR, mapped=True),
            tokenizer_file,
            f"{MODEL_PACKAGE}/l2_supercat_256/{digest.hexdigest()[:12]}",
            table_cache,
        )

    def _tokenizers(self) -> Tokenizer:
        """The ``tokenizers`` tokenizer, loaded on first use (call under the lock)."""
        from tokenizers import Tokenizer

        tokenizer = self._tokenizer
        if not isinstance(tokenizer, Tokenizer):
            tokenizer = Tokenizer.from_file(str(tokenizer))
            tokenizer.no_padding()
            tokenizer.no_truncation()
            self._tokenizer = tokenizer
        return tokenizer

    def _query_table(self) -> BpeTable | None:
        """The table for single texts, looked for once (call under the lock); None: use tokenizers."""
        if self._bpe is False:
            from codemode.search._bpe import cached_table

            found: BpeTable | None = None
            if self._table_cache is not None and isinstance(self._tokenizer, Path):
                try:
                    found = cached_table(self._tokenizer, self._model_id, self._table_cache)
                except OSError:
                    found = None
            self._bpe = found
        return self._bpe

    def _ids(self, texts: Sequence[str]) -> list[list[int]]:
        with self._lock:
            if len(texts) == 1:  # a query: encode_batch would wake a thread pool for one text
                table = self._query_table()
                if table is not None:
                    try:
                        return [table.encode(texts[0])]
                    except UnicodeEncodeError:  # not UTF-8 (a lone surrogate): tokenizers decides
                        pass
                return [self._tokenizers().encode(texts[0], add_special_tokens=False).ids]
            encodings = self._tokenizers().encode_batch(list(texts), add_special_tokens=False)
            return [encoding.ids for encoding in encodings]

    def embed(self, texts: Sequence[str]) -> Vectors:
        import numpy as np

        table = self._table
        out = np.zeros((len(texts), table.shape[1]), dtype=np.float32)
        for row, ids in enumerate(self._ids(texts)):
            if ids:
                # Widened before the mean, so a mapped float16 table gives the float32 table's vectors.
                out[row] = table[np.asarray(ids, dtype=np.int64)].astype(np.float32).mean(axis=0)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        norms[norms == 0.0] = 1.0
        return out / norms


@functools.cache
def load_embedder() -> Embedder | None:
    """The bundled static model, loaded once per process; None when the ``semantic`` extra is missing.

    Queries are tokenised from a table cached beside the search index (see :class:`StaticEmbedder`).
    """
    try:
        return StaticEmbedder.from_package(cache_dir())
    except ImportError:
        return None


def semantic_ranking(choice: SemanticSetting | None) -> tuple[SemanticSetting, Embedder | None]:
    """The setting in force (:func:`semantic_setting`) and the model to rank with: None for BM25 alone,
    when the setting is ``off`` or the extra is missing (then, if the setting is ``on``, the caller
    says :data:`MISSING_EXTRA`)."""
    setting = semantic_setting(choice)
    return setting, (load_embedder() if setting != "off" else None)


class EmbeddingCache:
    """Tool vectors keyed by ``(model id, sha256 of the embedded text)``, optionally kept in a file.

    The embedded text is derived from the tool's name, description and input schema, so its hash is the
    schema hash that matters here: a tool whose definition did not change is never embedded again, and
    a tool whose definition changed can never be served a stale vector.
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
        """One unit vector per text, embedding only the texts not seen before."""
        import numpy as np

        keys = [self.key(embedder.model_id, text) for text in texts]
        with self._lock:
            missing = {k: t for k, t in zip(keys, texts, strict=True) if k not in self._vectors}
        if missing:
            fresh = embedder.embed(list(missing.values()))
            with self._lock:
                for k, vector in zip(missing, fresh, strict=True):
                    self._vectors[k] = vector
                self._dirty = True
        with self._lock:
            if not keys:
                return np.zeros((0, 0), dtype=np.float32)
            return np.stack([self._vectors[k] for k in keys])

    def save(self) -> None:
        """Write the cache to its file (atomically) if it has a file and changed."""
        import numpy as np

        path = self._path
        if path is None or not self._dirty:
            return
        with self._lock:
            keys = sorted(self._vectors)
            matrix = np.stack([self._vectors[k] for k in keys]) if keys else np.zeros((0, 0), np.float32)
            self._dirty = False
        buffer = io.BytesIO()
        np.savez(buffer, keys=np.asarray(keys), vectors=matrix)
        write_atomic(path, buffer.getvalue(), keep=1)

    def _load(self, path: Path) -> None:
        import numpy as np

        try:
            with np.load(io.BytesIO(read_private(path)), allow_pickle=False) as data:
                keys = [str(k) for k in data["keys"]]
                matrix = data["vectors"].astype(np.float32, copy=False)
        except (OSError, ValueError, KeyError):
            return  # a damaged cache is only a slower start
        if len(keys) == len(matrix):
            self._vectors = dict(zip(keys, matrix, strict=True))


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

    @classmethod
    def build(
        cls, embedder: Embedder, texts: Sequence[str], cache: EmbeddingCache | None = None
    ) -> SemanticIndex:
        matrix = (cache if cache is not None else EmbeddingCache()).vectors(embedder, texts)
        return cls(embedder, matrix)

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
        query_vector = self._embedder.embed([query[:_MAX_QUERY_CHARS]])[0]
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
