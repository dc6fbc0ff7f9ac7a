"""A cached index stores BM25 postings packed as bytes and result rows as plain tuples, unpacked only
for what a query reads: it must score exactly as the index it was written from, and refuse damage."""

from __future__ import annotations

import marshal
import random
from pathlib import Path

import pytest

from codemode.search import SearchDocument, ToolIndex
from codemode.search._bm25 import BM25FIndex, FieldSpec
from codemode.search._catalog_cache import CachedRow, CachedSearch

DOCS = [
    SearchDocument(f"srv{i % 7}/tool_{i}", f"srv{i % 7}", f"tool_{i}", None, text, (("id", "The id."),))
    for i, text in enumerate(
        [
            "Fetch one customer by id.",
            "Delete a customer permanently.",
            "Send an email to a customer.",
            "Book a flight to a city.",
            "Close a GitHub issue.",
            "List open tickets, newest first.",
            "Get the weather forecast for a city.",
        ]
        * 6
    )
]
QUERIES = ("customer", "book a flight", "close issue", "weather in paris", "tool_3", "nothing here", "tick")


def test_a_loaded_index_scores_exactly_as_the_built_one() -> None:
    built = ToolIndex.build(DOCS)
    loaded = ToolIndex.from_bytes(built.to_bytes())
    for query in QUERIES:
        assert loaded.search(query, 10) == built.search(query, 10), query
    assert loaded.to_bytes() == built.to_bytes()  # what it unpacks is what was packed


def test_packed_postings_round_trip_and_refuse_damage() -> None:
    fields = [FieldSpec(weight=2.0, b=0.3), FieldSpec(weight=1.0, b=0.75)]
    index = BM25FIndex.build([[["a", "b"], ["b"]], [["b", "c"], []], [["a"], ["a"]]], fields)
    n_docs, packed = index.packed_state()
    loaded = BM25FIndex.from_packed((n_docs, packed))
    assert loaded.state() == index.state()
    assert sorted(loaded.terms()) == ["a", "b", "c"] and loaded.has_term("c") and not loaded.has_term("d")
    for damaged in (
        {**packed, "b": packed["b"][:-1]},  # not whole postings
        {**packed, "a": b""},  # no posting at all
        {**packed, "c": (7).to_bytes(4, "little") + packed["c"][4:]},  # a document that is not there
    ):
        with pytest.raises(ValueError, match="inconsistent"):
            BM25FIndex.from_packed((n_docs, damaged))
    with pytest.raises(ValueError, match="inconsistent"):
        BM25FIndex.from_packed(("two", packed))  # pyright: ignore[reportArgumentType]


def test_an_entry_makes_rows_only_for_results_and_refuses_damaged_rows() -> None:
    index = ToolIndex.build(DOCS)
    rows = {d.key: CachedRow(d.server, d.name, d.key, d.key + ".py", "import x", d.description) for d in DOCS}
    entry = CachedSearch(index, rows)
    loaded = CachedSearch.from_bytes(entry.to_bytes())
    assert loaded.rows == rows
    for query in QUERIES:
        assert loaded.search(query, 5) == entry.search(query, 5)
    data = entry.to_bytes()
    size = int.from_bytes(data[:8], "little")
    form, table = marshal.loads(data[8 : 8 + size])
    table[DOCS[0].key] = ("too", "short")
    head = marshal.dumps((form, table))
    with pytest.raises(ValueError, match="damaged rows"):
        CachedSearch.from_bytes(len(head).to_bytes(8, "little") + head + data[8 + size :])
    with pytest.raises(ValueError, match="bytes after it"):
        CachedSearch.from_bytes(data + b"\x00")


def test_any_damage_to_an_entry_file_is_refused_on_load_never_a_crash(tmp_path: Path) -> None:
    entry = CachedSearch(
        ToolIndex.build(DOCS), {d.key: CachedRow(d.server, d.name, d.key, "p", "i", "s") for d in DOCS}
    )
    entry.save("k", tmp_path)
    data = (tmp_path / "k.bin").read_bytes()
    assert CachedSearch.load("k", tmp_path) is not None
    rng = random.Random(7)
    for _ in range(300):
        at = rng.randrange(len(data))
        damaged = rng.choice(
            [
                data[:at] + bytes([data[at] ^ (1 << rng.randrange(8))]) + data[at + 1 :],  # one bit
                data[:at],  # truncated
                data[:at] + bytes(rng.randrange(256) for _ in range(8)) + data[at + 8 :],  # overwritten
            ]
        )
        (tmp_path / "k.bin").write_bytes(damaged)
        assert CachedSearch.load("k", tmp_path) is None


def test_an_index_with_a_damaged_posting_refuses_the_query_that_reads_it() -> None:
    built = ToolIndex.build(DOCS)
    data = built.to_bytes()
    size = int.from_bytes(data[:8], "little")
    loaded = marshal.loads(data[8 : 8 + size])
    n_docs, packed = loaded[2]
    blob = packed["customer"]
    n = len(blob) // 12
    assert n >= 3  # so the damaged document is neither the first nor the last, which loading checks
    packed["customer"] = blob[:4] + (999).to_bytes(4, "little") + blob[8:]
    head = marshal.dumps((*loaded[:2], (n_docs, packed), *loaded[3:]))
    damaged = ToolIndex.from_bytes(len(head).to_bytes(8, "little") + head + data[8 + size :])
    assert damaged.search("flight", 3) == built.search("flight", 3)  # other terms still answer
    with pytest.raises(ValueError, match="beyond the index"):
        damaged.search("customer", 3)
