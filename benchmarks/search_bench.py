"""Tool-search benchmark: ranking quality at 300 / 1,000 / 3,000+ tools, build time and query latency.

    .venv/bin/python benchmarks/search_bench.py               # table, test queries, every ranker installed
    .venv/bin/python benchmarks/search_bench.py --split dev   # the queries the ranker was tuned on
    .venv/bin/python benchmarks/search_bench.py --tune e5     # choose e5's fusion weight on dev queries
    .venv/bin/python benchmarks/search_bench.py --cli 10      # `codemode search` in a fresh process
    .venv/bin/python benchmarks/search_bench.py --json        # machine-readable
    .venv/bin/python benchmarks/search_bench.py --misses      # list test misses at the largest tier

Data (see benchmarks/data/README.md):
  search_tools.json / search_queries.json  312 hand-written tools of 20 MCP-style servers, 254 queries
  bfcl_tools.json / bfcl_queries.json      3,217 real function definitions (BFCL v4) in MCP tool
                                           shape, 2,144 queries with their expected tool

Catalog tiers. "300" is the hand-written catalog alone (312 tools). Larger tiers add BFCL servers in a
fixed shuffled order until the size is reached; the last tier holds every tool (3,529). Each tier is
scored on the queries whose relevant tools it contains, so the larger tiers ask more, and harder,
questions over more distractors. Many BFCL tools share a name across servers (``get_current_weather``
66 times) and differ only in wording: those are the near-duplicates.

Splits. Hand-written queries keep their split (``dev`` was used while building the ranker, ``holdout``
was written after and is reported as ``test``); BFCL queries are split 30 / 70 by a hash of their id.
Tune on ``dev``; the default table shows ``test``.

Rankers. ``bm25`` alone; ``hybrid``: BM25 fused with static word embeddings (``[search] semantic =
"wordllama"``, the ``semantic`` extra); ``hybrid:e5``: BM25 fused with multilingual-e5-small
(``semantic = "e5"``, the ``retrieval`` extra). Each model's fusion weight is its default, tuned with
``--tune`` on dev queries.

Metrics. Hit@k (reported as R@k): share of queries with a relevant tool in the top k; for the
single-tool queries, the large majority, this is Recall@k. MRR: reciprocal rank of the first relevant
tool, 0 beyond rank 10. nDCG@5: binary gains over all relevant tools. Build: median wall time of
``ToolIndex.build`` with cold tokeniser caches (and, for hybrid, an empty embedding cache, so the
embedding of every tool is included). e5 embeds a tool in tens of milliseconds, so its build is
timed with the tools' vectors already cached (``--vectors``, kept between runs: what a restart or a
catalog change costs), and its first build - every tool embedded - is reported once, as ``first``,
when the run had to embed them (an empty ``--vectors`` file measures it at every tier; ``--cli``
measures the first ``codemode search`` of the whole catalog). Latency: wall time per
``search(query, k=5)``, the query's embedding included.
``R@5~`` and ``MRR~`` also count any tool named like the expected one (BFCL queries only): the
corpus holds up to 66 differently worded copies of one function under meaningless server names,
and nothing in the query says which copy the label picked.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from codemode.catalog import ServerCatalog, ToolSpec, tool_hash  # noqa: E402
from codemode.search import (  # noqa: E402
    Embedder,
    EmbeddingCache,
    SearchDocument,
    ToolIndex,
    cache_dir,
    load_embedder,
)
from codemode.search._tokenize import clear_caches  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"
TOOLS_FILE = DATA / "search_tools.json"
QUERIES_FILE = DATA / "search_queries.json"
BFCL_TOOLS_FILE = DATA / "bfcl_tools.json"
BFCL_QUERIES_FILE = DATA / "bfcl_queries.json"
KS = (1, 3, 5, 10)
DEPTH = 10
TIERS = (300, 1000, 0)  # 0 = every tool
# The rankers, each with the [search] semantic setting whose model it fuses with BM25 (None: BM25 alone).
RANKERS: dict[str, str | None] = {"bm25": None, "hybrid": "wordllama", "hybrid:e5": "e5"}
SHUFFLE_SEED = 14


@dataclass(frozen=True)
class Query:
    text: str
    relevant: frozenset[str]
    kind: str
    split: str = "dev"
    same_name: frozenset[str] = frozenset()
    """BFCL only: every tool in the catalog named like a relevant one (the near-duplicate family)."""


# -- data -----------------------------------------------------------------------------------------


def documents_from_catalog(catalog: dict[str, Any]) -> list[SearchDocument]:
    docs: list[SearchDocument] = []
    for server in catalog["servers"]:
        for tool in server["tools"]:
            props: dict[str, Any] = tool.get("inputSchema", {}).get("properties", {}) or {}
            params = tuple(
                (name, str(spec.get("description", "")) if isinstance(spec, dict) else "")  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
                for name, spec in props.items()
            )
            docs.append(
                SearchDocument(
                    key=f"{server['name']}/{tool['name']}",
                    server=server["name"],
                    name=tool["name"],
                    title=tool.get("title"),
                    description=tool.get("description", "") or "",
                    parameters=params,
                )
            )
    return docs


def load_documents(path: Path = TOOLS_FILE) -> list[SearchDocument]:
    return documents_from_catalog(json.loads(path.read_text(encoding="utf-8")))


def load_queries(path: Path = QUERIES_FILE) -> list[Query]:
    raw = json.loads(path.read_text(encoding="utf-8"))
    out: list[Query] = []
    for q in raw["queries"]:
        split = q.get("split", "dev")
        out.append(
            Query(
                q["query"],
                frozenset(q["relevant"]),
                q.get("kind", "paraphrase"),
                "test" if split == "holdout" else split,
            )
        )
    return out


def tier_catalogs(
    hand: list[SearchDocument], bfcl: list[SearchDocument], sizes: Sequence[int]
) -> list[list[SearchDocument]]:
    """Nested catalogs: the hand-written tools, then whole BFCL servers in a fixed shuffled order."""
    by_server: dict[str, list[SearchDocument]] = {}
    for doc in bfcl:
        by_server.setdefault(doc.server, []).append(doc)
    order = sorted(by_server)
    random.Random(SHUFFLE_SEED).shuffle(order)
    out: list[list[SearchDocument]] = []
    for size in sizes:
        docs = list(hand)
        for server in order:
            if size and len(docs) >= size:
                break
            docs.extend(by_server[server])
        out.append(docs)
    return out


def queries_for(catalog: Sequence[SearchDocument], queries: Sequence[Query]) -> list[Query]:
    """The queries this catalog can answer, with relevance restricted to the tools it holds."""
    keys = {d.key for d in catalog}
    by_name: dict[str, set[str]] = {}
    for d in catalog:
        by_name.setdefault(d.name, set()).add(d.key)
    out: list[Query] = []
    for q in queries:
        present = q.relevant & keys
        if not present:
            continue
        family = present
        if q.kind.startswith("bfcl:"):
            family = frozenset(key for r in present for key in by_name[r.split("/", 1)[1]])
        out.append(Query(q.text, frozenset(present), q.kind, q.split, frozenset(family)))
    return out


# -- rankers --------------------------------------------------------------------------------------

Ranker = Callable[[str, int], list[str]]


def index_ranker(index: ToolIndex) -> Ranker:
    return lambda query, k: [hit.key for hit in index.search(query, k)]


class QueryMemo:
    """An embedder that remembers query vectors: a weight sweep asks every query once per weight."""

    def __init__(self, embedder: Embedder) -> None:
        self._embedder = embedder
        self._queries: dict[str, Any] = {}
        self.model_id = embedder.model_id
        self.fusion_weight = embedder.fusion_weight

    def document_text(self, doc: SearchDocument) -> str:
        return self._embedder.document_text(doc)

    def embed(self, texts: Sequence[str]) -> Any:
        return self._embedder.embed(texts)

    def embed_query(self, query: str) -> Any:
        if query not in self._queries:
            self._queries[query] = self._embedder.embed_query(query)
        return self._queries[query]


def model_of(ranker: str) -> Embedder | None:
    setting = RANKERS[ranker]
    if setting is None:
        return None
    embedder = load_embedder(setting)  # pyright: ignore[reportArgumentType]
    assert embedder is not None, f"{ranker}: its extra is not installed"
    return embedder


def build(
    docs: Sequence[SearchDocument],
    ranker: str,
    weight: float | None = None,
    cache: EmbeddingCache | None = None,
    embedder: Embedder | None = None,
) -> ToolIndex:
    """``ranker``'s index of ``docs``; ``weight``: the fusion weight (default: the model's)."""
    embedder = embedder if embedder is not None else model_of(ranker)
    if embedder is None:
        return ToolIndex.build(docs)
    cache = cache if cache is not None else EmbeddingCache()
    return ToolIndex.build(docs, embedder=embedder, cache=cache, semantic_weight=weight)


# -- measurement ----------------------------------------------------------------------------------


def quality(rank: Ranker, queries: Sequence[Query]) -> dict[str, float]:
    hits = dict.fromkeys(KS, 0)
    rr = ndcg = rr_family = 0.0
    hits_family = 0
    for q in queries:
        ranked = rank(q.text, DEPTH)
        first = next((i for i, key in enumerate(ranked) if key in q.relevant), None)
        if first is not None:
            rr += 1.0 / (first + 1)
            for k in KS:
                hits[k] += first < k
        dcg = sum(1.0 / math.log2(i + 2) for i, key in enumerate(ranked[:5]) if key in q.relevant)
        ideal = sum(1.0 / math.log2(i + 2) for i in range(min(5, len(q.relevant))))
        ndcg += dcg / ideal
        family = q.same_name or q.relevant
        first_family = next((i for i, key in enumerate(ranked) if key in family), None)
        if first_family is not None:
            rr_family += 1.0 / (first_family + 1)
            hits_family += first_family < 5
    n = len(queries) or 1
    out = {f"R@{k}": hits[k] / n for k in KS}
    out["MRR"] = rr / n
    out["R@5~"] = hits_family / n
    out["MRR~"] = rr_family / n
    out["nDCG@5"] = ndcg / n
    out["n"] = float(len(queries))
    return out


def time_build(
    docs: Sequence[SearchDocument], ranker: str, runs: int, vectors: EmbeddingCache
) -> tuple[ToolIndex, float, dict[str, float]]:
    """The index, the median build time and, when tools had to be embedded, the first build's
    ``{"ms", "embedded"}``. e5 builds over ``vectors`` (kept between runs); the other rankers with
    an empty cache each time (their embedding is part of every build)."""
    slow = ranker == "hybrid:e5"
    model_of(ranker)  # loads the model once, outside the timing
    first: dict[str, float] = {}
    if slow:
        clear_caches()
        t0 = time.perf_counter()
        before = len(vectors)
        build(docs, ranker, cache=vectors)
        if len(vectors) > before:
            first = {"ms": (time.perf_counter() - t0) * 1000, "embedded": float(len(vectors) - before)}
            vectors.save()
    times: list[float] = []
    index = build(docs, ranker, cache=vectors if slow else None)
    for _ in range(max(1, runs)):
        clear_caches()
        t0 = time.perf_counter()
        index = build(docs, ranker, cache=vectors if slow else None)
        times.append((time.perf_counter() - t0) * 1000)
    return index, statistics.median(times), first


def latency(rank: Ranker, queries: Sequence[Query], repeat: int) -> dict[str, float]:
    # The builds before this left garbage behind; collect it now so that the collector's pauses over
    # the benchmark's own leftovers are not booked to the queries.
    gc.collect()
    wall: list[float] = []
    for _ in range(repeat):
        for q in queries:
            t0 = time.perf_counter_ns()
            rank(q.text, 5)
            wall.append((time.perf_counter_ns() - t0) / 1e6)
    wall.sort()

    def pct(p: float) -> float:
        return wall[min(len(wall) - 1, round(p * (len(wall) - 1)))] if wall else 0.0

    return {"p50_ms": pct(0.50), "p95_ms": pct(0.95), "max_ms": wall[-1] if wall else 0.0}


def run(
    split: str, repeat: int, build_runs: int, rankers: Sequence[str], vectors: EmbeddingCache
) -> dict[str, Any]:
    hand, bfcl = load_documents(), load_documents(BFCL_TOOLS_FILE)
    clash = {d.key for d in hand} & {d.key for d in bfcl}
    assert not clash, f"tool keys in both sets: {sorted(clash)[:5]}"
    everything = [q for q in load_queries() + load_queries(BFCL_QUERIES_FILE) if split in ("all", q.split)]
    tiers: list[dict[str, Any]] = []
    for docs in tier_catalogs(hand, bfcl, TIERS):
        queries = queries_for(docs, everything)
        tier: dict[str, Any] = {"tools": len(docs), "servers": len({d.server for d in docs}), "rankers": {}}
        for name in rankers:
            index, build_ms, first = time_build(docs, name, build_runs, vectors)
            rank = index_ranker(index)
            kinds = sorted({q.kind for q in queries})
            tier["rankers"][name] = {
                "all": quality(rank, queries),
                "kinds": {kind: quality(rank, [q for q in queries if q.kind == kind]) for kind in kinds},
                "build_ms": build_ms,
                "first_build": first,
                "weight": index.semantic_weight,
                "latency": latency(rank, queries, repeat),
            }
            if name == rankers[-1]:
                tier["_misses"] = [
                    (q, got) for q in queries if not q.relevant.intersection(got := rank(q.text, 5))
                ]
        tiers.append(tier)
    return {"split": split, "tiers": tiers}


_COLS = ("R@1", "R@3", "R@5", "R@10", "MRR", "nDCG@5", "R@5~", "MRR~")


def _row(label: str, m: dict[str, float]) -> str:
    return f"  {label:<32}{int(m['n']):>6}" + "".join(f"{m[c]:>8.3f}" for c in _COLS)


def table(result: dict[str, Any]) -> str:
    lines = [f"tool search benchmark, {result['split']} queries"]
    header = f"  {'':<32}{'n':>6}" + "".join(f"{c:>8}" for c in _COLS)
    for tier in result["tiers"]:
        for name, r in tier["rankers"].items():
            lat, first = r["latency"], r["first_build"]
            weight = f" (weight {r['weight']})" if r["weight"] else ""
            cached = " with vectors cached" if name == "hybrid:e5" else ""
            embedded = (
                f"; first {first['ms'] / 1000:.1f} s embedding {first['embedded']:.0f} tools" if first else ""
            )
            lines += [
                "",
                f"{tier['tools']} tools, {tier['servers']} servers — {name}{weight}: "
                f"build {r['build_ms']:.0f} ms{cached}{embedded}; "
                f"query p50 {lat['p50_ms']:.2f} ms, p95 {lat['p95_ms']:.2f} ms, max {lat['max_ms']:.2f} ms",
                header,
                _row("all", r["all"]),
            ]
            lines += [_row(kind, m) for kind, m in r["kinds"].items()]
    return "\n".join(lines)


def tune(ranker: str, weights: Sequence[float], vectors: EmbeddingCache) -> str:
    """``ranker``'s fusion weight versus dev-query quality at every tier (never looks at test queries)."""
    hand, bfcl = load_documents(), load_documents(BFCL_TOOLS_FILE)
    dev = [q for q in load_queries() + load_queries(BFCL_QUERIES_FILE) if q.split == "dev"]
    embedder = model_of(ranker)
    assert embedder is not None, f"{ranker} has no fusion weight"
    memo = QueryMemo(embedder)
    lines = [f"{ranker} fusion weight on dev queries (default {embedder.fusion_weight})"]
    for docs in tier_catalogs(hand, bfcl, TIERS):
        queries = queries_for(docs, dev)
        lines += [
            f"{len(docs)} tools, {len(queries)} dev queries",
            f"  {'weight':<8}" + "".join(f"{c:>8}" for c in _COLS),
        ]
        for w in weights:
            # The tools are embedded once (the cache), the queries once (the memo).
            index = build(docs, ranker, w, vectors, memo)
            vectors.save()
            m = quality(index_ranker(index), queries)
            lines.append(f"  {w:<8.2f}" + "".join(f"{m[c]:>8.3f}" for c in _COLS))
    return "\n".join(lines)


