"""Incremental search-index update versus a full rebuild, after one server re-lists its tools.

    .venv/bin/python benchmarks/search_update_bench.py              # BM25, and hybrid if installed
    .venv/bin/python benchmarks/search_update_bench.py --bm25-only
    .venv/bin/python benchmarks/search_update_bench.py --runs 9

The catalog is the search benchmark's whole corpus (3,529 tools: the hand-written servers plus
BFCL, see benchmarks/data/README.md). Then ``stripe`` (29 tools) sends ``list_changed``: every one
of its descriptions changes, one tool goes and one arrives. Two levels are timed:

* index: ``ToolIndex.build`` over the new documents versus ``ToolIndex.updated`` from the old
  index. An updated index finishes a term's BM25 postings when a query first reads the term, so
  the column ``+finish all`` adds finishing every term (the most any sequence of queries can cost).
* tree: what the engine does on ``list_changed``: ``render_tree`` plus the first search, versus
  ``render_tree(..., previous=tree)`` plus the first search.

Tokeniser caches are warm (a running engine's are) and, for hybrid, the vectors of the old catalog
are already cached (the engine's process-wide cache holds them), so both sides embed the same new
tools. Times are medians over ``--runs`` runs, in milliseconds.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.search_bench import (  # noqa: E402
    BFCL_TOOLS_FILE,
    TOOLS_FILE,
    available_rankers,
    documents_from_catalog,
    server_catalog,
)
from codemode.catalog import ServerCatalog  # noqa: E402
from codemode.search import EmbeddingCache, SearchDocument, ToolIndex, load_embedder  # noqa: E402

CHANGED_SERVER = "stripe"
QUERY = "refund a payment"


def raw_servers() -> list[dict[str, Any]]:
    """Every server of the corpus, BFCL names made distinct from the hand-written ones."""
    servers: list[dict[str, Any]] = []
    seen: set[str] = set()
    for path in (TOOLS_FILE, BFCL_TOOLS_FILE):
        for server in json.loads(path.read_text(encoding="utf-8"))["servers"]:
            name = server["name"] if server["name"] not in seen else f"{server['name']}-bfcl"
            seen.add(name)
            servers.append({**server, "name": name})
    return servers


def relisted(servers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``servers`` after the changed server re-listed: all descriptions new, one tool out, one in."""
    out: list[dict[str, Any]] = []
    for server in servers:
        if server["name"] != CHANGED_SERVER:
            out.append(server)
            continue
        tools = [
            {**tool, "description": (tool.get("description") or "") + " (API version 2026-01)"}
            for tool in server["tools"][1:]
        ]
        tools.append(
            {
                "name": "create_refund_batch",
                "description": "Refund several payments at once.",
                "inputSchema": {"type": "object", "properties": {"payment_ids": {"type": "array"}}},
            }
        )
        out.append({**server, "tools": tools})
    return out


def catalogs_of(servers: list[dict[str, Any]]) -> list[ServerCatalog]:
    return [server_catalog(server["name"], server["tools"]) for server in servers]


def median_ms(run: Callable[[], object], prepare: Callable[[], object], runs: int) -> float:
    times: list[float] = []
    for _ in range(runs):
        prepare()
        gc.collect()  # the previous run's garbage is not this run's cost
        t0 = time.perf_counter()
        run()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def index_level(
    old: Sequence[SearchDocument], new: Sequence[SearchDocument], hybrid: bool, runs: int
) -> dict[str, float]:
    embedder = load_embedder() if hybrid else None
    caches: list[EmbeddingCache | None] = [None]

    def prepare() -> None:
        cache = None
        if embedder is not None:  # the running process already holds the old catalog's vectors
            cache = EmbeddingCache()
            cache.vectors(embedder, [embedder.document_text(doc) for doc in old])
        caches[0] = cache

    prepare()
    base = ToolIndex.build(old, embedder=embedder, cache=caches[0])
    full = median_ms(lambda: ToolIndex.build(new, embedder=embedder, cache=caches[0]), prepare, runs)
    # updated_to: the diff against the old documents (by key, then equality) is part of the update.
    update = median_ms(lambda: base.updated_to(new, cache=caches[0]), prepare, runs)

    def update_and_finish() -> None:
        index = base.updated_to(new, cache=caches[0])
        index._bm25.state(index._order())  # pyright: ignore[reportPrivateUsage] - finishes every term

    finish = median_ms(update_and_finish, prepare, runs)
    return {"full": full, "update": update, "update+finish": finish}


def tree_level(
    before: list[ServerCatalog], after: list[ServerCatalog], semantic: str, runs: int
) -> dict[str, float]:
    from codemode.stubs import _tree_search, render_tree

    trees: list[Any] = [None]

    def prepare() -> None:
        _tree_search._embeddings = None  # pyright: ignore[reportPrivateUsage]
        tree = render_tree(before, semantic=semantic)  # pyright: ignore[reportArgumentType]
        tree.search(QUERY)
        trees[0] = tree

    def full() -> None:
        render_tree(after, semantic=semantic).search(QUERY)  # pyright: ignore[reportArgumentType]

    def incremental() -> None:
        render_tree(after, previous=trees[0], semantic=semantic).search(QUERY)  # pyright: ignore[reportArgumentType]

    return {"full": median_ms(full, prepare, runs), "update": median_ms(incremental, prepare, runs)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5, help="timed runs per measurement (default 5)")
    parser.add_argument("--bm25-only", action="store_true", help="skip the hybrid ranker")
    args = parser.parse_args(argv)

    servers = raw_servers()
    new_servers = relisted(servers)
    old_docs = documents_from_catalog({"servers": servers})
    new_docs = documents_from_catalog({"servers": new_servers})
    before, after = catalogs_of(servers), catalogs_of(new_servers)
    # wordllama: e5 would embed the re-listed tools for minutes (index_level's ``hybrid`` is wordllama).
    rankers = available_rankers(bm25_only=args.bm25_only, models=("hybrid",))
    changed = sum(len(s["tools"]) for s in servers if s["name"] == CHANGED_SERVER)
    print(
        f"{len(old_docs)} tools in {len(servers)} servers; {CHANGED_SERVER} ({changed} tools) re-lists: "
        f"all descriptions changed, 1 removed, 1 added; median of {args.runs} runs, ms"
    )
    print(f"  {'':<26}{'full':>10}{'update':>10}{'ratio':>8}{'+finish all':>13}{'ratio':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["CODEMODE_CACHE_DIR"] = tmp  # the tree's vector cache file goes here, not to ~/.cache
        for ranker in rankers:
            r = index_level(old_docs, new_docs, ranker == "hybrid", args.runs)
            print(
                f"  {'index, ' + ranker:<26}{r['full']:>10.1f}{r['update']:>10.1f}"
                f"{r['full'] / r['update']:>7.0f}x{r['update+finish']:>13.1f}"
                f"{r['full'] / r['update+finish']:>7.1f}x"
            )
        for ranker in rankers:
            t = tree_level(before, after, "on" if ranker == "hybrid" else "off", args.runs)
            print(
                f"  {'tree + first search, ' + ranker:<26}{t['full']:>10.1f}{t['update']:>10.1f}"
                f"{t['full'] / t['update']:>7.1f}x"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
