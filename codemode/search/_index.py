"""The public tool index: documents -> fields -> BM25F, queries -> expanded weighted terms -> ranked hits."""

from __future__ import annotations

import bisect
import heapq
import marshal
import re
from collections import Counter
from collections.abc import Callable, Iterable, KeysView, Sequence
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
_FORMAT = "codemode-search-4"
_HEAD_BYTES = 8  # the length of the marshalled part, before it
_COVERAGE_EXPONENT = 1.0
_TF_CAP = 3
_SYNONYM_WEIGHT = 0.3
_PREFIX_WEIGHT = 0.4
_PREFIX_MIN_CHARS = 4
_PREFIX_MAX_EXPANSIONS = 8
# A result whose tool name (ignoring case and punctuation) an earlier result already has loses this share
# of the best score, once: near-duplicate copies of one tool on many servers leave room for other tools.
# Chosen on the benchmark's dev queries (3,529 tools, many of them copies of one function).
_DUPLICATE_PENALTY = 0.08

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


def _forms(doc: SearchDocument) -> set[str]:
    """The squashed names a query must equal to count as naming ``doc`` exactly."""
    name = _squash(doc.name[:MAX_NAME_CHARS])
    forms = {name, _squash(doc.server[:MAX_NAME_CHARS]) + name}
    if doc.title:
        forms.add(_squash(doc.title[:MAX_NAME_CHARS]))
    forms.discard("")
    return forms


def _family(doc: SearchDocument) -> str:
    """What near-duplicate copies of one tool share: the squashed tool name."""
    return _squash(doc.name[:MAX_NAME_CHARS])


def _capped(doc: SearchDocument) -> SearchDocument:
    """``doc`` with every text cut as BM25 reads it: what a model embeds is bounded the same way."""
    return SearchDocument(
        doc.key,
        doc.server[:MAX_NAME_CHARS],
        doc.name[:MAX_NAME_CHARS],
        doc.title[:MAX_NAME_CHARS] if doc.title else None,
        doc.description[:MAX_DESCRIPTION_CHARS],
        tuple(
            (name[:MAX_NAME_CHARS], text[:MAX_PARAMETER_DESCRIPTION_CHARS])
            for name, text in doc.parameters[:MAX_PARAMETERS]
        ),
        tuple(
            (name[:MAX_NAME_CHARS], text[:MAX_PARAMETER_DESCRIPTION_CHARS])
            for name, text in doc.outputs[:MAX_PARAMETERS]
        ),
    )


def _check_unique(keys: Sequence[str]) -> None:
    if len(set(keys)) != len(keys):
        dupes = sorted(key for key, count in Counter(keys).items() if count > 1)
        raise ValueError(f"duplicate search document keys: {', '.join(map(repr, dupes[:5]))}")


