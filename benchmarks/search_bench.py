"""Tool-search benchmark: ranking quality on a labelled query set, build time and query latency.

    .venv/bin/python benchmarks/search_bench.py            # readable table
    .venv/bin/python benchmarks/search_bench.py --json     # machine-readable
    .venv/bin/python benchmarks/search_bench.py --misses   # also list the queries that missed the top 5

Data (hand-written, in the style of public MCP servers):
  benchmarks/data/search_tools.json    tools of ~20 servers, key = "<server>/<tool name>"
  benchmarks/data/search_queries.json  natural-language queries, each with the key(s) of the relevant tool(s)

Metrics. A query is a hit at k when at least one of its relevant tools is in the top k results
(for the single-relevant queries, the large majority, this is ordinary Recall@k). MRR uses the rank of
the first relevant tool (0 when it is not in the top 10). Quality is measured twice: on the labelled
catalog alone, and after padding it to --pad tools (default 3,000) with deterministic synthetic
distractor tools that reuse the same everyday vocabulary (list/get/create ... issue/file/message ...).
Build time is the median of several full index builds; query latency is the distribution over every
labelled query repeated --repeat times. A plain substring matcher is reported alongside as a baseline.
"""

from __future__ import annotations

import argparse
import json
import random
import re
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

from codemode.search import SearchDocument, ToolIndex  # noqa: E402
from codemode.search._tokenize import clear_caches  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"
TOOLS_FILE = DATA / "search_tools.json"
QUERIES_FILE = DATA / "search_queries.json"
KS = (1, 3, 5)
MRR_DEPTH = 10


@dataclass(frozen=True)
class Query:
    text: str
    relevant: frozenset[str]
    kind: str
    split: str = "dev"


# -- data -----------------------------------------------------------------------------------------


def documents_from_catalog(catalog: dict[str, Any]) -> list[SearchDocument]:
    docs: list[SearchDocument] = []
    for server in catalog["servers"]:
        for tool in server["tools"]:
            props: dict[str, Any] = tool.get("inputSchema", {}).get("properties", {})
            params = tuple((name, str(spec.get("description", ""))) for name, spec in props.items())
            docs.append(
                SearchDocument(
                    key=f"{server['name']}/{tool['name']}",
                    server=server["name"],
                    name=tool["name"],
                    title=tool.get("title"),
                    description=tool.get("description", ""),
                    parameters=params,
                )
            )
    return docs


def load_documents(path: Path = TOOLS_FILE) -> list[SearchDocument]:
    return documents_from_catalog(json.loads(path.read_text(encoding="utf-8")))


def load_queries(path: Path = QUERIES_FILE) -> list[Query]:
    raw = json.loads(path.read_text(encoding="utf-8"))
    return [
        Query(q["query"], frozenset(q["relevant"]), q.get("kind", "paraphrase"), q.get("split", "dev"))
        for q in raw["queries"]
    ]


_VERBS = (  # noqa: SIM905 - word tables read better as text
    "list get create update delete search find export import sync archive restore fetch add remove set "
    "send post publish approve reject assign close open start stop run cancel schedule upload download "
    "count validate merge copy move rename share tag review"
).split()
_NOUNS = (  # noqa: SIM905 - word tables read better as text
    "issue ticket file message channel user customer invoice payment order shipment product price report "
    "record asset contact lead deal project task comment event meeting calendar folder document page "
    "database table row query job pipeline build deployment container image bucket object secret key "
    "token webhook alert incident metric log dashboard note label branch commit release repository team "
    "member role permission group subscription plan coupon refund account workspace form survey survey "
    "response article post thread reaction attachment device sensor location route vehicle booking room"
).split()
_QUALIFIERS = (  # noqa: SIM905 - word tables read better as text
    "by id|in bulk|for a project|for the current user|in a workspace|across teams|by status|by date range|"
    "for an account|in a folder|with filters|by name|for a customer|in a namespace|for an organisation"
).split("|")
_DOMAINS = (  # noqa: SIM905 - word tables read better as text
    "crm helpdesk inventory billing analytics hr marketing logistics cms lms erp devops monitoring "
    "ecommerce booking survey forms iot fleet wiki chat storage ads seo legal finance support"
).split()
_TEMPLATES = (
    "{Verb} {noun}s {qual} in the {domain} system. Returns {field1}, {field2} and {field3}.",
    "{Verb} a {noun} {qual}. Requires {field1}; {field2} is optional.",
    "Use this to {verb} {noun}s stored in {domain}. Results include {field1} and {field2}.",
    "{Verb} one or more {noun}s. Supports pagination and filtering by {field1} or {field2}.",
    "{Verb} the {noun} identified by {field1} in {domain} and report {field2}.",
)
_FIELDS = (  # noqa: SIM905 - word tables read better as text
    "id name status created_at updated_at owner title amount currency email tags priority due_date "
    "description url type region count total score version state"
).split()


