"""Field-weighted BM25 (BM25F) over pre-tokenised documents, with inverted postings.

For a term ``t`` and document ``d`` the field-weighted, length-normalised term frequency is::

    tf~(t, d) = sum over fields f of  w_f * min(tf_f(t, d), tf_cap) / (1 - b_f + b_f * len_f(d) / avglen_f)

and a query term's contribution to the document is ``q_t * idf(t) * tf~ * (k1 + 1) / (k1 + tf~)`` with
``idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5))``. Everything but ``q_t`` is known at build time, so each
posting stores its finished contribution and a query is a few additions per matching posting. The sum
is then scaled by how many of the query's words the document matched (see :meth:`BM25FIndex.score`).

``tf_cap`` bounds how often one field may repeat a term; together with length normalisation it keeps a
keyword-stuffed description from outranking a tool whose name matches.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["BM25FIndex", "FieldSpec"]


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """How one field counts: its weight and its length-normalisation strength ``b`` (0 = none, 1 = full)."""

    weight: float
    b: float


_Postings = tuple[tuple[int, ...], tuple[float, ...]]


class BM25FIndex:
    """Inverted index of finished BM25F contributions: ``term -> ((doc, ...), (contribution, ...))``.

    Document numbers in a posting list are ascending.
    """

    __slots__ = ("_n_docs", "_postings")

    def __init__(self, n_docs: int, postings: dict[str, _Postings]) -> None:
        self._n_docs = n_docs
        self._postings = postings

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
        n = len(docs)
        n_fields = len(fields)
        weights = [spec.weight for spec in fields]
        bs = [spec.b for spec in fields]
        avg = [0.0] * n_fields
        for doc in docs:
            for f in range(n_fields):
                avg[f] += len(doc[f])
        avg = [total / n if n and total else 1.0 for total in avg]

        # term -> ascending document numbers, and the matching weighted term frequencies
        term_docs: dict[str, list[int]] = {}
        term_tfs: dict[str, list[float]] = {}
        for d, doc in enumerate(docs):
            weighted: dict[str, float] = {}
            wget = weighted.get
            for f in range(n_fields):
                tokens = doc[f]
                if not tokens:
                    continue
                norm = weights[f] / (1.0 - bs[f] + bs[f] * len(tokens) / avg[f])
                if len(tokens) <= tf_cap:  # no term can exceed the cap
                    for term in tokens:
                        weighted[term] = wget(term, 0.0) + norm
                else:
                    for term, count in Counter(tokens).items():
                        weighted[term] = wget(term, 0.0) + norm * (count if count < tf_cap else tf_cap)
            for term, tf in weighted.items():
                dlist = term_docs.get(term)
                if dlist is None:
                    term_docs[term] = [d]
                    term_tfs[term] = [tf]
                else:
                    dlist.append(d)
                    term_tfs[term].append(tf)

        postings: dict[str, _Postings] = {}
        scale = k1 + 1.0
        for term, dlist in term_docs.items():
            df = len(dlist)
            idf = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
            postings[term] = (tuple(dlist), tuple([idf * scale * tf / (k1 + tf) for tf in term_tfs[term]]))
        return cls(n, postings)

    def __len__(self) -> int:
        return self._n_docs

    def state(self) -> tuple[int, dict[str, _Postings]]:
        """Everything the index holds, as plain tuples and dicts (see :meth:`from_state`)."""
        return self._n_docs, self._postings

    @classmethod
    def from_state(cls, state: tuple[int, dict[str, _Postings]]) -> BM25FIndex:
        n_docs, postings = state
        for docs, values in postings.values():
            if len(docs) != len(values) or any(not 0 <= d < n_docs for d in docs[:1] + docs[-1:]):
                raise ValueError("inconsistent BM25 postings")
        return cls(n_docs, postings)

    def has_term(self, term: str) -> bool:
        return term in self._postings

    def terms(self) -> list[str]:
        return list(self._postings)

    def score(
        self, groups: Sequence[Mapping[str, float]], coverage_exponent: float = 1.0
    ) -> dict[int, float]:
        """Score every document that matches a query given as one ``{term: weight}`` group per query word.

        A group holds the word's own term and its expansions (synonyms, completions). A document's score is
        the weighted sum of its postings times ``(groups it matches / all groups) ** coverage_exponent``,
        so that a tool matching most of what was asked beats one that matches a single word very well.
        The result lists matching documents in ascending document order.
        """
        n_docs = self._n_docs
        acc = [0.0] * n_docs
        cover = [0] * n_docs
        touched: set[int] = set()
        for group in groups:
            matched: set[int] = set()
            for term, weight in group.items():
                plist = self._postings.get(term)
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
