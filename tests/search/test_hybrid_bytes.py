"""A hybrid index round-trips through bytes (vectors included) with the real bundled model.

What ``codemode search`` caches on disk: loading it embeds no tool, only the query, and it answers
exactly as the index it was saved from. Skipped without the ``semantic`` extra.
"""

from __future__ import annotations

import pytest

from codemode.search import (
    Embedder,
    EmbeddingCache,
    SearchDocument,
    ToolIndex,
    load_embedder,
    semantic_ranking,
    semantic_setting,
)
from codemode.search._catalog_cache import CachedRow, CachedSearch

DOCS = [
    SearchDocument("weather/now", "weather", "current_conditions", None, "Temperature and rain right now."),
    SearchDocument("files/read_file", "files", "read_file", None, "Read a file from disk."),
    SearchDocument("pay/refund", "pay", "refund_charge", None, "Give a customer their money back."),
    SearchDocument("jira/close", "jira", "transition_issue", None, "Move an issue to done."),
]
QUERIES = ("is it going to rain", "read_file", "give money back", "finish a ticket", "?!")


@pytest.fixture(scope="module")
def model() -> Embedder:
    embedder = load_embedder()
    if embedder is None:
        pytest.skip("the semantic extra (wordllama) is not installed")
    return embedder


class OtherModel:
    """Another model's identity, for the refusal test: its vectors are never computed."""

    def __init__(self, real: Embedder) -> None:
        self._real = real

    @property
    def model_id(self) -> str:
        return self._real.model_id + "-other"

    def embed(self, texts: list[str]) -> object:
        return self._real.embed(texts)


def _answers(index: ToolIndex) -> list[list[tuple[str, float]]]:
    return [[(hit.key, round(hit.score, 5)) for hit in index.search(q, k=3)] for q in QUERIES]


def test_a_hybrid_index_loads_from_bytes_and_ranks_the_same(model: Embedder) -> None:
    index = ToolIndex.build(DOCS, embedder=model, cache=EmbeddingCache())
    loaded = ToolIndex.from_bytes(index.to_bytes(), model)
    assert loaded.hybrid
    assert _answers(loaded) == _answers(index)


def test_an_updated_hybrid_index_serialises_in_document_order(model: Embedder) -> None:
    index = ToolIndex.build(DOCS, embedder=model).updated(["files/read_file"], [DOCS[1]])
    loaded = ToolIndex.from_bytes(index.to_bytes(), model)
    assert _answers(loaded) == _answers(ToolIndex.build([DOCS[0], DOCS[2], DOCS[3], DOCS[1]], embedder=model))


def test_a_hybrid_index_needs_its_own_model_to_load(model: Embedder) -> None:
    data = ToolIndex.build(DOCS, embedder=model).to_bytes()
    with pytest.raises(ValueError, match="needs that model"):
        ToolIndex.from_bytes(data)
    with pytest.raises(ValueError, match="needs that model"):
        ToolIndex.from_bytes(data, OtherModel(model))  # pyright: ignore[reportArgumentType]


@pytest.mark.parametrize("cut", [1, 100, 1000])
def test_truncated_bytes_are_refused_not_misread(model: Embedder, cut: int) -> None:
    index = ToolIndex.build(DOCS, embedder=model)
    rows = {d.key: CachedRow(d.server, d.name, d.key, d.key, d.key, d.key) for d in DOCS}
    data = CachedSearch(index, rows).to_bytes()
    with pytest.raises(ValueError):
        CachedSearch.from_bytes(data[:-cut], model)
    assert CachedSearch.from_bytes(data, model).ranker == "hybrid"


def test_the_setting_and_its_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CODEMODE_SEARCH_SEMANTIC", raising=False)
    assert [semantic_setting(c) for c in (None, "off", "on", "auto")] == ["off", "off", "on", "auto"]
    for value, expected in (("1", "on"), ("YES", "on"), (" auto ", "auto"), ("0", "off"), ("nope", "off")):
        monkeypatch.setenv("CODEMODE_SEARCH_SEMANTIC", value)
        assert semantic_setting("on") == expected


def test_the_ranking_loads_the_model_only_when_the_setting_in_force_asks(
    model: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CODEMODE_SEARCH_SEMANTIC", "off")
    assert semantic_ranking("on") == ("off", None)
    monkeypatch.setenv("CODEMODE_SEARCH_SEMANTIC", "auto")
    assert semantic_ranking("off") == ("auto", model)  # the process's one model
    monkeypatch.delenv("CODEMODE_SEARCH_SEMANTIC")
    assert semantic_ranking("on") == ("on", model)
    assert semantic_ranking(None) == ("off", None)