def synthetic_documents(n: int, seed: int = 7) -> list[SearchDocument]:
    """``n`` deterministic distractor tools built from the everyday vocabulary real tools use."""
    rng = random.Random(seed)
    docs: list[SearchDocument] = []
    names_seen: set[str] = set()
    server_i = 0
    while len(docs) < n:
        server_i += 1
        domain = rng.choice(_DOMAINS)
        server = f"{domain}-{server_i:03d}"
        for _ in range(rng.randint(8, 30)):
            if len(docs) >= n:
                break
            verb, noun = rng.choice(_VERBS), rng.choice(_NOUNS)
            style = rng.randrange(3)
            name = (
                f"{verb}_{noun}s"
                if style == 0
                else f"{verb}{noun.capitalize()}"
                if style == 1
                else f"{noun}.{verb}"
            )
            key = f"{server}/{name}"
            if key in names_seen:
                continue
            names_seen.add(key)
            fields = rng.sample(_FIELDS, 3)
            text = rng.choice(_TEMPLATES).format(
                Verb=verb.capitalize(),
                verb=verb,
                noun=noun,
                qual=rng.choice(_QUALIFIERS),
                domain=domain,
                field1=fields[0],
                field2=fields[1],
                field3=fields[2],
            )
            params = tuple(
                (f, f"The {noun}'s {f.replace('_', ' ')}") for f in rng.sample(_FIELDS, rng.randint(0, 4))
            )
            docs.append(
                SearchDocument(
                    key=key,
                    server=server,
                    name=name,
                    title=f"{verb.capitalize()} {noun}" if rng.random() < 0.5 else None,
                    description=text,
                    parameters=params,
                )
            )
    return docs


# -- rankers --------------------------------------------------------------------------------------

Ranker = Callable[[str, int], list[str]]

_QUERY_WORD = re.compile(r"\w+")


class SubstringBaseline:
    """What a tool list's naive filter does: count the query's words (3+ chars) found in the tool's text."""

    def __init__(self, documents: Sequence[SearchDocument]) -> None:
        self._keys = [d.key for d in documents]
        self._texts = [
            " ".join(
                [d.server, d.name, d.title or "", d.description[:4000], *(p for p, _ in d.parameters)]
            ).lower()
            for d in documents
        ]

    def search(self, query: str, k: int) -> list[str]:
        words = {w for w in _QUERY_WORD.findall(query.lower()) if len(w) >= 3}
        scored = [(sum(w in text for w in words), i) for i, text in enumerate(self._texts)]
        top = sorted((s for s in scored if s[0] > 0), key=lambda s: (-s[0], s[1]))[:k]
        return [self._keys[i] for _, i in top]


def index_ranker(index: ToolIndex) -> Ranker:
    return lambda query, k: [hit.key for hit in index.search(query, k)]


# -- measurement ----------------------------------------------------------------------------------


def quality(rank: Ranker, queries: Sequence[Query]) -> dict[str, float]:
    hits = dict.fromkeys(KS, 0)
    rr = 0.0
    for q in queries:
        ranked = rank(q.text, MRR_DEPTH)
        first = next((i for i, key in enumerate(ranked) if key in q.relevant), None)
        if first is not None:
            rr += 1.0 / (first + 1)
            for k in KS:
                if first < k:
                    hits[k] += 1
    n = len(queries) or 1
    out = {f"recall@{k}": hits[k] / n for k in KS}
    out["mrr"] = rr / n
    return out


