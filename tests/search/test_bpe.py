"""Queries are tokenised from a cached table that gives exactly the ids ``tokenizers`` gives, and a
damaged or stale table is rebuilt, never used. Skipped without the ``semantic`` extra."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from codemode.search._bpe import BpeTable, cached_table
from codemode.search._wordllama import (
    _TOKENIZER,  # pyright: ignore[reportPrivateUsage]
    MODEL_PACKAGE,
    StaticEmbedder,
    semantic_text,
)

if TYPE_CHECKING:
    from tokenizers import Tokenizer

tokenizers = pytest.importorskip("tokenizers")
np = pytest.importorskip("numpy")
BENCH_DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data"


@pytest.fixture(scope="module")
def tokenizer_file() -> Path:
    import importlib.util

    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("the semantic extra (wordllama) is not installed")
    return Path(next(iter(spec.submodule_search_locations))).joinpath(*_TOKENIZER)


@pytest.fixture(scope="module")
def reference(tokenizer_file: Path) -> Tokenizer:
    tokenizer = tokenizers.Tokenizer.from_file(str(tokenizer_file))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


@pytest.fixture(scope="module")
def table(tokenizer_file: Path) -> BpeTable:
    built = BpeTable.from_config(tokenizer_file.read_bytes())
    assert built is not None, "the bundled tokenizer is the pipeline the table reproduces"
    return built


def _texts() -> list[str]:
    texts: list[str] = []
    for name in ("search_tools.json", "bfcl_tools.json"):
        for server in json.loads((BENCH_DATA / name).read_text(encoding="utf-8"))["servers"]:
            for tool in server["tools"]:
                schema: dict[str, Any] = tool.get("inputSchema") or {}
                params = list(schema.get("properties") or {})
                description = tool.get("description") or ""
                texts.append(semantic_text(tool["name"], tool.get("title"), description, params))
    for name in ("search_queries.json", "bfcl_queries.json"):
        texts += [q["query"] for q in json.loads((BENCH_DATA / name).read_text(encoding="utf-8"))["queries"]]
    rng = random.Random(7)
    pieces = [
        *"abcdeé  ▁<>/s_",
        "<s>",
        "</s>",
        "<unk>",
        "<s",
        "e\u0301",
        "日本語",
        "😀",
        "\t",
        "\r\n",
        "ﬁ",
        "İ",
    ]
    pieces += ["\u200b", "\x00", "  ", "▁▁", "a<s>b", "</s></s>", "<<unk>>"]
    texts += ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 30))) for _ in range(4000)]
    texts += [
        "".join(chr(rng.randint(0x20, 0x2FFFF)) for _ in range(rng.randint(1, 15))) for _ in range(1500)
    ]
    return [t for t in texts if t.encode("utf-8", "surrogatepass") == t.encode("utf-8", "replace")]


def test_the_table_gives_the_ids_tokenizers_gives(table: BpeTable, reference: Tokenizer) -> None:
    texts = _texts()
    assert len(texts) > 9000
    mismatched = [t for t in texts if table.encode(t) != reference.encode(t, add_special_tokens=False).ids]
    assert mismatched == []


def test_a_text_that_is_not_utf8_raises_so_that_tokenizers_decides(table: BpeTable) -> None:
    with pytest.raises(UnicodeEncodeError):
        table.encode("abc \udcff")


def test_another_pipeline_is_not_ported(tokenizer_file: Path) -> None:
    data = json.loads(tokenizer_file.read_bytes())
    for change in (
        {"pre_tokenizer": {"type": "Whitespace"}},
        {"normalizer": {"type": "Lowercase"}},
        {"model": {**data["model"], "dropout": 0.1}},
        {"model": {**data["model"], "byte_fallback": False}},
        {"model": {**data["model"], "continuing_subword_prefix": "##"}},
        {"added_tokens": [{**data["added_tokens"][0], "normalized": True}]},
    ):
        assert BpeTable.from_config(json.dumps({**data, **change}).encode()) is None, change
    assert BpeTable.from_config(b"not json") is None


def test_the_cached_table_is_rebuilt_when_damaged_or_stale(tmp_path: Path, tokenizer_file: Path) -> None:
    first = cached_table(tokenizer_file, "model-a", tmp_path)
    assert first is not None
    [stored] = (tmp_path / "tokenizer").glob("*.bin")
    data = stored.read_bytes()
    assert cached_table(tokenizer_file, "model-a", tmp_path) is not None
    for damaged in (data[:-100], b"", data[:40] + bytes([data[40] ^ 1]) + data[41:]):
        stored.write_bytes(damaged)
        again = cached_table(tokenizer_file, "model-a", tmp_path)
        assert again is not None and again.encode("send an email") == first.encode("send an email")
        assert stored.read_bytes() == data  # rebuilt whole
    # A table built from another tokenizer file (its sha256 differs) is not used for this one.
    other = tmp_path / "other.json"
    config = json.loads(tokenizer_file.read_bytes())
    config["model"]["merges"] = config["model"]["merges"][:100]
    other.write_text(json.dumps(config), encoding="utf-8")
    short = cached_table(other, "model-a", tmp_path)
    assert short is not None and short.encode("configuration") != first.encode("configuration")
    assert cached_table(tokenizer_file, "model-a", tmp_path) is not None
    assert stored.read_bytes() == data


def test_a_query_embeds_the_same_through_the_table(tmp_path: Path, reference: Tokenizer) -> None:
    fast = StaticEmbedder.from_package(tmp_path)
    slow = StaticEmbedder.from_package(None)
    for query in ("book a flight to tokyo", "close a github issue", "", "<s> émoji 😀"):
        assert np.array_equal(fast.embed([query]), slow.embed([query])), query
    for embedder in (fast, slow):  # not UTF-8: tokenizers refuses it, with or without the table
        with pytest.raises(TypeError):
            embedder.embed(["x \udcff"])
    assert list((tmp_path / "tokenizer").glob("*.bin"))
    texts = ["send an email", "get the weather"]
    assert np.array_equal(fast.embed(texts), slow.embed(texts))
    del reference
