"""ToolIndex.updated: an index updated for changed tools ranks exactly as one built from scratch.

The property tests drive random sequences of removals, additions and changes (BM25 alone, and fused
with a deterministic embedder) and compare every answer with a fresh :meth:`ToolIndex.build` over the
same documents in the same order: same keys in the same order, same scores.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codemode.search import SearchDocument, SearchHit, ToolIndex
from tests.search.toy_model import ToyModel

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

# Few words, so documents share terms (document frequencies move) and tie often (order matters).
WORDS = ("issue", "ticket", "create", "list", "delete", "customer", "invoice", "weather", "file", "read")
SERVERS = ("crm", "jira", "files")
NAMES = ("get_item", "list_items", "create_ticket", "read_file", "send_invoice", "forecast")
QUERIES = (
    *WORDS,
    "create an issue",
    "list customer invoices",
    "read file",
    "get_item",
    "crm/list_items",
    "forec",  # a prefix of an indexed term only
    "nothing matches this",
)


class HashEmbedder(ToyModel):
    """Deterministic unit vectors from word counts over :data:`WORDS` (plus a constant direction)."""

    def __init__(self) -> None:
        self.embedded: list[str] = []

    @property
    def model_id(self) -> str:
        return "test/words"

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        import numpy as np

        self.embedded.extend(texts)
        out = np.zeros((len(texts), len(WORDS) + 1), dtype=np.float32)
        for row, text in enumerate(texts):
            lowered = text.lower()
            for axis, word in enumerate(WORDS):
                out[row, axis] = lowered.count(word)
            out[row, -1] = 0.5
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def make(server: str, name: str, words: Sequence[str], params: Sequence[str] = ()) -> SearchDocument:
    return SearchDocument(
        key=f"{server}/{name}",
        server=server,
        name=name,
        title=None,
        description=" ".join(words),
        parameters=tuple((p, f"the {p}") for p in params),
    )


def assert_same_answers(updated: ToolIndex, fresh: ToolIndex, k: int = 50) -> None:
    """Same hits for every query, at every k: keys in order, scores within float tolerance.

    BM25 alone is computed with the same arithmetic either way, so ties must keep the same order.
    A hybrid index fuses in float32, where a vector product over a matrix of another shape may round
    differently in the last bit: scores agree to float32 precision, and near-equal ones may swap.
    """
    tolerance = 1e-6 if fresh.hybrid else 1e-9
    for query in QUERIES:
        for depth in (1, 3, k):
            got, want = updated.search(query, depth), fresh.search(query, depth)
            assert len(got) == len(want), query
            for a, b in zip(got, want, strict=True):
                assert a.score == pytest.approx(b.score, rel=tolerance, abs=tolerance), query
            if fresh.hybrid:
                if depth == k:
                    assert _tie_groups(got) == _tie_groups(want), query
            else:
                assert [h.key for h in got] == [h.key for h in want], query


def _tie_groups(hits: list[SearchHit]) -> list[frozenset[str]]:
    groups: list[set[str]] = []
    last: float | None = None
    for hit in hits:
        if last is None or abs(hit.score - last) > 1e-6:
            groups.append(set())
        groups[-1].add(hit.key)
        last = hit.score
    return [frozenset(g) for g in groups]


documents_st = st.builds(
    make,
    st.sampled_from(SERVERS),
    st.sampled_from(NAMES),
    st.lists(st.sampled_from(WORDS), max_size=8),
    st.lists(st.sampled_from(("id", "limit", "customer_id", "path")), max_size=2, unique=True),
)
# One step: how many current documents to remove and to change (taken from the front after a
# shuffle by ``pick``), the new documents to add, and whether to pass a new document order.
steps_st = st.lists(
    st.tuples(
        st.integers(0, 3),
        st.integers(0, 3),
        st.lists(documents_st, max_size=4),
        st.randoms(use_true_random=False),
        st.booleans(),
    ),
    min_size=1,
    max_size=6,
)


Step = tuple[int, int, list[SearchDocument], random.Random, bool]


def run_steps(start: list[SearchDocument], steps: list[Step], embedder: HashEmbedder | None = None) -> None:
    current = {doc.key: doc for doc in start}
    index = ToolIndex.build(list(current.values()), embedder=embedder, semantic_weight=0.5)
    for n_remove, n_change, new_docs, rnd, reorder in steps:
        keys = list(current)
        rnd.shuffle(keys)
        removed = keys[:n_remove]
        changed = keys[n_remove : n_remove + n_change]
        for key in removed:
            del current[key]
        added: list[SearchDocument] = []
        for key in changed:
            doc = current.pop(key)
            added.append(dataclasses.replace(doc, description=doc.description + " customer ticket"))
        for doc in new_docs:
            if doc.key not in current and all(doc.key != a.key for a in added):
                added.append(doc)
        for doc in added:
            current[doc.key] = doc
        order = None
        if reorder:
            order = list(current)
            rnd.shuffle(order)
            current = {key: current[key] for key in order}
        index = index.updated([*removed, *changed], added, order=order)
        assert len(index) == len(current)
        assert [d.key for d in index.documents()] == list(current)
        fresh = ToolIndex.build(list(current.values()), embedder=embedder, semantic_weight=0.5)
        assert_same_answers(index, fresh)


def _unique(docs: list[SearchDocument]) -> list[SearchDocument]:
    return list({doc.key: doc for doc in docs}.values())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(start=st.lists(documents_st, max_size=10).map(_unique), steps=steps_st)
def test_bm25_updates_rank_as_a_fresh_build(start: list[SearchDocument], steps: list[Step]) -> None:
    run_steps(start, steps)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(start=st.lists(documents_st, max_size=10).map(_unique), steps=steps_st)
def test_hybrid_updates_rank_as_a_fresh_build(start: list[SearchDocument], steps: list[Step]) -> None:
    pytest.importorskip("numpy")
    run_steps(start, steps, HashEmbedder())


CATALOG = [
    make("crm", "get_item", ["customer", "read"], ["customer_id"]),
    make("crm", "list_items", ["list", "customer"]),
    make("jira", "create_ticket", ["create", "issue", "ticket"]),
    make("files", "read_file", ["read", "file"], ["path"]),
]


def test_updated_leaves_the_original_index_as_it_was() -> None:
    index = ToolIndex.build(CATALOG)
    before = index.search("read customer", 10)
    index.updated(["crm/get_item"], [make("crm", "get_item", ["weather"])])
    assert index.search("read customer", 10) == before
    assert len(index) == 4


def test_updated_to_reuses_equal_documents_and_embeds_only_new_ones() -> None:
    pytest.importorskip("numpy")
    embedder = HashEmbedder()
    index = ToolIndex.build(CATALOG, embedder=embedder)
    embedder.embedded.clear()
    changed = make("jira", "create_ticket", ["create", "issue", "ticket", "invoice"])
    new = make("billing", "send_invoice", ["invoice"])
    target = [CATALOG[0], changed, *[dataclasses.replace(d) for d in CATALOG[1:2]], new]
    updated = index.updated_to(target)
    assert len(embedder.embedded) == 2, "only the changed and the new tool are embedded"
    assert [d.key for d in updated.documents()] == [d.key for d in target]
    assert_same_answers(updated, ToolIndex.build(target, embedder=HashEmbedder()))


def test_an_update_is_refused_for_unknown_or_duplicate_keys_and_bad_orders() -> None:
    index = ToolIndex.build(CATALOG)
    with pytest.raises(ValueError, match="no search document 'crm/nope'"):
        index.updated(["crm/nope"], [])
    with pytest.raises(ValueError, match="duplicate"):
        index.updated([], [CATALOG[0]])
    with pytest.raises(ValueError, match="duplicate"):
        index.updated([], [make("a", "b", []), make("a", "b", ["file"])])
    with pytest.raises(ValueError, match="order"):
        index.updated([], [], order=["crm/get_item"])
    with pytest.raises(ValueError, match="order"):
        index.updated(["crm/get_item"], [], order=[d.key for d in CATALOG])


def test_a_removed_and_re_added_key_is_a_changed_document() -> None:
    index = ToolIndex.build(CATALOG)
    changed = make("files", "read_file", ["weather", "forecast"])
    updated = index.updated(["files/read_file"], [changed])
    assert [h.key for h in updated.search("weather")] == ["files/read_file"]
    assert updated.search("path") == []


def test_an_updated_index_serialises_like_a_fresh_one() -> None:
    index = ToolIndex.build(CATALOG).updated(
        ["crm/get_item", "jira/create_ticket"],
        [make("mail", "send", ["invoice", "customer"])],
        order=["mail/send", "files/read_file", "crm/list_items"],
    )
    fresh = ToolIndex.build([make("mail", "send", ["invoice", "customer"]), CATALOG[3], CATALOG[1]])
    loaded = ToolIndex.from_bytes(index.to_bytes())
    assert_same_answers(loaded, fresh)
    assert not loaded.updatable
    with pytest.raises(ValueError, match="cannot be updated"):
        loaded.updated([], [])


def test_an_index_can_be_emptied_and_filled_again() -> None:
    index = ToolIndex.build(CATALOG).updated([d.key for d in CATALOG], [])
    assert len(index) == 0
    assert index.search("read") == []
    refilled = index.updated([], CATALOG[::-1])
    assert_same_answers(refilled, ToolIndex.build(CATALOG[::-1]))