def misses(rank: Ranker, queries: Sequence[Query], k: int = 5) -> list[tuple[Query, list[str]]]:
    out: list[tuple[Query, list[str]]] = []
    for q in queries:
        ranked = rank(q.text, k)
        if not q.relevant.intersection(ranked):
            out.append((q, ranked))
    return out


@dataclass(frozen=True)
class BuildTimes:
    cold_wall_ms: float  # median wall time, tokeniser caches cleared before each build (a fresh process)
    cold_wall_min_ms: float
    cold_cpu_ms: float  # median CPU time of the same builds (less sensitive to a busy machine)
    warm_wall_ms: float  # median wall time of a rebuild in a process that has seen the vocabulary


def time_build(documents: Sequence[SearchDocument], runs: int) -> tuple[ToolIndex, BuildTimes]:
    cold_wall: list[float] = []
    cold_cpu: list[float] = []
    warm_wall: list[float] = []
    index = ToolIndex.build(documents)
    for _ in range(max(1, runs)):
        clear_caches()
        w0, c0 = time.perf_counter(), time.process_time()
        index = ToolIndex.build(documents)
        cold_wall.append((time.perf_counter() - w0) * 1000)
        cold_cpu.append((time.process_time() - c0) * 1000)
        w0 = time.perf_counter()
        index = ToolIndex.build(documents)
        warm_wall.append((time.perf_counter() - w0) * 1000)
    times = BuildTimes(
        cold_wall_ms=statistics.median(cold_wall),
        cold_wall_min_ms=min(cold_wall),
        cold_cpu_ms=statistics.median(cold_cpu),
        warm_wall_ms=statistics.median(warm_wall),
    )
    return index, times


def latency(rank: Ranker, queries: Sequence[Query], repeat: int) -> dict[str, float]:
    """Wall-clock and CPU (this thread) time per query; CPU time is what to trust on a busy machine."""
    wall: list[float] = []
    cpu: list[float] = []
    for _ in range(repeat):
        for q in queries:
            w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
            rank(q.text, 5)
            cpu.append((time.thread_time_ns() - c0) / 1e6)
            wall.append((time.perf_counter_ns() - w0) / 1e6)
    wall.sort()
    cpu.sort()

    def pct(samples: list[float], p: float) -> float:
        return samples[min(len(samples) - 1, round(p * (len(samples) - 1)))]

    return {
        "p50_ms": pct(wall, 0.50),
        "p95_ms": pct(wall, 0.95),
        "max_ms": wall[-1],
        "cpu_p50_ms": pct(cpu, 0.50),
        "cpu_p95_ms": pct(cpu, 0.95),
        "n": float(len(wall)),
    }


