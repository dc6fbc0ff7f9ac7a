"""The tool-vector cache: keyed by model, shared by models of any dimension, and a long embedding
shows its progress and survives an interruption."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from codemode.search import EmbeddingCache, SearchDocument, ToolIndex, embedding_progress
from tests.search.toy_model import ToyModel

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

np_ = pytest.importorskip("numpy")


class Counting(ToyModel):
    """Vectors of ``dimension`` from each text's length; counts what it embeds."""

    def __init__(self, model_id: str, dimension: int, fail_after: int | None = None) -> None:
        self._model_id = model_id
        self._dimension = dimension
        self._fail_after = fail_after
        self.embedded: list[str] = []

    @property
    def model_id(self) -> str:
        return self._model_id

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        if self._fail_after is not None and len(self.embedded) >= self._fail_after:
            raise KeyboardInterrupt
        self.embedded.extend(texts)
        out = np_.ones((len(texts), self._dimension), dtype=np_.float32)
        out[:, 0] = [len(text) for text in texts]
        return out / np_.linalg.norm(out, axis=1, keepdims=True)


def docs(n: int) -> list[SearchDocument]:
    return [SearchDocument(f"s/t{i}", "s", f"tool_{i}", None, f"Tool number {i}.") for i in range(n)]


def test_another_model_never_reuses_a_vector(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path / "vectors.npz")
    first, second = Counting("test/a", 4), Counting("test/b", 4)
    ToolIndex.build(docs(3), embedder=first, cache=cache)
    ToolIndex.build(docs(3), embedder=second, cache=cache)
    assert len(first.embedded) == len(second.embedded) == 3
    again = Counting("test/a", 4)
    ToolIndex.build(docs(3), embedder=again, cache=cache)
    assert again.embedded == []  # the first model's vectors are still there


def test_models_of_different_dimensions_share_one_file(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path / "vectors.npz")
    small, large = Counting("test/small", 3), Counting("test/large", 384)
    ToolIndex.build(docs(2), embedder=small, cache=cache)
    ToolIndex.build(docs(2), embedder=large, cache=cache)
    cache.save()
    reloaded = EmbeddingCache(tmp_path / "vectors.npz")
    assert len(reloaded) == 4
    texts = [small.document_text(doc) for doc in docs(2)]
    assert reloaded.vectors(Counting("test/small", 3), texts).shape == (2, 3)
    assert reloaded.vectors(Counting("test/large", 384), texts).shape == (2, 384)


def test_a_file_of_the_one_dimension_format_still_loads(tmp_path: Path) -> None:
    # Written before several models shared the file: one "keys" / "vectors" pair.
    path = tmp_path / "vectors.npz"
    key = EmbeddingCache.key("test/a", "text")
    np_.savez(path, keys=np_.asarray([key]), vectors=np_.ones((1, 4), dtype=np_.float32) / 2)
    path.chmod(0o600)
    model = Counting("test/a", 4)
    assert EmbeddingCache(path).vectors(model, ["text"]).shape == (1, 4)
    assert model.embedded == []


def test_a_long_embedding_reports_its_progress_in_chunks() -> None:
    reports: list[tuple[int, int]] = []
    with embedding_progress(lambda done, total: reports.append((done, total))):
        ToolIndex.build(docs(70), embedder=Counting("test/a", 4), cache=EmbeddingCache())
    assert reports[0] == (0, 70) and reports[-1] == (70, 70)
    assert len(reports) >= 3  # more than a start and an end: the bar moves while it runs
    assert [done for done, _ in reports] == sorted(done for done, _ in reports)
    ToolIndex.build(docs(70), embedder=Counting("test/b", 4), cache=EmbeddingCache())
    assert reports[-1] == (70, 70)  # outside the block nobody is told


def test_an_interrupted_embedding_keeps_what_it_did(tmp_path: Path) -> None:
    path = tmp_path / "vectors.npz"
    with pytest.raises(KeyboardInterrupt):
        ToolIndex.build(docs(100), embedder=Counting("test/a", 4, fail_after=64), cache=EmbeddingCache(path))
    resumed = Counting("test/a", 4)
    ToolIndex.build(docs(100), embedder=resumed, cache=EmbeddingCache(path))
    assert len(resumed.embedded) == 100 - 64  # the next run embeds only what was left


def test_codemode_search_shows_a_bar_only_while_a_long_build_embeds(monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.console import Console

    from codemode.cli import _common
    from codemode.cli._tree_cmd import embedding_bar

    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100)

    def stderr_console(to_stderr: bool) -> Console:
        assert to_stderr
        return console

    monkeypatch.setattr(_common, "console", stderr_console)
    with embedding_bar(True):
        ToolIndex.build(docs(10), embedder=Counting("test/a", 4), cache=EmbeddingCache())
    assert out.getvalue() == ""  # a few tools: over before a bar would be read
    with embedding_bar(False):
        ToolIndex.build(docs(100), embedder=Counting("test/a", 4), cache=EmbeddingCache())
    assert out.getvalue() == ""  # not a terminal, or --json: never
    with embedding_bar(True):
        ToolIndex.build(docs(100), embedder=Counting("test/a", 4), cache=EmbeddingCache())
    assert "embedding tools for search" in out.getvalue()
    assert "100/100" in out.getvalue()


def test_a_base_index_of_another_model_is_rebuilt_not_updated(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from codemode.stubs import _tree_search

    models = {"wordllama": Counting("wordllama/test", 4), "e5": Counting("e5/test", 8)}

    def load_embedder(setting: str) -> Counting | None:
        return models.get(setting)

    monkeypatch.setattr(_tree_search, "load_embedder", load_embedder)
    monkeypatch.setattr(_tree_search, "_embeddings", None)
    monkeypatch.setenv("CODEMODE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("CODEMODE_SEARCH_SEMANTIC", raising=False)
    base = _tree_search.build_index(docs(3), semantic="wordllama")
    assert base.ranker == "hybrid"
    index = _tree_search.build_index(docs(4), semantic="e5", base=base)
    assert index.ranker == "hybrid:e5"
    assert len(models["e5"].embedded) == 4  # every tool, by the model now asked for
