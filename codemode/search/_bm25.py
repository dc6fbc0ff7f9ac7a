"""Field-weighted BM25 (BM25F) over pre-tokenised documents, with inverted postings.

For a term ``t`` and document ``d`` the field-weighted, length-normalised term frequency is::

    tf~(t, d) = sum over fields f of  w_f * min(tf_f(t, d), tf_cap) / (1 - b_f + b_f * len_f(d) / avglen_f)

and a query term's contribution to the document is ``q_t * idf(t) * tf~ * (k1 + 1) / (k1 + tf~)`` with
``idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5))``. Everything but ``q_t`` is known at build time, so each
posting stores its finished contribution and a query is a few additions per matching posting. The sum
is then scaled by how many of the query's words the document matched (see :meth:`BM25FIndex.score`).

``tf_cap`` bounds how often one field may repeat a term; together with length normalisation it keeps a
keyword-stuffed description from outranking a tool whose name matches.

Updates. ``N``, ``df`` and the average lengths change with any added or removed document, and with
them every finished contribution. So the index also keeps the raw counts behind them (per document:
each term's capped count per field, and the field lengths). :meth:`BM25FIndex.updated` adjusts those
for the changed documents only, without tokenising anything else, and finishes a term's postings the
first time a query reads it. Build and update finish with the same arithmetic, so an updated index
scores exactly as one built from scratch. Documents live in *slots*: a removed document leaves a free
slot that a later addition takes, so no other document is renumbered.
"""

from __future__ import annotations

import math
import sys
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["BM25FIndex", "FieldSpec"]


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """How one field counts: its weight and its length-normalisation strength ``b`` (0 = none, 1 = full)."""

    weight: float
    b: float


