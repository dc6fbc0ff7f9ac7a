"""Ceiling of strict tool-search quality on the benchmark labels: the best any ranker blind to wording can do.

    .venv/bin/python benchmarks/search_ceiling.py               # table, test queries, every tier
    .venv/bin/python benchmarks/search_ceiling.py --split dev   # the tuning queries instead
    .venv/bin/python benchmarks/search_ceiling.py --json        # machine-readable

Why. ``benchmarks/search_bench.py`` scores a BFCL query as a hit only when the ranker returns the
copy of a function that the query's label picked, but the corpus holds up to 66 copies of one
function (same name, reworded description) on servers with meaningless names (``live_multiple_<n>``).
Nothing in the query says which copy is meant, so part of the strict misses cannot be fixed by any
ranker. This script measures how large that part is: the best strict R@k and MRR that an oracle
reaches in expectation when it cannot tell apart tools that are indistinguishable to the query.

Indistinguishable, three definitions (each one a superset of the one before):
  exact        same name, same description and same parameter names: exact duplicates. Only the
               parameters' wording, types, defaults or enums may differ. The most conservative grouping.
  name+params  same name and same parameter names, any description wording.
  name         same name, any wording: the family that the bench's ``R@5~`` / ``MRR~`` count.
The labels already list byte-identical copies as relevant, so an exact group can hold several
relevant tools. Hand-written queries (servers named ``github``, ``slack``...) always use the
``exact`` grouping: there the server is meaningful and tools with one name on two servers differ.

Oracle. It ranks first the group of a relevant tool (the best such group for each metric) and
orders the group's members at random, then anything else. With group size g holding m relevant
tools, expected hit@k = 1 - C(g-m, k) / C(g, k) (= min(1, k/g) for m = 1), and the expected
reciprocal rank is the sum over r of P(first relevant tool at rank r) / r with
P(r) = C(g-r, m-1) / C(g, m), counted up to rank 10 like the bench (= mean of 1/r over r = 1..g
for m = 1 and g <= 10). A ranker that cannot separate the members of a group scores, on average
over which member the label picked, no better than this. That holds for ``exact`` almost without
condition (only parameter wording, types, defaults or enums could tell such copies apart); under
``name+params`` and ``name`` it is the bound for a ranker that finds the right function but
cannot use the description's wording to pick the labelled copy, and a ranker could exceed it only
by matching a query's wording to one copy's.

Tiers, splits, categories and the queries scored at each tier are those of ``search_bench.py``
(imported, not copied). ``g>=5`` / ``g>=10`` count the queries whose label's group holds at least
5 / 10 tools; under ``name`` that is a label whose name occurs at least 5 / 10 times in the tier.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.search_bench import (  # noqa: E402
    BFCL_QUERIES_FILE,
    BFCL_TOOLS_FILE,
    DEPTH,
    TIERS,
    Query,
    load_documents,
    load_queries,
    queries_for,
    tier_catalogs,
)
from codemode.search import SearchDocument  # noqa: E402

KS = (1, 3, 5, 10)
TARGET_R5 = 0.95
TARGET_MRR = 0.85
GROUP_SIZES = (5, 10)

GroupKey = Callable[[SearchDocument], tuple[object, ...]]


def _param_names(doc: SearchDocument) -> tuple[str, ...]:
    return tuple(sorted(name for name, _ in doc.parameters))


DEFINITIONS: dict[str, GroupKey] = {
    "exact": lambda d: (d.name, d.description, _param_names(d)),
    "name+params": lambda d: (d.name, _param_names(d)),
    "name": lambda d: (d.name,),
}


# -- expected metrics of a random order within one group --------------------------------------------


def expected_hit(g: int, m: int, k: int) -> float:
    """P(a relevant tool in the first k) when g tools, m of them relevant, are shuffled."""
    if m <= 0:
        return 0.0
    return 1.0 - math.comb(g - m, k) / math.comb(g, k) if k < g else 1.0


def expected_rr(g: int, m: int, depth: int = DEPTH) -> float:
    """Expected reciprocal rank of the first relevant one of g shuffled tools (m relevant), 0 past depth."""
    if m <= 0:
        return 0.0
    total = math.comb(g, m)
    return sum(math.comb(g - r, m - 1) / total / r for r in range(1, min(depth, g - m + 1) + 1))


# -- the oracle -------------------------------------------------------------------------------------


def groups_of(catalog: Sequence[SearchDocument], key: GroupKey) -> dict[str, frozenset[str]]:
    """Tool key -> the keys of every tool in the catalog indistinguishable from it (itself included)."""
    by_key: dict[tuple[object, ...], set[str]] = {}
    for doc in catalog:
        by_key.setdefault(key(doc), set()).add(doc.key)
    return {doc.key: frozenset(by_key[key(doc)]) for doc in catalog}


def oracle(q: Query, groups: dict[str, frozenset[str]]) -> dict[str, float]:
    """Best expected strict metrics over the groups holding a relevant tool, and the label's group size."""
    candidates = {groups[r] for r in q.relevant}
    sizes = [(len(group), len(group & q.relevant)) for group in candidates]
    out = {f"R@{k}": max(expected_hit(g, m, k) for g, m in sizes) for k in KS}
    out["MRR"] = max(expected_rr(g, m) for g, m in sizes)
    out["g"] = float(min(g for g, _ in sizes))
    return out