def run(pad: int, repeat: int, build_runs: int, seed: int) -> dict[str, Any]:
    docs = load_documents()
    queries = load_queries()
    servers = {d.server for d in docs}
    result: dict[str, Any] = {
        "catalog": {"tools": len(docs), "servers": len(servers), "queries": len(queries)},
        "definitions": {
            "recall@k": "share of queries with at least one relevant tool in the top k",
            "mrr": f"mean reciprocal rank of the first relevant tool (0 beyond rank {MRR_DEPTH})",
            "build": "ToolIndex.build wall/CPU time; cold = tokeniser caches cleared first",
            "latency": "ToolIndex.search(query, k=5) per call, wall and thread CPU time, repeated",
        },
    }

    index, small_build = time_build(docs, build_runs)
    result["small"] = {
        "tools": len(docs),
        "bm25": quality(index_ranker(index), queries),
        "substring": quality(SubstringBaseline(docs).search, queries),
        "build_cold_ms": small_build.cold_wall_ms,
    }

    padded = docs + synthetic_documents(max(0, pad - len(docs)), seed)
    big_index, big_build = time_build(padded, build_runs)
    big_baseline = SubstringBaseline(padded)
    result["large"] = {
        "tools": len(padded),
        "bm25": quality(index_ranker(big_index), queries),
        "substring": quality(big_baseline.search, queries),
        "build_cold_ms": big_build.cold_wall_ms,
        "build_cold_min_ms": big_build.cold_wall_min_ms,
        "build_cold_cpu_ms": big_build.cold_cpu_ms,
        "build_warm_ms": big_build.warm_wall_ms,
        "latency": latency(index_ranker(big_index), queries, repeat),
        "substring_latency": latency(big_baseline.search, queries, max(1, repeat // 10)),
    }

    breakdown: dict[str, Any] = {}
    for attr in ("split", "kind"):
        for value in sorted({getattr(q, attr) for q in queries}):
            subset = [q for q in queries if getattr(q, attr) == value]
            breakdown[f"{attr}={value}"] = {
                "n": len(subset),
                "small": quality(index_ranker(index), subset),
                "large": quality(index_ranker(big_index), subset),
                "substring_small": quality(SubstringBaseline(docs).search, subset),
            }
    result["breakdown"] = breakdown
    result["_misses"] = misses(index_ranker(index), queries)
    return result


def _table(result: dict[str, Any]) -> str:
    small, large = result["small"], result["large"]
    cat = result["catalog"]
    lines = [
        f"tool search benchmark: {cat['queries']} labelled queries, {cat['tools']} tools from "
        f"{cat['servers']} servers (padded to {large['tools']} with synthetic distractors)",
        "",
        f"{'ranker':<22}{'tools':>7}{'R@1':>8}{'R@3':>8}{'R@5':>8}{'MRR':>8}",
    ]
    for label, block in (("small", small), ("large", large)):
        for name, key in (("ToolIndex (BM25F)", "bm25"), ("substring baseline", "substring")):
            m = block[key]
            lines.append(
                f"{name:<22}{block['tools']:>7}{m['recall@1']:>8.3f}{m['recall@3']:>8.3f}"
                f"{m['recall@5']:>8.3f}{m['mrr']:>8.3f}"
            )
        if label == "small":
            lines.append("")
    lines += [
        "",
        f"{'ToolIndex by subset':<24}{'n':>5}{'R@1':>8}{'R@5':>8}{'MRR':>8}"
        f"{'R@5@' + str(large['tools']):>10}{'substr R@5':>12}",
    ]
    for name, m in result["breakdown"].items():
        lines.append(
            f"  {name:<22}{m['n']:>5}{m['small']['recall@1']:>8.3f}{m['small']['recall@5']:>8.3f}"
            f"{m['small']['mrr']:>8.3f}{m['large']['recall@5']:>10.3f}{m['substring_small']['recall@5']:>12.3f}"
        )
    lat, blat = large["latency"], large["substring_latency"]
    lines += [
        "",
        f"index build, {small['tools']} tools: {small['build_cold_ms']:.1f} ms (cold caches, median)",
        f"index build, {large['tools']} tools: {large['build_cold_ms']:.1f} ms (cold caches, median; "
        f"min {large['build_cold_min_ms']:.1f}, CPU {large['build_cold_cpu_ms']:.1f}); "
        f"warm rebuild {large['build_warm_ms']:.1f} ms",
        f"query latency, {large['tools']} tools, {int(lat['n'])} queries (k=5): "
        f"p50 {lat['p50_ms']:.3f} ms, p95 {lat['p95_ms']:.3f} ms, max {lat['max_ms']:.3f} ms "
        f"(CPU p50 {lat['cpu_p50_ms']:.3f}, p95 {lat['cpu_p95_ms']:.3f})",
        f"substring baseline latency: p50 {blat['p50_ms']:.3f} ms, p95 {blat['p95_ms']:.3f} ms "
        f"(CPU p50 {blat['cpu_p50_ms']:.3f}, p95 {blat['cpu_p95_ms']:.3f})",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pad", type=int, default=3000, help="catalog size for the large run (default 3000)")
    parser.add_argument("--repeat", type=int, default=20, help="times each query is timed (default 20)")
    parser.add_argument("--build-runs", type=int, default=5, help="index builds to time (default 5)")
    parser.add_argument("--seed", type=int, default=7, help="seed of the synthetic distractors")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--misses", action="store_true", help="list queries whose relevant tool is not in the top 5"
    )
    args = parser.parse_args(argv)

    result = run(args.pad, args.repeat, args.build_runs, args.seed)
    missed = result.pop("_misses")
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(_table(result))
    if args.misses:
        print(f"\nmisses at {result['small']['tools']} tools ({len(missed)}):", file=sys.stderr)
        for q, ranked in missed:
            print(f"  {q.text!r}  want {sorted(q.relevant)}  got {ranked[:3]}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
