"""Render + index a synthetic 3,000-tool catalog and print how long it takes.

The catalog is deterministic (seeded) and mixes the schema shapes real servers use: a few
scalar parameters, enums, nested objects, arrays of objects, unions, nullable fields,
recursive ``$ref`` s, free-form maps, output schemas, resources and prompts.

    .venv/bin/python benchmarks/stubs_bench.py [--tools 3000] [--servers 60] [--repeat 3] [--json]

Target on the reference machine: render + index <= 1 s. Prints figures only (no asserts).
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import random
import statistics
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from codemode.catalog import (
    PromptArgumentSpec,
    PromptSpec,
    ResourceSpec,
    ResourceTemplateSpec,
    ServerCatalog,
    ToolSpec,
    tool_hash,
)
from codemode.stubs import render_tree

_VERBS = ["get", "list", "create", "update", "delete", "search", "archive", "sync", "export", "count"]
_NOUNS = [
    "customer", "order", "invoice", "ticket", "issue", "repo", "commit", "file", "user", "team",
    "project", "event", "message", "channel", "payment", "refund", "product", "shipment", "lead", "report",
]  # fmt: skip
_WORDS = [
    "the",
    "a",
    "of",
    "to",
    "and",
    "for",
    "with",
    "by",
    "from",
    "in",
    "on",
    "at",
    "account",
    "record",
    "item",
    "status",
    "date",
    "range",
    "filter",
    "page",
    "limit",
    "owner",
    "label",
    "priority",
    "region",
    "currency",
    "amount",
    "total",
    "note",
    "comment",
    "reason",
    "source",
    "target",
]


def _sentence(rng: random.Random, words: int) -> str:
    text = " ".join(rng.choice(_WORDS) for _ in range(words))
    return text[:1].upper() + text[1:] + "."


def _scalar(rng: random.Random) -> dict[str, Any]:
    kind = rng.choice(["string", "string", "integer", "number", "boolean"])
    schema: dict[str, Any] = {"type": kind, "description": _sentence(rng, rng.randint(4, 14))}
    if kind == "string" and rng.random() < 0.2:
        schema["format"] = rng.choice(["date-time", "email", "uri", "uuid"])
    if kind == "integer" and rng.random() < 0.4:
        schema["default"] = rng.randint(1, 100)
    return schema


def _property(rng: random.Random, depth: int) -> dict[str, Any]:
    shape = rng.random()
    if depth > 1 or shape < 0.45:
        return _scalar(rng)
    if shape < 0.55:
        return {
            "type": "string",
            "enum": rng.sample(["open", "closed", "pending", "draft", "done", "failed"], 3),
        }
    if shape < 0.65:
        return {"type": ["string", "null"], "description": _sentence(rng, 6)}
    if shape < 0.75:
        return {"type": "array", "items": {"type": "string"}, "description": _sentence(rng, 5)}
    if shape < 0.83:
        return {"type": "array", "items": _object(rng, depth + 1, rng.randint(2, 4))}
    if shape < 0.90:
        return _object(rng, depth + 1, rng.randint(2, 5))
    if shape < 0.95:
        return {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}], "default": None}
    return {"type": "object", "additionalProperties": {"type": "string"}, "description": "Free-form labels."}


def _object(rng: random.Random, depth: int, size: int) -> dict[str, Any]:
    names = rng.sample(_WORDS, size)
    props = {
        f"{name}_{i}" if rng.random() < 0.3 else name: _property(rng, depth) for i, name in enumerate(names)
    }
    required = [k for k in props if rng.random() < 0.4]
    return {"type": "object", "properties": props, "required": required}


def _tool(rng: random.Random, server: str, index: int) -> ToolSpec:
    verb, noun = rng.choice(_VERBS), rng.choice(_NOUNS)
    name = f"{verb}_{noun}_{index}" if rng.random() < 0.7 else f"{verb}-{noun}-{index}"
    schema = _object(rng, 0, rng.randint(0, 8))
    if rng.random() < 0.05:  # recursive definitions
        schema["$defs"] = {
            "Node": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                },
            }
        }
        schema["properties"]["tree"] = {"$ref": "#/$defs/Node"}
    output = _object(rng, 1, rng.randint(2, 6)) if rng.random() < 0.33 else None
    description = " ".join(_sentence(rng, rng.randint(6, 18)) for _ in range(rng.randint(1, 6)))
    annotations = {"readOnlyHint": True} if verb in ("get", "list", "search", "count") else None
    title = f"{verb.title()} {noun}" if rng.random() < 0.5 else None
    definition: dict[str, Any] = {
        "name": name,
        "title": title,
        "description": description,
        "input_schema": schema,
        "output_schema": output,
        "annotations": annotations,
    }
    return ToolSpec(server=server, schema_hash=tool_hash(**definition), **definition)


def synthesize(tools: int = 3000, servers: int = 60, seed: int = 20260101) -> list[ServerCatalog]:
    """A deterministic catalog of ``tools`` tools spread over ``servers`` servers."""
    rng = random.Random(seed)
    catalogs: list[ServerCatalog] = []
    for s in range(servers):
        server = f"server-{s:02d}"
        count = tools // servers + (1 if s < tools % servers else 0)
        catalogs.append(
            ServerCatalog(
                server=server,
                tools=tuple(_tool(rng, server, i) for i in range(count)),
                resources=tuple(
                    ResourceSpec(
                        server=server,
                        uri=f"mem://{server}/doc/{i}",
                        name=f"doc-{i}",
                        description=_sentence(rng, 6),
                    )
                    for i in range(3)
                ),
                resource_templates=(
                    ResourceTemplateSpec(server=server, uri_template="mem://items/{id}", name="item"),
                ),
                prompts=(
                    PromptSpec(
                        server=server,
                        name="summarize",
                        description=_sentence(rng, 8),
                        arguments=(PromptArgumentSpec(name="topic", required=True),),
                    ),
                ),
            )
        )
    return catalogs


def measure(tools: int, servers: int, repeat: int) -> dict[str, Any]:
    catalogs = synthesize(tools, servers)
    render_times: list[float] = []
    index_times: list[float] = []
    eager_times: list[float] = []
    files = 0
    source_bytes = 0
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        tree = render_tree(catalogs)
        rendered = time.perf_counter()
        tree.build_index()
        indexed = time.perf_counter()
        tree.render_all()
        eager_times.append(time.perf_counter() - indexed)
        render_times.append(rendered - start)
        index_times.append(indexed - rendered)
        paths = [p for p in tree.files() if p.endswith(".py")]
        files = len(paths)
        source_bytes = sum(len(tree.read(p).encode()) for p in paths)

    gc.collect()
    tracemalloc.start()
    tree = render_tree(catalogs)
    tree.build_index()
    _, peak = tracemalloc.get_traced_memory()
    current, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()

    start = time.perf_counter()
    for query in ("find a customer by email", "refund a payment", "list open tickets", "export report"):
        tree.search(query, k=5, detail="full")
    search_ms = (time.perf_counter() - start) / 4 * 1000

    totals = [r + i for r, i in zip(render_times, index_times, strict=True)]
    return {
        "tools": tools,
        "servers": servers,
        "files": files,
        "source_mb": round(source_bytes / 1e6, 2),
        "repeat": repeat,
        "render_s_median": round(statistics.median(render_times), 3),
        "index_s_median": round(statistics.median(index_times), 3),
        "total_s_median": round(statistics.median(totals), 3),
        "total_s_best": round(min(totals), 3),
        "target_s": 1.0,
        "render_all_modules_s_median": round(statistics.median(eager_times), 3),
        "per_module_ms": round(statistics.median(eager_times) / max(files, 1) * 1000, 3),
        "tracemalloc_peak_mb": round(peak / 1e6, 1),
        "tree_retained_mb": round(current / 1e6, 1),
        "search_full_ms": round(search_ms, 2),
        "python": platform.python_version(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n\n")[0])
    parser.add_argument("--tools", type=int, default=3000)
    parser.add_argument("--servers", type=int, default=60)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    result = measure(args.tools, args.servers, args.repeat)
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"stub tree: {result['tools']} tools on {result['servers']} servers -> {result['files']} modules, "
        f"{result['source_mb']} MB of source"
    )
    print(
        f"  render        {result['render_s_median']:.3f} s (median of {result['repeat']};"
        " names, summaries, index modules; tool modules render lazily)"
    )
    print(f"  search index  {result['index_s_median']:.3f} s")
    print(
        f"  total         {result['total_s_median']:.3f} s median, {result['total_s_best']:.3f} s best"
        f" (target <= {result['target_s']:.1f} s)"
    )
    print(
        f"  every module  {result['render_all_modules_s_median']:.3f} s to render + ast-check all modules"
        f" up front ({result['per_module_ms']:.3f} ms each; normally lazy, on first import/read)"
    )
    print(
        f"  memory        {result['tracemalloc_peak_mb']} MB peak while rendering (tracemalloc),"
        f" {result['tree_retained_mb']} MB retained by the tree"
    )
    print(f"  search        {result['search_full_ms']:.2f} ms per query at detail='full'")


if __name__ == "__main__":
    main()
