"""The public tool index: documents -> fields -> BM25F, queries -> expanded weighted terms -> ranked hits."""

from __future__ import annotations

import bisect
import heapq
import marshal
import re
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from codemode.search._bm25 import BM25FIndex, FieldSpec
from codemode.search._model import SearchDocument, SearchHit
from codemode.search._synonyms import SYNONYMS
from codemode.search._tokenize import tokenize

if TYPE_CHECKING:
    from codemode.search._semantic import Embedder, EmbeddingCache, SemanticIndex

__all__ = [
    "MAX_DESCRIPTION_CHARS",
    "MAX_NAME_CHARS",
    "MAX_PARAMETERS",
    "MAX_PARAMETER_DESCRIPTION_CHARS",
    "MAX_QUERY_CHARS",
    "SEMANTIC_WEIGHT",
    "ToolIndex",
]

# Untrusted text is cut before tokenising, so neither build time nor scores depend on how much a server sends.
MAX_DESCRIPTION_CHARS = 4_000
MAX_NAME_CHARS = 256
MAX_PARAMETERS = 64
MAX_PARAMETER_DESCRIPTION_CHARS = 300
MAX_QUERY_CHARS = 1_000

# One entry per field, in the order _fields() produces them.
_FIELDS: tuple[FieldSpec, ...] = (
    FieldSpec(weight=2.0, b=0.3),  # tool name: short, the strongest signal
    FieldSpec(weight=1.5, b=0.3),  # title
    FieldSpec(weight=2.0, b=0.0),  # server name (so "the jira ticket" prefers jira's tools)
    FieldSpec(weight=1.0, b=0.9),  # description: long ones are often parameter lists
    FieldSpec(weight=1.0, b=0.5),  # parameter names
    FieldSpec(weight=0.3, b=0.75),  # parameter descriptions
    FieldSpec(weight=0.3, b=0.75),  # output field names and descriptions ("which tool returns X")
)
_K1 = 1.2
# The layout of to_bytes(). Caches also key on this package's source, so a change of weights or
# tokenisation needs no bump here; a change of the layout does.
_FORMAT = "codemode-search-1"
# Share of the fused score that comes from the embedding cosine; chosen on the benchmark's dev queries.
SEMANTIC_WEIGHT = 0.6
_COVERAGE_EXPONENT = 1.0
_TF_CAP = 3
_SYNONYM_WEIGHT = 0.3
_PREFIX_WEIGHT = 0.4
_PREFIX_MIN_CHARS = 4
_PREFIX_MAX_EXPANSIONS = 8

_NON_ALNUM = re.compile(r"[\W_]+")


def _squash(text: str) -> str:
    """Lowercase and keep letters and digits: ``"List Pull-Request files"`` -> ``"listpullrequestfiles"``."""
    return _NON_ALNUM.sub("", text.lower())


def _fields(doc: SearchDocument) -> list[list[str]]:
    params = doc.parameters[:MAX_PARAMETERS]
    return [
        tokenize(doc.name[:MAX_NAME_CHARS]),
        tokenize(doc.title[:MAX_NAME_CHARS]) if doc.title else [],
        tokenize(doc.server[:MAX_NAME_CHARS]),
        tokenize(doc.description[:MAX_DESCRIPTION_CHARS]),
        [term for name, _ in params for term in tokenize(name[:MAX_NAME_CHARS])],
        tokenize("\n".join(text[:MAX_PARAMETER_DESCRIPTION_CHARS] for _, text in params)),
        tokenize(
            "\n".join(
                f"{name[:MAX_NAME_CHARS]} {text[:MAX_PARAMETER_DESCRIPTION_CHARS]}"
                for name, text in doc.outputs[:MAX_PARAMETERS]
            )
        ),
    ]