_Postings = tuple[tuple[int, ...], tuple[float, ...]]
# Per term of one document: (field, capped count, field, capped count, ...), fields ascending.
_Counts = dict[str, tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class _Raw:
    """What an update needs: the statistics the finished contributions were computed from."""

    fields: tuple[FieldSpec, ...]
    k1: float
    tf_cap: int
    counts: tuple[_Counts | None, ...]
    """Per slot; None for a free slot."""
    lengths: tuple[tuple[int, ...], ...]
    """Per slot: tokens per field (zeros for a free slot)."""
    totals: tuple[int, ...]
    """Per field: tokens over all documents."""
    slots: dict[str, tuple[int, ...]]
    """Per term: the ascending slots of the documents that hold it."""


def _norms(raw: _Raw, n_docs: int) -> tuple[tuple[float, ...], ...]:
    """Per field, per slot: ``w_f / (1 - b_f + b_f * len_f(d) / avglen_f)``."""
    out: list[tuple[float, ...]] = []
    for f, spec in enumerate(raw.fields):
        total = raw.totals[f]
        avg = total / n_docs if n_docs and total else 1.0
        weight, b = spec.weight, spec.b
        out.append(tuple([weight / (1.0 - b + b * lengths[f] / avg) for lengths in raw.lengths]))
    return tuple(out)


def _count(
    doc: Sequence[Sequence[str]], tf_cap: int, intern: dict[tuple[int, ...], tuple[int, ...]]
) -> _Counts:
    """Each term's capped count per field; equal tuples are shared (most are ``(field, 1)``)."""
    counts: _Counts = {}
    get = counts.get
    for f, tokens in enumerate(doc):
        if not tokens:
            continue
        per_field: dict[str, int] = {}
        pget = per_field.get
        for term in tokens:
            per_field[term] = pget(term, 0) + 1
        for term, count in per_field.items():
            pair = (f, count if count < tf_cap else tf_cap)
            before = get(term)
            sig = pair if before is None else before + pair
            counts[term] = intern.setdefault(sig, sig)
    return counts


_DOC_BYTES = array("i").itemsize  # 4 on every platform CPython supports
_POSTING_BYTES = _DOC_BYTES + 8
_SWAP = sys.byteorder != "little"  # packed postings are little-endian wherever they were written


def _pack(docs: Sequence[int], values: Sequence[float]) -> bytes:
    doc_array, value_array = array("i", docs), array("d", values)
    if _SWAP:
        doc_array.byteswap()
        value_array.byteswap()
    return doc_array.tobytes() + value_array.tobytes()


def _unpack(blob: bytes, n_docs: int) -> _Postings:
    """The postings :func:`_pack` packed; :class:`ValueError` if a document is not below ``n_docs``
    (:meth:`BM25FIndex.from_packed` checks only each term's first and last, not to unpack them all)."""
    split = len(blob) // _POSTING_BYTES * _DOC_BYTES
    doc_array, value_array = array("i"), array("d")
    doc_array.frombytes(blob[:split])
    value_array.frombytes(blob[split:])
    if _SWAP:
        doc_array.byteswap()
        value_array.byteswap()
    if doc_array and not (min(doc_array) >= 0 and max(doc_array) < n_docs):
        raise ValueError("inconsistent BM25 postings: a document beyond the index")
    return tuple(doc_array), tuple(value_array)


class BM25FIndex:
    """Inverted index of finished BM25F contributions: ``term -> ((slot, ...), (contribution, ...))``.

    Slot numbers in a posting list are ascending. Immutable (a term's postings are finished at most
    once, to the same value by any thread), so it is safe to share between threads.
    """

    __slots__ = ("_capacity", "_n_docs", "_norms", "_packed", "_postings", "_raw")

    def __init__(
        self,
        n_docs: int,
        postings: dict[str, _Postings],
        raw: _Raw | None = None,
        capacity: int | None = None,
        norms: tuple[tuple[float, ...], ...] = (),
        packed: dict[str, bytes] | None = None,
    ) -> None:
        self._n_docs = n_docs
        self._capacity = n_docs if capacity is None else capacity
        self._postings = postings
        self._raw = raw
        self._norms = norms
        self._packed = packed
        """Per term, its postings as bytes (see :meth:`packed_state`), unpacked on first use."""

    @classmethod
    def build(
        cls,
        docs: Sequence[Sequence[Sequence[str]]],
        fields: Sequence[FieldSpec],
        *,
        k1: float = 1.2,
        tf_cap: int = 3,
    ) -> BM25FIndex:
        """Index ``docs``, where ``docs[d][f]`` holds the tokens of field ``f`` of document ``d``."""
        n_fields = len(fields)
        intern: dict[tuple[int, ...], tuple[int, ...]] = {}
        counts = tuple(_count(doc, tf_cap, intern) for doc in docs)
        lengths = tuple(tuple(len(doc[f]) for f in range(n_fields)) for doc in docs)
        totals = tuple(sum(row[f] for row in lengths) for f in range(n_fields))
        slots: dict[str, list[int]] = {}
        for d, doc_counts in enumerate(counts):
            for term in doc_counts:
                dlist = slots.get(term)
                if dlist is None:
                    slots[term] = [d]
                else:
                    dlist.append(d)
        raw = _Raw(
            tuple(fields), k1, tf_cap, counts, lengths, totals, {t: tuple(s) for t, s in slots.items()}
        )
        index = cls(len(docs), {}, raw, len(docs), _norms(raw, len(docs)))
        for term in raw.slots:
            index._finish(term)
        return index

    def updated(self, removed: Sequence[int], added: Mapping[int, Sequence[Sequence[str]]]) -> BM25FIndex:
        """A new index without the documents in slots ``removed`` and with ``added`` (slot -> fields).

        An added slot must be free (or removed in this update); slots beyond the last one extend the
        index, and any gap between becomes free slots. Only the changed documents are counted; the
        postings of every term are finished again, lazily, because ``N`` and the average lengths moved.
        """
        raw = self._raw
        if raw is None:
            raise ValueError("this index was loaded without its statistics and cannot be updated")
        counts = list(raw.counts)
        lengths = list(raw.lengths)
        totals = list(raw.totals)
        zero = (0,) * len(totals)
        changed: dict[str, set[int]] = {}  # term -> slots that leave it (removals)
        joined: dict[str, list[int]] = {}  # term -> slots that join it (additions)
        n_docs = self._n_docs
        for slot in dict.fromkeys(removed):
            doc_counts = counts[slot] if 0 <= slot < len(counts) else None
            if doc_counts is None:
                raise ValueError(f"slot {slot} holds no document")
            for term in doc_counts:
                changed.setdefault(term, set()).add(slot)
            totals = [t - x for t, x in zip(totals, lengths[slot], strict=True)]
            counts[slot], lengths[slot] = None, zero
            n_docs -= 1
        intern: dict[tuple[int, ...], tuple[int, ...]] = {}
        for slot, doc in added.items():
            if slot < 0:
                raise ValueError(f"slot {slot} is negative")
            if slot >= len(counts):
                grow = slot + 1 - len(counts)
                counts += [None] * grow
                lengths += [zero] * grow
            if counts[slot] is not None:
                raise ValueError(f"slot {slot} already holds a document")
            doc_counts = _count(doc, raw.tf_cap, intern)
            counts[slot] = doc_counts
            lengths[slot] = tuple(len(tokens) for tokens in doc)
            totals = [t + x for t, x in zip(totals, lengths[slot], strict=True)]
            for term in doc_counts:
                joined.setdefault(term, []).append(slot)
            n_docs += 1
        slots = dict(raw.slots)
        for term in changed.keys() | joined.keys():
            gone = changed.get(term, set())
            kept = [s for s in slots.get(term, ()) if s not in gone]
            new = sorted(kept + joined.get(term, [])) if term in joined else kept
            if new:
                slots[term] = tuple(new)
            else:
                slots.pop(term, None)
        new_raw = _Raw(raw.fields, raw.k1, raw.tf_cap, tuple(counts), tuple(lengths), tuple(totals), slots)
        return BM25FIndex(n_docs, {}, new_raw, len(counts), _norms(new_raw, n_docs))

    def _finish(self, term: str) -> _Postings | None:
        """The finished postings of ``term`` (computed from the raw counts, or unpacked, on first use)."""
        plist = self._postings.get(term)
        if plist is not None:
            return plist
        if self._packed is not None:
            blob = self._packed.get(term)
            if blob is None:
                return None
            plist = _unpack(blob, self._n_docs)
            self._postings[term] = plist  # the same value whichever thread gets here first
            return plist
        if self._raw is None:
            return None
        raw = self._raw
        dlist = raw.slots.get(term)
        if dlist is None:
            return None
        n, df, k1 = self._n_docs, len(dlist), raw.k1
        idf = math.log(1.0 + (n - df + 0.5) / (df + 0.5)) * (k1 + 1.0)
        norms, counts = self._norms, raw.counts
        values: list[float] = []
        for d in dlist:
            doc_counts = counts[d]
            assert doc_counts is not None  # a listed slot holds a document
            sig = doc_counts[term]
            tf = 0.0
            for i in range(0, len(sig), 2):
                tf += norms[sig[i]][d] * sig[i + 1]
            values.append(idf * tf / (k1 + tf))
        plist = (dlist, tuple(values))
        self._postings[term] = plist  # the same value whichever thread gets here first
        return plist

    def __len__(self) -> int:
        """The number of documents (free slots not counted)."""
        return self._n_docs

    @property
    def capacity(self) -> int:
        """One more than the highest slot number (free slots included)."""
        return self._capacity

    @property
    def updatable(self) -> bool:
        """Whether :meth:`updated` works (false for an index loaded with :meth:`from_state`)."""
        return self._raw is not None

    def state(self, order: Sequence[int] | None = None) -> tuple[int, dict[str, _Postings]]:
        """Everything the index holds, as plain tuples and dicts (see :meth:`from_state`).

        ``order`` lists every occupied slot; document ``order[i]`` becomes number ``i`` (needed when
        there are free slots, or when slot order is not document order).
        """
        postings = {term: plist for term in self.terms() if (plist := self._finish(term)) is not None}
        if order is None:
            if self._capacity != self._n_docs:
                raise ValueError("an index with free slots needs an order to be serialised")
            return self._n_docs, postings
        renumber = {slot: i for i, slot in enumerate(order)}
        out: dict[str, _Postings] = {}
        for term, (docs, values) in postings.items():
            pairs = sorted((renumber[d], v) for d, v in zip(docs, values, strict=True))
            out[term] = (tuple(d for d, _ in pairs), tuple(v for _, v in pairs))
        return len(order), out

    @classmethod
    def from_state(cls, state: tuple[int, dict[str, _Postings]]) -> BM25FIndex:
        n_docs, postings = state
        for docs, values in postings.values():
            if len(docs) != len(values) or any(not 0 <= d < n_docs for d in docs[:1] + docs[-1:]):
                raise ValueError("inconsistent BM25 postings")
        return cls(n_docs, postings)

    def packed_state(self, order: Sequence[int] | None = None) -> tuple[int, dict[str, bytes]]:
        """:meth:`state` with each term's postings packed into bytes: its documents (int32) then
        their contributions (float64), little-endian. :meth:`from_packed` reads it without building
        a tuple per posting: a query unpacks only the few terms it reads."""
        n_docs, postings = self.state(order)
        return n_docs, {term: _pack(docs, values) for term, (docs, values) in postings.items()}

    @classmethod
    def from_packed(cls, state: tuple[int, dict[str, bytes]]) -> BM25FIndex:
        """The index of :meth:`packed_state`; :class:`ValueError` if it is inconsistent (checked as
        :meth:`from_state` checks: lengths, and the first and last document of each term)."""
        try:
            n_docs, packed = state
        except (TypeError, ValueError) as exc:
            raise ValueError("inconsistent BM25 postings") from exc
        if not isinstance(n_docs, int) or not isinstance(packed, dict):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ValueError("inconsistent BM25 postings")
        for blob in packed.values():
            size = len(blob) if isinstance(blob, bytes) else 0  # pyright: ignore[reportUnnecessaryIsInstance]
            n = size // _POSTING_BYTES
            if not n or size % _POSTING_BYTES:
                raise ValueError("inconsistent BM25 postings")
            first = int.from_bytes(blob[:_DOC_BYTES], "little", signed=True)
            last = int.from_bytes(blob[(n - 1) * _DOC_BYTES : n * _DOC_BYTES], "little", signed=True)
            if not (0 <= first < n_docs and 0 <= last < n_docs):
                raise ValueError("inconsistent BM25 postings")
        return cls(n_docs, {}, packed=packed)

    def doc_terms(self, slot: int) -> list[str]:
        """The terms of the document in ``slot`` (empty for a free slot or an index without statistics)."""
        counts = self._raw.counts[slot] if self._raw is not None and 0 <= slot < self._capacity else None
        return list(counts or ())

    def has_term(self, term: str) -> bool:
        if self._raw is not None:
            return term in self._raw.slots
        if self._packed is not None:
            return term in self._packed
        return term in self._postings

    def terms(self) -> list[str]:
        if self._raw is not None:
            return list(self._raw.slots)
        if self._packed is not None:
            return list(self._packed)
        return list(self._postings)

    def score(
        self, groups: Sequence[Mapping[str, float]], coverage_exponent: float = 1.0
    ) -> dict[int, float]:
        """Score every document that matches a query given as one ``{term: weight}`` group per query word.

        A group holds the word's own term and its expansions (synonyms, completions). A document's score is
        the weighted sum of its postings times ``(groups it matches / all groups) ** coverage_exponent``,
        so that a tool matching most of what was asked beats one that matches a single word very well.
        The result lists matching documents in ascending slot order.
        """
        acc = [0.0] * self._capacity
        cover = [0] * self._capacity
        touched: set[int] = set()
        for group in groups:
            matched: set[int] = set()
            for term, weight in group.items():
                plist = self._finish(term)
                if plist is None:
                    continue
                docs, values = plist
                matched.update(docs)
                for d, value in zip(docs, values, strict=True):
                    acc[d] += weight * value
            for d in matched:
                cover[d] += 1
            touched |= matched
        if coverage_exponent and len(groups) > 1:
            n = float(len(groups))
            return {d: acc[d] * (cover[d] / n) ** coverage_exponent for d in sorted(touched)}
        return {d: acc[d] for d in sorted(touched)}