def summarise(per_query: Sequence[dict[str, float]]) -> dict[str, float]:
    n = len(per_query)
    out = {c: sum(p[c] for p in per_query) / (n or 1) for c in (*(f"R@{k}" for k in KS), "MRR")}
    for size in GROUP_SIZES:
        out[f"g>={size}"] = float(sum(p["g"] >= size for p in per_query))
    out["mean g"] = sum(p["g"] for p in per_query) / (n or 1)
    out["n"] = float(n)
    return out


def run(split: str) -> dict[str, Any]:
    hand, bfcl = load_documents(), load_documents(BFCL_TOOLS_FILE)
    everything = [q for q in load_queries() + load_queries(BFCL_QUERIES_FILE) if split in ("all", q.split)]
    tiers: list[dict[str, Any]] = []
    for docs in tier_catalogs(hand, bfcl, TIERS):
        queries = queries_for(docs, everything)
        kinds = sorted({q.kind for q in queries})
        exact = groups_of(docs, DEFINITIONS["exact"])
        tier: dict[str, Any] = {
            "tools": len(docs),
            "servers": len({d.server for d in docs}),
            "definitions": {},
        }
        for name, key in DEFINITIONS.items():
            groups = groups_of(docs, key)
            scored = [(q, oracle(q, groups if q.kind.startswith("bfcl:") else exact)) for q in queries]
            tier["definitions"][name] = {
                "all": summarise([p for _, p in scored]),
                "kinds": {kind: summarise([p for q, p in scored if q.kind == kind]) for kind in kinds},
            }
        tiers.append(tier)
    return {"split": split, "target": {"R@5": TARGET_R5, "MRR": TARGET_MRR}, "tiers": tiers}


# -- output -----------------------------------------------------------------------------------------

_COLS = ("R@1", "R@3", "R@5", "R@10", "MRR")


def _row(label: str, m: dict[str, float]) -> str:
    return (
        f"  {label:<28}{int(m['n']):>6}"
        + "".join(f"{m[c]:>8.3f}" for c in _COLS)
        + "".join(f"{int(m[f'g>={s}']):>8}" for s in GROUP_SIZES)
        + f"{m['mean g']:>8.2f}"
    )


def _verdict(m: dict[str, float]) -> str:
    ok_r5, ok_mrr = m["R@5"] >= TARGET_R5, m["MRR"] >= TARGET_MRR
    return (
        f"target R@5 >= {TARGET_R5}: {'reachable' if ok_r5 else 'UNREACHABLE'}, "
        f"MRR >= {TARGET_MRR}: {'reachable' if ok_mrr else 'UNREACHABLE'}"
    )


def table(result: dict[str, Any]) -> str:
    lines = [
        f"strict-metric ceiling of an oracle that cannot tell indistinguishable tools apart, "
        f"{result['split']} queries"
    ]
    header = (
        f"  {'':<28}{'n':>6}"
        + "".join(f"{c:>8}" for c in _COLS)
        + "".join(f"{f'g>={s}':>8}" for s in GROUP_SIZES)
        + f"{'mean g':>8}"
    )
    for tier in result["tiers"]:
        for name, d in tier["definitions"].items():
            lines += [
                "",
                f"{tier['tools']} tools, {tier['servers']} servers — indistinguishable = {name}: "
                + _verdict(d["all"]),
                header,
                _row("all", d["all"]),
            ]
            lines += [_row(kind, m) for kind, m in d["kinds"].items()]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--split", choices=("test", "dev", "all"), default="test")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    result = run(args.split)
    print(json.dumps(result, indent=2) if args.json else table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
