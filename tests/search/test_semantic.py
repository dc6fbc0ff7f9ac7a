"""The optional semantic signal: fusion with BM25, the embedding cache, and life without the extra.

Fusion and caching are tested with a tiny deterministic embedder (numpy only), so they run whether or
not the ``semantic`` extra is installed; the tests of the bundled model skip when it is missing.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from codemode.search import EmbeddingCache, SearchDocument, ToolIndex, load_embedder
from codemode.search._ranking import load_model
from codemode.search._wordllama import StaticEmbedder
from tests.search.toy_model import ToyModel

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

np_ = pytest.importorskip("numpy")

# Each concept is one axis; a text's vector is the normalised count of the concept words it holds.
_CONCEPTS = (
    ("money", "payment", "pay", "invoice", "refund", "charge"),
    ("weather", "temperature", "umbrella", "rain"),
    ("ticket", "issue", "bug"),
)


class ConceptEmbedder(ToyModel):
    def __init__(self) -> None:
        self.embedded: list[str] = []

    @property
    def model_id(self) -> str:
        return "test/concepts"

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        self.embedded.extend(texts)
        out = np_.zeros((len(texts), len(_CONCEPTS) + 1), dtype=np_.float32)
        for row, text in enumerate(texts):
            words = text.lower().replace(".", " ").split()
            for axis, concept in enumerate(_CONCEPTS):
                out[row, axis] = sum(word in concept for word in words)
            out[row, -1] = 0.1  # every text has some direction, so no vector is zero
        return out / np_.linalg.norm(out, axis=1, keepdims=True)


DOCS = (
    SearchDocument("billing/create_invoice", "billing", "create_invoice", None, "Create an invoice."),
    SearchDocument("forecast/now", "forecast", "now", None, "Temperature and rain for a city."),
    SearchDocument("tracker/open_ticket", "tracker", "open_ticket", None, "Open a bug ticket."),
    SearchDocument("files/read_file", "files", "read_file", None, "Read a file from disk."),
)


@pytest.fixture
def embedder() -> ConceptEmbedder:
    return ConceptEmbedder()


def test_the_semantic_signal_finds_a_tool_that_shares_no_word_with_the_query(
    embedder: ConceptEmbedder,
) -> None:
    query = "do I need an umbrella"
    assert [h.key for h in ToolIndex.build(DOCS).search(query)] == []
    hybrid = ToolIndex.build(DOCS, embedder=embedder, semantic_weight=0.6)
    assert hybrid.hybrid
    assert hybrid.search(query, k=1)[0].key == "forecast/now"


def test_a_strong_bm25_match_still_wins_over_a_semantic_neighbour(embedder: ConceptEmbedder) -> None:
    hybrid = ToolIndex.build(DOCS, embedder=embedder, semantic_weight=0.3)
    assert hybrid.search("read a file", k=1)[0].key == "files/read_file"


def test_an_exact_tool_name_ranks_first_in_hybrid_mode(embedder: ConceptEmbedder) -> None:
    hybrid = ToolIndex.build(DOCS, embedder=embedder, semantic_weight=0.9)
    assert hybrid.search("read_file", k=1)[0].key == "files/read_file"


def test_a_query_without_letters_or_digits_finds_nothing_in_hybrid_mode(embedder: ConceptEmbedder) -> None:
    hybrid = ToolIndex.build(DOCS, embedder=embedder)
    assert hybrid.search("  ?! ") == []
    assert hybrid.search("refund", k=0) == []


def test_hybrid_results_are_deterministic_and_bounded_by_k(embedder: ConceptEmbedder) -> None:
    first = ToolIndex.build(DOCS, embedder=embedder).search("pay the bill", k=3)
    second = ToolIndex.build(DOCS, embedder=ConceptEmbedder()).search("pay the bill", k=3)
    assert first == second
    assert len(first) == 3


def test_hybrid_ranking_makes_room_next_to_copies_of_one_tool(embedder: ConceptEmbedder) -> None:
    copies = [
        SearchDocument(f"s{i:02}/now", "s", "now", None, "Temperature and rain for a city.")
        for i in range(40)
    ]
    other = SearchDocument("w/today", "w", "today", None, "Temperature and rain for a town today.")
    hits = ToolIndex.build([*copies, other], embedder=embedder).search("rain", k=3)
    assert [h.key for h in hits] == ["s00/now", "w/today", "s01/now"]
    assert hits[0].score > hits[1].score > hits[2].score


def test_the_cache_embeds_only_tools_it_has_not_seen(embedder: ConceptEmbedder) -> None:
    cache = EmbeddingCache()
    ToolIndex.build(DOCS, embedder=embedder, cache=cache)
    assert len(embedder.embedded) == len(DOCS)
    changed = (*DOCS[:3], SearchDocument("files/read_file", "files", "read_file", None, "Read a text file."))
    ToolIndex.build(changed, embedder=embedder, cache=cache)
    assert len(embedder.embedded) == len(DOCS) + 1  # only the changed definition
    assert "Read a text file" in embedder.embedded[-1]


def test_the_cache_survives_a_restart_through_its_file(tmp_path: Path, embedder: ConceptEmbedder) -> None:
    path = tmp_path / "vectors.npz"
    cache = EmbeddingCache(path)
    ToolIndex.build(DOCS, embedder=embedder, cache=cache)
    cache.save()
    reloaded = EmbeddingCache(path)
    assert len(reloaded) == len(DOCS)
    fresh = ConceptEmbedder()
    ToolIndex.build(DOCS, embedder=fresh, cache=reloaded)
    assert fresh.embedded == []


def test_a_damaged_cache_file_is_only_a_slower_start(tmp_path: Path) -> None:
    path = tmp_path / "vectors.npz"
    path.write_bytes(b"not a numpy archive")
    assert len(EmbeddingCache(path)) == 0


def test_without_the_extra_there_is_no_embedder_and_bm25_still_works(monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> object:
        return None if name == "wordllama" else real_find_spec(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    load_model.cache_clear()
    try:
        assert load_embedder() is None
        with pytest.raises(ImportError, match="semantic extra"):
            StaticEmbedder.from_package()
        assert ToolIndex.build(DOCS).search("create invoice", k=1)[0].key == "billing/create_invoice"
    finally:
        load_model.cache_clear()


@pytest.mark.integration
def test_importing_search_loads_neither_numpy_nor_the_model() -> None:
    code = (
        "import sys, codemode.search; print(sorted({'numpy', 'tokenizers', 'wordllama'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# -- the bundled model (skipped without the extra) ---------------------------------------------------


@pytest.fixture(scope="module")
def model() -> StaticEmbedder:
    embedder = load_embedder()
    if embedder is None:
        pytest.skip("the semantic extra (wordllama) is not installed")
    assert isinstance(embedder, StaticEmbedder)
    return embedder


def test_the_bundled_model_loads_from_the_wheel_and_gives_unit_vectors(model: StaticEmbedder) -> None:
    vectors = model.embed(["send an email", "", "calculate the area of a triangle"])
    norms = np_.linalg.norm(vectors, axis=1)
    assert vectors.shape[0] == 3
    assert abs(float(norms[0]) - 1.0) < 1e-4 and abs(float(norms[2]) - 1.0) < 1e-4
    assert float(norms[1]) == 0.0  # an empty text has no direction rather than a made-up one
    assert model.model_id.startswith("wordllama/")


def test_the_bundled_model_places_paraphrases_closer_than_unrelated_text(model: StaticEmbedder) -> None:
    a, b, c = model.embed(
        ["find the area of a triangle", "compute triangle surface", "send an email message"]
    )
    assert float(a @ b) > float(a @ c) + 0.2


def test_the_tree_ranks_with_the_semantic_signal_only_when_switched_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: StaticEmbedder
) -> None:
    from codemode.stubs import _tree_search
    from codemode.stubs._tree_search import build_index

    monkeypatch.setattr(_tree_search, "_embeddings", None)  # a fresh process-wide vector cache
    monkeypatch.setenv("CODEMODE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("CODEMODE_SEARCH_SEMANTIC", raising=False)
    assert not build_index(DOCS).hybrid
    monkeypatch.setenv("CODEMODE_SEARCH_SEMANTIC", "1")
    assert build_index(DOCS).hybrid
    del model  # only there to skip without the extra
    assert (tmp_path / "search" / "vectors.npz").is_file()