class ToolIndex:
    """A ranked search index over tool descriptions; immutable once built, safe to share between threads.

    Build it once per catalog with :meth:`build`, then call :meth:`search` as often as needed.
    Ranking is BM25F over the tool name (weighted highest), title, server name, description and parameter
    names/descriptions; query words are also matched through a small synonym table and, for words the
    catalog does not contain, by prefix. A query equal to a tool's name (ignoring case and punctuation)
    ranks that tool first. Results are deterministic: ties keep the order documents were given in.
    """

    __slots__ = ("_bm25", "_exact", "_keys", "_semantic", "_semantic_weight", "_vocabulary")

    def __init__(
        self,
        keys: tuple[str, ...],
        bm25: BM25FIndex,
        exact: dict[str, tuple[int, ...]],
        vocabulary: tuple[str, ...],
        semantic: SemanticIndex | None = None,
        semantic_weight: float = 0.0,
    ) -> None:
        self._keys = keys
        self._bm25 = bm25
        self._exact = exact
        self._vocabulary = vocabulary
        self._semantic = semantic
        self._semantic_weight = semantic_weight

    @property
    def hybrid(self) -> bool:
        """Whether the semantic signal takes part in ranking (see :meth:`build`)."""
        return self._semantic is not None

    @classmethod
    def build(
        cls,
        documents: Sequence[SearchDocument],
        *,
        embedder: Embedder | None = None,
        cache: EmbeddingCache | None = None,
        semantic_weight: float = SEMANTIC_WEIGHT,
    ) -> ToolIndex:
        """Index ``documents``. Keys must be unique (:class:`ValueError` otherwise).

        With an ``embedder`` (see :func:`codemode.search.load_embedder`, the ``semantic`` extra) ranking
        fuses BM25 with the cosine of static embeddings; ``cache`` keeps tool vectors between builds.
        """
        keys = tuple(doc.key for doc in documents)
        if len(set(keys)) != len(keys):
            dupes = sorted(key for key, count in Counter(keys).items() if count > 1)
            raise ValueError(f"duplicate search document keys: {', '.join(map(repr, dupes[:5]))}")
        exact: dict[str, list[int]] = {}
        for i, doc in enumerate(documents):
            name = _squash(doc.name[:MAX_NAME_CHARS])
            forms = {name, _squash(doc.server[:MAX_NAME_CHARS]) + name}
            if doc.title:
                forms.add(_squash(doc.title[:MAX_NAME_CHARS]))
            for form in forms:
                if form:
                    exact.setdefault(form, []).append(i)
        bm25 = BM25FIndex.build([_fields(doc) for doc in documents], _FIELDS, k1=_K1, tf_cap=_TF_CAP)
        vocabulary = tuple(sorted(bm25.terms()))
        semantic = None
        if embedder is not None:
            from codemode.search._semantic import SemanticIndex, semantic_text

            texts = [
                semantic_text(
                    doc.name[:MAX_NAME_CHARS],
                    doc.title[:MAX_NAME_CHARS] if doc.title else None,
                    doc.description[:MAX_DESCRIPTION_CHARS],
                    [name[:MAX_NAME_CHARS] for name, _ in doc.parameters[:MAX_PARAMETERS]],
                )
                for doc in documents
            ]
            semantic = SemanticIndex.build(embedder, texts, cache)
        exact_ids = {form: tuple(ids) for form, ids in exact.items()}
        return cls(keys, bm25, exact_ids, vocabulary, semantic, semantic_weight)

    def __len__(self) -> int:
        return len(self._keys)

    def to_bytes(self) -> bytes:
        """The BM25 index as bytes for :meth:`from_bytes` (a cache file; not for untrusted storage).

        Loading it is far cheaper than tokenising a catalog again. The semantic part is not
        included: vectors have their own cache (:class:`~codemode.search.EmbeddingCache`).
        """
        if self._semantic is not None:
            raise ValueError("a hybrid index is not serialisable; cache its embeddings instead")
        return marshal.dumps((_FORMAT, self._keys, self._bm25.state(), self._exact, self._vocabulary))

    @classmethod
    def from_bytes(cls, data: bytes) -> ToolIndex:
        """The index :meth:`to_bytes` wrote; :class:`ValueError` if ``data`` is not one (of this version)."""
        try:
            # Plain tuples, dicts, strs and floats; callers read only files this user wrote.
            loaded = marshal.loads(data)  # noqa: S302
            form, keys, state, exact, vocabulary = loaded
        except (EOFError, TypeError, ValueError) as exc:
            raise ValueError(f"not a serialised tool index: {exc}") from exc
        if form != _FORMAT or not isinstance(keys, tuple) or not isinstance(exact, dict):
            raise ValueError("not a serialised tool index of this version")
        bm25 = BM25FIndex.from_state(state)  # pyright: ignore[reportUnknownArgumentType]
        if len(bm25) != len(keys):  # pyright: ignore[reportUnknownArgumentType]
            raise ValueError("inconsistent tool index")
        return cls(keys, bm25, exact, vocabulary)  # pyright: ignore[reportUnknownArgumentType]

    def _query_groups(self, terms: list[str]) -> list[dict[str, float]]:
        """One ``{term: weight}`` group per distinct query word: the word, its synonyms, its completions."""
        groups: list[dict[str, float]] = []
        for term in dict.fromkeys(terms):
            group = {term: 1.0}
            for synonym in SYNONYMS.get(term, ()):
                group.setdefault(synonym, _SYNONYM_WEIGHT)
            if len(term) >= _PREFIX_MIN_CHARS and not self._bm25.has_term(term):
                for other in self._completions(term):
                    group.setdefault(other, _PREFIX_WEIGHT)
            groups.append(group)
        return groups

    def _completions(self, term: str) -> list[str]:
        """Indexed terms that start with ``term`` (a query word the catalog only has in longer forms)."""
        vocab = self._vocabulary
        out: list[str] = []
        i = bisect.bisect_left(vocab, term)
        while i < len(vocab) and len(out) < _PREFIX_MAX_EXPANSIONS and vocab[i].startswith(term):
            out.append(vocab[i])
            i += 1
        return out

    def search(self, query: str, k: int = 5) -> list[SearchHit]:
        """The ``k`` best tools for ``query``, best first; ``[]`` if ``k <= 0`` or no query word is known."""
        if k <= 0 or not self._keys:
            return []
        query = query[:MAX_QUERY_CHARS]
        scores = self._bm25.score(self._query_groups(tokenize(query)), _COVERAGE_EXPONENT)
        exact = self._exact.get(_squash(query))
        if self._semantic is not None and (scores or exact or _NON_ALNUM.sub("", query)):
            # Fused scores lie in [-1, 1] before the boost, so +2 puts an exact name first.
            boost = dict.fromkeys(exact or (), 2.0)
            fused = self._semantic.fuse(query, scores, boost, self._semantic_weight, k)
            return [SearchHit(self._keys[i], score) for i, score in fused]
        if exact:
            bonus = max(scores.values(), default=0.0) + 1.0
            for i in exact:
                scores[i] = scores.get(i, 0.0) + bonus
        if not scores:
            return []
        # nlargest is stable and ``scores`` iterates in document order, so ties keep the caller's order.
        best = heapq.nlargest(k, scores, key=scores.__getitem__)
        return [SearchHit(self._keys[i], scores[i]) for i in best]
