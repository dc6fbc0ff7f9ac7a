"""The static model: word embeddings whose weights ship inside the ``wordllama`` wheel.

Install it with the ``semantic`` extra: the wheel carries the ``l2_supercat`` token embedding table
(32,000 x 256, 16 MB) and its tokenizer, so nothing is downloaded at run time. A text's vector is the
mean of its tokens' vectors, normalised; relevance is the cosine with the query's vector.

The package's own loader is not used: it looks for its bundled tokenizer in the wrong folder and then
tries the network, and importing it reconfigures the root logger. Only its two data files are read
(located without importing the package), with ``tokenizers`` and ``numpy``, both imported only
inside functions.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from codemode.search._model import SearchDocument

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray
    from tokenizers import Tokenizer

    from codemode.search._bpe import BpeTable

    Vectors = NDArray[np.float32]

__all__ = ["MODEL_PACKAGE", "WORDLLAMA_WEIGHT", "StaticEmbedder", "semantic_text"]

# Share of the fused score that comes from the cosine; chosen on the benchmark's dev queries.
WORDLLAMA_WEIGHT = 0.6
MODEL_PACKAGE = "wordllama"
_WEIGHTS = ("weights", "l2_supercat_256.safetensors")
_TOKENIZER = ("tokenizers", "l2_supercat_tokenizer_config.json")
_TENSOR = "embedding.weight"
_SAFETENSOR_DTYPES = {"F16": "<f2", "F32": "<f4"}
# Enough of a description to place the tool; the tail of long descriptions is mostly parameter detail.
_MAX_TEXT_CHARS = 1_500

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_SEPARATORS = re.compile(r"[_\-./:]+")


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

    @property
    def fusion_weight(self) -> float:
        return WORDLLAMA_WEIGHT

    def document_text(self, doc: SearchDocument) -> str:
        """The tool's words (see :func:`semantic_text`): parameter names, not their descriptions."""
        return semantic_text(doc.name, doc.title, doc.description, [name for name, _ in doc.parameters])

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

    def embed_query(self, query: str) -> Vectors:
        """One text's vector: a query reads like the tools' words here, so it needs no prefix."""
        return self.embed([query])[0]