def available_rankers(*, bm25_only: bool, models: Sequence[str] = ("hybrid", "hybrid:e5")) -> list[str]:
    """``bm25``, and the ``models`` rankers unless asked not to or their extra is missing (said on
    stderr)."""
    if bm25_only:
        return ["bm25"]
    out = ["bm25"]
    for name in models:
        setting = RANKERS[name]
        if setting is not None and load_embedder(setting) is None:  # pyright: ignore[reportArgumentType]
            print(f"{name}: the extra of [search] semantic = {setting!r} is not installed", file=sys.stderr)
        else:
            out.append(name)
    return out


def server_catalog(name: str, tools: list[dict[str, Any]]) -> ServerCatalog:
    """One benchmark server's tools as codemode records them (listed definitions, hashed)."""
    specs: list[ToolSpec] = []
    for tool in tools:
        definition: dict[str, Any] = {
            "name": tool["name"],
            "title": tool.get("title"),
            "description": tool.get("description"),
            "input_schema": tool.get("inputSchema") or {"type": "object"},
            "output_schema": None,
            "annotations": None,
        }
        specs.append(ToolSpec(server=name, schema_hash=tool_hash(**definition), **definition))
    return ServerCatalog(server=name, tools=tuple(specs))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--split", choices=("test", "dev", "all"), default="test")
    parser.add_argument("--repeat", type=int, default=3, help="times each query is timed (default 3)")
    parser.add_argument("--build-runs", type=int, default=3, help="index builds to time (default 3)")
    parser.add_argument("--bm25-only", action="store_true", help="skip the rankers that use a model")
    parser.add_argument(
        "--rankers", default=",".join(RANKERS), help=f"comma-separated, of {', '.join(RANKERS)} (default all)"
    )
    parser.add_argument(
        "--tune",
        metavar="RANKER",
        choices=[name for name, model in RANKERS.items() if model],
        help="sweep RANKER's fusion weight on dev queries",
    )
    parser.add_argument(
        "--vectors",
        type=Path,
        default=None,
        help="e5's tool vectors, kept between runs (default: bench-vectors.npz in the search cache folder)",
    )
    parser.add_argument(
        "--cli", type=int, metavar="RUNS", help="time `codemode search` from the lock instead"
    )
    parser.add_argument(
        "--seed", action="store_true", help="with --cli: start e5's cache folder with the --vectors file"
    )
    parser.add_argument(
        "--serve", action="store_true", help="time serve's search_tools (tree.search) at the whole catalog"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--misses", action="store_true", help="list misses (top 5) at the largest tier")
    args = parser.parse_args(argv)

    wanted = [name for name in args.rankers.split(",") if name]
    unknown = sorted(set(wanted) - set(RANKERS))
    if unknown:
        parser.error(f"unknown rankers {unknown}: choose among {', '.join(RANKERS)}")
    models = [name for name in wanted if RANKERS[name] is not None]
    rankers = [name for name in available_rankers(bm25_only=args.bm25_only, models=models) if name in wanted]
    vectors_file = args.vectors or cache_dir() / "bench-vectors.npz"
    if args.cli or args.serve:
        from benchmarks.search_latency import cli_latency, serve_latency

        if args.cli:
            print(cli_latency(args.cli, rankers, vectors_file if args.seed else None))
        else:
            print(serve_latency(rankers, args.repeat, vectors_file))
        return 0
    vectors = EmbeddingCache(vectors_file)
    if args.tune:
        weights = (0.0, 0.3, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)
        print(tune(args.tune, weights, vectors))
        return 0
    result = run(args.split, args.repeat, args.build_runs, rankers, vectors)
    missed = [tier.pop("_misses") for tier in result["tiers"]][-1]
    print(json.dumps(result, indent=2) if args.json else table(result))
    if args.misses:
        print(f"\nmisses at {result['tiers'][-1]['tools']} tools ({len(missed)}):", file=sys.stderr)
        for q, ranked in missed:
            print(
                f"  [{q.kind}] {q.text[:100]!r}  want {sorted(q.relevant)[:2]}  got {ranked[:3]}",
                file=sys.stderr,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
