"""Rebuild ``bfcl_tools.json`` and ``bfcl_queries.json`` from a BFCL-derived MCP tool corpus.

    python benchmarks/data/build_bfcl.py CORPUS_DIR

``CORPUS_DIR`` holds ``tools.json`` (``{"servers": [{"name", "tools": [...]}]}``) and ``queries.jsonl``
(``{"id", "query", "tool"}`` per line), the Berkeley Function Calling Leaderboard v4 data converted to the
MCP tool shape (see README.md here). The output is deterministic.

Two choices are made here rather than in the benchmark:

* Relevance. BFCL offers the same function in many sets, so the corpus holds byte-identical tools under
  different servers. A query is labelled with every tool identical to its expected one (same name,
  description and input schema): no ranker could tell them apart, and the copies are interchangeable.
* Split. A stable hash of the query id puts 30% of the queries in ``dev`` (tune on these) and the rest
  in ``test`` (report these).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEV_SHARE = 30  # percent


def _fingerprint(tool: dict[str, Any]) -> str:
    return json.dumps(
        [tool["name"], tool.get("description", ""), tool.get("inputSchema", {})], sort_keys=True
    )


def _split(query_id: str) -> str:
    bucket = int(hashlib.sha256(query_id.encode()).hexdigest()[:8], 16) % 100
    return "dev" if bucket < DEV_SHARE else "test"


def _kind(query_id: str) -> str:
    # "live_multiple_12-3-4" / "simple_python_7" -> the BFCL category
    category = query_id.rsplit("_", 1)[0]
    return f"bfcl:{category}"


def main(corpus: Path) -> None:
    catalog = json.loads((corpus / "tools.json").read_text(encoding="utf-8"))
    same: dict[str, list[str]] = {}
    key_fp: dict[str, str] = {}
    servers: list[dict[str, Any]] = []
    for server in catalog["servers"]:
        tools: list[dict[str, Any]] = []
        for tool in server["tools"]:
            key = f"{server['name']}/{tool['name']}"
            fp = _fingerprint(tool)
            key_fp[key] = fp
            same.setdefault(fp, []).append(key)
            kept = {"name": tool["name"], "description": tool.get("description", "")}
            kept["inputSchema"] = tool.get("inputSchema", {"type": "object"})
            tools.append(kept)
        servers.append({"name": server["name"], "tools": tools})
    out_tools = {
        "version": 1,
        "source": "Berkeley Function Calling Leaderboard v4 (bfcl-eval 2026.3.23), Apache-2.0, "
        "in MCP tool shape",
        "servers": servers,
    }
    queries: list[dict[str, Any]] = []
    for line in (corpus / "queries.jsonl").read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        q = json.loads(line)
        relevant = sorted(same[key_fp[q["tool"]]])
        queries.append(
            {
                "id": q["id"],
                "query": q["query"],
                "relevant": relevant,
                "kind": _kind(q["id"]),
                "split": _split(q["id"]),
            }
        )
    out_queries = {
        "version": 1,
        "note": "BFCL v4 queries with one expected tool; 'relevant' adds the tool's identical copies. "
        "split: dev (tune) / test (report).",
        "queries": queries,
    }
    (HERE / "bfcl_tools.json").write_text(
        json.dumps(out_tools, separators=(",", ":")) + "\n", encoding="utf-8"
    )
    (HERE / "bfcl_queries.json").write_text(json.dumps(out_queries, indent=0) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