class ToolIndex:
    """A ranked search index over tool descriptions; immutable once built, safe to share between threads.

    Build it once per catalog with :meth:`build`, then call :meth:`search` as often as needed; when
    the catalog changes, :meth:`updated` (or :meth:`updated_to`) makes the next index from this one,
    doing only the work the changed documents need, and ranks exactly as a new :meth:`build` would.
    Ranking is BM25F over the tool name (weighted highest), title, server name, description and parameter
    names/descriptions; query words are also matched through a small synonym table and, for words the
    catalog does not contain, by prefix. A query equal to a tool's name (ignoring case and punctuation)
    ranks that tool first. Copies of one tool name on several servers are ranked a little apart (see
    :meth:`search`). Results are deterministic: ties keep the order documents were given in.

    Internally each document has a slot (its number in the BM25 postings and the vector matrix). An
    update frees the slots of removed documents and gives them to added ones, so nothing else is
    renumbered; ``positions`` then remembers the document order that ties follow.
    """

    __slots__ = (
        "_bm25",
        "_docs",
        "_exact",
        "_families",
        "_keys",
        "_positions",
        "_semantic",
        "_semantic_weight",
        "_slot_of",
        "_vocabulary",
    )

    def __init__(
        self,
        keys: tuple[str, ...],
        bm25: BM25FIndex,
        exact: dict[str, tuple[int, ...]],
        vocabulary: tuple[str, ...],
        semantic: SemanticIndex | None = None,
        semantic_weight: float = 0.0,
        docs: tuple[SearchDocument | None, ...] | None = None,
        positions: tuple[int, ...] | None = None,
        families: tuple[str, ...] | None = None,
    ) -> None:
        self._keys = keys
        """Per slot; ``""`` for a free slot."""
        self._families = families if families is not None else ("",) * len(keys)
        """Per slot, the squashed tool name that near-duplicates share; ``""`` for none (or a free slot)."""
        self._bm25 = bm25
        self._exact = exact
        self._vocabulary = vocabulary
        self._semantic = semantic
        self._semantic_weight = semantic_weight
        self._docs = docs
        """Per slot (None: free); None for an index loaded from bytes, which cannot be updated."""
        self._positions = positions
        """Per slot, the document's place in document order; None when that is the slot order."""
        self._slot_of = {key: slot for slot, key in enumerate(keys) if docs is None or docs[slot] is not None}

    @property
    def hybrid(self) -> bool:
        """Whether the semantic signal takes part in ranking (see :meth:`build`)."""
        return self._semantic is not None

    @property
    def semantic_weight(self) -> float:
        """The cosine's share of the fused score (0.0 for BM25 alone)."""
        return self._semantic_weight if self._semantic is not None else 0.0

    @property
    def ranker(self) -> str:
        """``bm25``, or ``hybrid`` / ``hybrid:<model>`` with the model it was built with (what the CLI
        reports; see :func:`codemode.search.ranker_name`)."""
        from codemode.search._ranking import ranker_name

        return ranker_name(self._semantic.model_id if self._semantic is not None else None)

    @classmethod
    def build(
        cls,
        documents: Sequence[SearchDocument],
        *,
        embedder: Embedder | None = None,
        cache: EmbeddingCache | None = None,
        semantic_weight: float | None = None,
    ) -> ToolIndex:
        """Index ``documents``. Keys must be unique (:class:`ValueError` otherwise).

        With an ``embedder`` (see :func:`codemode.search.load_embedder`) ranking fuses BM25 with the
        cosine of the model's vectors, the cosine's share being ``semantic_weight`` (default: the
        model's ``fusion_weight``); ``cache`` keeps tool vectors between builds.
        """
        keys = tuple(doc.key for doc in documents)
        _check_unique(keys)
        exact: dict[str, list[int]] = {}
        for i, doc in enumerate(documents):
            for form in _forms(doc):
                exact.setdefault(form, []).append(i)
        bm25 = BM25FIndex.build([_fields(doc) for doc in documents], _FIELDS, k1=_K1, tf_cap=_TF_CAP)
        vocabulary = tuple(sorted(bm25.terms()))
        semantic = None
        if embedder is not None:
            from codemode.search._semantic import SemanticIndex

            semantic = SemanticIndex.build(embedder, [_capped(doc) for doc in documents], cache)
        exact_ids = {form: tuple(ids) for form, ids in exact.items()}
        families = tuple(_family(doc) for doc in documents)
        if semantic_weight is None:
            semantic_weight = embedder.fusion_weight if embedder is not None else 0.0
        return cls(
            keys, bm25, exact_ids, vocabulary, semantic, semantic_weight, tuple(documents), None, families
        )

    @property
    def updatable(self) -> bool:
        """Whether :meth:`updated` works: false only for an index loaded with :meth:`from_bytes`."""
        return self._docs is not None

    def keys(self) -> KeysView[str]:
        """The keys of the indexed documents (in no particular order)."""
        return self._slot_of.keys()

    def documents(self) -> list[SearchDocument]:
        """The indexed documents in document order (:class:`ValueError` for an index from bytes)."""
        docs = self._docs
        if docs is None:
            raise ValueError("an index loaded from bytes does not keep its documents")
        return [doc for slot in self._order() if (doc := docs[slot]) is not None]

    def _order(self) -> list[int]:
        """The occupied slots in document order."""
        slots = self._slot_of.values()
        positions = self._positions
        if positions is None:
            return sorted(slots)
        return sorted(slots, key=positions.__getitem__)

    def updated(
        self,
        removed: Iterable[str] = (),
        added: Sequence[SearchDocument] = (),
        *,
        order: Sequence[str] | None = None,
        cache: EmbeddingCache | None = None,
    ) -> ToolIndex:
        """A new index without the documents keyed ``removed`` and with ``added``; this one is unchanged.

        The result ranks and scores exactly as ``ToolIndex.build`` over the same documents would (same
        embedder and weight), in the document order ``order`` (every key of the result) or, without
        it, this index's order minus the removed documents, then ``added``. A changed document is
        removed and added under its key. Only the added documents are tokenised and, for a hybrid
        index, embedded (through ``cache`` when given); BM25's statistics are adjusted for the changed
        documents alone. Raises :class:`ValueError` for a key that is not here to remove, a duplicate
        key, an ``order`` that does not list exactly the result's keys, or an index from bytes.
        """
        docs = self._docs
        if docs is None:
            raise ValueError("an index loaded from bytes cannot be updated; build it from documents")
        slot_of = dict(self._slot_of)
        removed_slots: list[int] = []
        for key in dict.fromkeys(removed):
            slot = slot_of.pop(key, None)
            if slot is None:
                raise ValueError(f"no search document {key!r} to remove")
            removed_slots.append(slot)
        _check_unique([doc.key for doc in added])
        clash = [doc.key for doc in added if doc.key in slot_of]
        if clash:
            raise ValueError(f"duplicate search document keys: {', '.join(map(repr, clash[:5]))}")
        new_docs = list(docs)
        keys = list(self._keys)
        families = list(self._families)
        for slot in removed_slots:
            new_docs[slot], keys[slot], families[slot] = None, "", ""
        free = iter([slot for slot, doc in enumerate(new_docs) if doc is None])
        placed: dict[int, SearchDocument] = {}
        for doc in added:
            slot = next(free, len(new_docs))
            if slot == len(new_docs):
                new_docs.append(None)
                keys.append("")
                families.append("")
            new_docs[slot], keys[slot], families[slot] = doc, doc.key, _family(doc)
            slot_of[doc.key] = slot
            placed[slot] = doc
        fields = {slot: _fields(doc) for slot, doc in placed.items()}
        bm25 = self._bm25.updated(removed_slots, fields)
        exact = self._exact_updated({s: docs[s] for s in removed_slots}, placed)
        vocabulary = self._vocabulary_updated(bm25, removed_slots, fields.values())
        positions = self._positions_updated(slot_of, placed, len(new_docs), order)
        semantic = self._semantic
        if semantic is not None:
            free_slots = [slot for slot, doc in enumerate(new_docs) if doc is None]
            texts = dict(zip(placed, semantic.texts(_capped(doc) for doc in placed.values()), strict=True))
            semantic = semantic.updated(len(new_docs), free_slots, texts, cache)
        return ToolIndex(
            tuple(keys),
            bm25,
            exact,
            vocabulary,
            semantic,
            self._semantic_weight,
            tuple(new_docs),
            positions,
            tuple(families),
        )

    def updated_to(
        self, documents: Sequence[SearchDocument], *, cache: EmbeddingCache | None = None
    ) -> ToolIndex:
        """:meth:`updated` to exactly ``documents`` (in their order): what differs is removed or added.

        A document counts as unchanged when it is the same object or an equal one, so a caller that
        keeps its :class:`SearchDocument` objects between catalogs pays only for the ones that changed.
        """
        docs = self._docs
        if docs is None:
            raise ValueError("an index loaded from bytes cannot be updated; build it from documents")
        keys = [doc.key for doc in documents]
        _check_unique(keys)
        removed: list[str] = []
        wanted = dict(zip(keys, documents, strict=True))
        for key, slot in self._slot_of.items():
            new = wanted.get(key)
            old = docs[slot]
            if new is None or (new is not old and new != old):
                removed.append(key)
        kept = self._slot_of.keys() - set(removed)
        added = [doc for doc in documents if doc.key not in kept]
        return self.updated(removed, added, order=keys, cache=cache)

    def _exact_updated(
        self, removed: dict[int, SearchDocument | None], added: dict[int, SearchDocument]
    ) -> dict[str, tuple[int, ...]]:
        exact = dict(self._exact)
        for slot, doc in removed.items():
            assert doc is not None
            for form in _forms(doc):
                left = tuple(s for s in exact.get(form, ()) if s != slot)
                if left:
                    exact[form] = left
                else:
                    exact.pop(form, None)
        for slot, doc in added.items():
            for form in _forms(doc):
                exact[form] = (*exact.get(form, ()), slot)
        return exact

    def _vocabulary_updated(
        self, bm25: BM25FIndex, removed_slots: Iterable[int], added: Iterable[list[list[str]]]
    ) -> tuple[str, ...]:
        """The sorted vocabulary, edited for the terms that vanished or appeared (a sort of one run)."""
        old = self._bm25
        vanished = {t for slot in removed_slots for t in old.doc_terms(slot) if not bm25.has_term(t)}
        appeared = {t for fields in added for field in fields for t in field if not old.has_term(t)}
        if not vanished and not appeared:
            return self._vocabulary
        return tuple(sorted([t for t in self._vocabulary if t not in vanished] + list(appeared)))

    def _positions_updated(
        self,
        slot_of: dict[str, int],
        added: dict[int, SearchDocument],
        capacity: int,
        order: Sequence[str] | None,
    ) -> tuple[int, ...] | None:
        positions = [0] * capacity
        if order is not None:
            if len(order) != len(slot_of) or len(set(order)) != len(order):
                raise ValueError("order must list every key of the updated index once")
            for i, key in enumerate(order):
                slot = slot_of.get(key)
                if slot is None:
                    raise ValueError(f"order lists {key!r}, which is not in the updated index")
                positions[slot] = i
        else:
            old = self._positions
            added_slots = set(added)
            for slot in slot_of.values():
                if slot not in added_slots:
                    positions[slot] = old[slot] if old is not None else slot
            after = max((positions[s] for s in slot_of.values() if s not in added_slots), default=-1) + 1
            for i, slot in enumerate(added):
                positions[slot] = after + i
        if len(slot_of) == capacity and all(p == s for s, p in enumerate(positions)):
            return None
        return tuple(positions)

    def __len__(self) -> int:
        return len(self._slot_of)

    def to_bytes(self) -> bytes:
        """The index as bytes for :meth:`from_bytes` (a cache file; not for untrusted storage).

        Loading it is far cheaper than tokenising a catalog again. A hybrid index also stores its
        vectors (float32, one row per document) and its model's id and fusion weight, so loading it
        embeds nothing: only queries are embedded then.
        """
        if self._positions is None and len(self._slot_of) == len(self._keys):
            order = None
            keys, state, exact = self._keys, self._bm25.packed_state(), self._exact
            families = self._families
        else:
            order = self._order()  # free slots or another order: numbered afresh, in document order
            renumber = {slot: i for i, slot in enumerate(order)}
            keys = tuple(self._keys[slot] for slot in order)
            families = tuple(self._families[slot] for slot in order)
            state = self._bm25.packed_state(order)
            exact = {form: tuple(sorted(renumber[s] for s in slots)) for form, slots in self._exact.items()}
        vectors = None
        raw = b""
        if self._semantic is not None:
            vectors, raw = self._semantic.stored(self._semantic_weight, order)
        # The matrix follows the marshalled part, whose length comes first: loading reads it in place.
        head = marshal.dumps((_FORMAT, keys, state, exact, self._vocabulary, vectors, families))
        return len(head).to_bytes(_HEAD_BYTES, "little") + head + raw

    @classmethod
    def from_bytes(cls, data: bytes | memoryview, embedder: Embedder | None = None) -> ToolIndex:
        """The index :meth:`to_bytes` wrote; :class:`ValueError` if ``data`` is not one (of this version).

        A hybrid index needs ``embedder``, the model its vectors came from (same ``model_id``), to
        embed queries; without it, or with another model, it is refused (:class:`ValueError`). Its
        vectors are read in place: the index keeps ``data`` alive.

        Loading checks the structure but unpacks no term, so damage inside one (a document beyond
        the index) raises :class:`ValueError` when a query reads it. Bytes from a file are better
        sealed with a digest (the search cache hashes its entries), which catches damage up front.
        """
        view = memoryview(data)
        size = int.from_bytes(view[:_HEAD_BYTES], "little")
        try:
            if len(view) < _HEAD_BYTES + size:
                raise ValueError("truncated")
            # Plain tuples, dicts, strs and floats; callers read only files this user wrote.
            loaded = marshal.loads(view[_HEAD_BYTES : _HEAD_BYTES + size])  # noqa: S302
            form, keys, state, exact, vocabulary, vectors, families = loaded
        except (EOFError, TypeError, ValueError, SystemError) as exc:  # marshal's errors for bad data
            raise ValueError(f"not a serialised tool index: {exc}") from exc
        if form != _FORMAT or not isinstance(keys, tuple) or not isinstance(exact, dict):
            raise ValueError("not a serialised tool index of this version")
        if (
            not isinstance(families, tuple)
            or len(families) != len(keys)  # pyright: ignore[reportUnknownArgumentType]
            or not all(type(family) is str for family in families)  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
        ):
            raise ValueError("inconsistent tool index: tool names")
        bm25 = BM25FIndex.from_packed(state)  # pyright: ignore[reportUnknownArgumentType]
        if len(bm25) != len(keys):  # pyright: ignore[reportUnknownArgumentType]
            raise ValueError("inconsistent tool index")
        raw = view[_HEAD_BYTES + size :]
        if vectors is None:
            if raw:
                raise ValueError("inconsistent tool index: bytes after it")
            return cls(keys, bm25, exact, vocabulary, families=families)  # pyright: ignore[reportUnknownArgumentType]
        from codemode.search._semantic import SemanticIndex

        semantic, weight = SemanticIndex.from_stored(vectors, raw, len(keys), embedder)  # pyright: ignore[reportUnknownArgumentType]
        return cls(keys, bm25, exact, vocabulary, semantic, weight, families=families)  # pyright: ignore[reportUnknownArgumentType]

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
        """The ``k`` best tools for ``query``, best first; ``[]`` if ``k <= 0`` or no query word is known.

        A tool whose name (ignoring case and punctuation) an earlier result already has loses
        ``_DUPLICATE_PENALTY`` of the best score: copies of one tool on many servers still show, in
        their order, but a tool of another name that scores nearly as well comes before them.
        """
        if k <= 0 or not self._slot_of:
            return []
        query = query[:MAX_QUERY_CHARS]
        scores = self._bm25.score(self._query_groups(tokenize(query)), _COVERAGE_EXPONENT)
        exact = self._exact.get(_squash(query))
        if exact and not all(type(i) is int and 0 <= i < len(self._keys) for i in exact):
            # Loaded bytes are checked where cheap and the rest when read (see from_bytes).
            raise ValueError("inconsistent tool index: an exact name lists a document beyond it")
        semantic = self._semantic
        if semantic is not None and (scores or exact or _NON_ALNUM.sub("", query)):
            # Fused scores lie in [-1, 1] before the boost, so +2 puts an exact name first.
            boost = dict.fromkeys(exact or (), 2.0)
            weight, positions = self._semantic_weight, self._positions
            ranked = self._diversified(lambda n: semantic.fuse(query, scores, boost, weight, n, positions), k)
            return [SearchHit(self._keys[i], score) for i, score in ranked]
        if exact:
            bonus = max(scores.values(), default=0.0) + 1.0
            for i in exact:
                scores[i] = scores.get(i, 0.0) + bonus
        if not scores:
            return []
        return [
            SearchHit(self._keys[i], score)
            for i, score in self._diversified(lambda n: self._best(scores, n), k)
        ]

    def _best(self, scores: dict[int, float], k: int) -> list[tuple[int, float]]:
        """The ``k`` best of ``scores`` (slot -> score), best first; ties in document order."""
        positions = self._positions
        if positions is None:
            # nlargest is stable and ``scores`` iterates in slot (= document) order: ties keep that order.
            best = heapq.nlargest(k, scores, key=scores.__getitem__)
        else:
            # Whatever scores at least the k-th best (ties included), then ordered by score and position.
            kth = heapq.nlargest(k, scores.values())[-1]
            candidates = [i for i, score in scores.items() if score >= kth]
            best = sorted(candidates, key=lambda i: (-scores[i], positions[i]))[:k]
        return [(i, scores[i]) for i in best]

    def _diversified(
        self, ranked: Callable[[int], list[tuple[int, float]]], k: int
    ) -> list[tuple[int, float]]:
        """The ``k`` best once each result pays for an earlier result of its name (see :meth:`search`).

        ``ranked(n)`` gives the ``n`` best ``(slot, score)`` before the penalty. A penalty only lowers
        scores, so once the ``k``-th best penalised score reaches the last score fetched, nothing
        beyond can overtake: more is fetched only until then (ties keep the unpenalised order).
        """
        families = self._families
        n = 4 * k + 16  # enough for nearly every query on the benchmark at 3,529 tools
        while True:
            fetched = ranked(n)
            if not fetched:
                return []
            step = _DUPLICATE_PENALTY * abs(fetched[0][1])
            seen: set[str] = set()
            rescored: list[tuple[float, int, int]] = []
            for place, (i, score) in enumerate(fetched):
                family = families[i]
                rescored.append((score - step if family in seen else score, place, i))
                if family:
                    seen.add(family)
            rescored.sort(key=lambda t: (-t[0], t[1]))
            best = rescored[:k]
            if len(fetched) < n or (len(best) == k and fetched[-1][1] <= best[-1][0]):
                return [(i, score) for score, _, i in best]
            n *= 4
