"""Catalog scale: how each mode's cost grows as the catalog grows, and how well discovery finds
the right tool among more and more others.

The catalog grows from the configured servers' tools by a deterministic prefix of extra tools:
a tool corpus in the format ``tools.json`` + ``queries.jsonl`` (``--corpus DIR``; each query
names its one expected tool as ``server/tool``), else generated tools with realistic names,
descriptions and schemas. At each size the measured conversations are re-priced: every direct
request carries the definitions of all N tools, every code-mode request carries ``run_code``
(whose server index lists the grown catalog) and the discovery tools. Discovery quality is
codemode's own tool index queried at that size (Recall@k: the expected tool is in the top k;
MRR: mean reciprocal rank of the expected tool within the top 10).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from codemode.bench._accounting import Tokenizer, compact
from codemode.bench._taskrun import TaskRun
from codemode.engine import definitions, render_definition
from codemode.search import SearchDocument, ToolIndex

KS = (1, 3, 5)
MRR_DEPTH = 10
MAX_QUERIES = 400
Tool = dict[str, Any]

# Queries for the bundled example servers' tools, so discovery is measured on them at every size.
EXAMPLE_QUERIES: tuple[tuple[str, str], ...] = (
    ("read rows of a spreadsheet page by page", "docs/get_sheet"),
    ("find rows in a sheet where a column equals a value", "docs/query_sheet"),
    ("get the full text of a document", "docs/get_document"),
    ("search meeting notes and memos by keyword", "docs/search_documents"),
    ("look up a customer record by id", "crm/get_customer"),
    ("add a note to a customer", "crm/add_note"),
    ("change a customer's email address", "crm/update_customer_email"),
    ("record a payment from a customer", "crm/record_payment"),
    ("list support tickets of a customer", "tickets/list_tickets"),
    ("comment on a support ticket", "tickets/add_comment"),
    ("close a ticket with a resolution", "tickets/close_ticket"),
    ("assign a ticket to someone", "tickets/assign_ticket"),
)

# Word tables for generated tools read better as text.
_VERBS = "list get create update delete search export archive send approve assign close schedule upload count".split()  # noqa: SIM905, E501
_NOUNS = (  # noqa: SIM905
    "invoice payment order shipment product report contact lead deal project task comment event meeting "
    "folder page database job pipeline deployment container bucket secret webhook alert incident metric "
    "dashboard label branch release repository member role subscription refund workspace survey article "
    "device sensor route vehicle booking room"
).split()
_DOMAINS = "billing analytics hr marketing logistics cms erp devops monitoring ecommerce iot fleet wiki storage".split()  # noqa: SIM905, E501
_QUALIFIERS = (
    "by id",
    "in bulk",
    "for a project",
    "by status",
    "by date range",
    "for an account",
    "with filters",
)
_FIELDS = {
    "id": ("string", "identifier of the {noun}"),
    "status": ("string", "filter by status, e.g. open or closed"),
    "limit": ("integer", "page size, 1-200"),
    "cursor": ("string", "pagination cursor from the previous page"),
    "created_after": ("string", "ISO date; only {noun}s created after it"),
    "owner": ("string", "user id of the {noun}'s owner"),
    "tags": ("array", "tags to match"),
    "amount": ("number", "amount in the account currency"),
    "notify": ("boolean", "send a notification to watchers"),
}


def generated_tools(n: int, seed: int = 7) -> tuple[list[tuple[str, Tool]], list[tuple[str, str]]]:
    """``n`` deterministic tools as ``(server, tool)`` pairs, and one query per tool."""
    rng = random.Random(seed)  # noqa: S311 - a reproducible catalog, not a secret
    tools: list[tuple[str, Tool]] = []
    queries: list[tuple[str, str]] = []
    seen: set[str] = set()
    server_i = 0
    while len(tools) < n:
        server_i += 1
        domain = rng.choice(_DOMAINS)
        server = f"{domain}{server_i:03d}"
        for _ in range(rng.randint(8, 30)):
            if len(tools) >= n:
                break
            verb, noun, qual = rng.choice(_VERBS), rng.choice(_NOUNS), rng.choice(_QUALIFIERS)
            name = f"{verb}_{noun}s" if verb in ("list", "search", "export", "count") else f"{verb}_{noun}"
            if f"{server}/{name}" in seen:
                continue
            seen.add(f"{server}/{name}")
            fields = rng.sample(sorted(_FIELDS), rng.randint(2, 5))
            properties = {
                f: {"type": _FIELDS[f][0], "description": _FIELDS[f][1].format(noun=noun)} for f in fields
            }
            description = (
                f"{verb.capitalize()} {noun}s {qual} in the {domain} service. "
                f"Returns the {noun} records with {', '.join(fields[:2])}."
            )
            schema = {"type": "object", "properties": properties, "required": fields[:1]}
            tools.append((server, {"name": name, "description": description, "inputSchema": schema}))
            queries.append((f"{verb} {domain} {noun}s {qual}", f"{server}/{name}"))
    return tools, queries


def corpus_tools(directory: Path, seed: int = 7) -> tuple[list[tuple[str, Tool]], list[tuple[str, str]]]:
    """Every tool of a corpus directory (shuffled deterministically) and its labelled queries."""
    catalog = json.loads((directory / "tools.json").read_text(encoding="utf-8"))
    tools = [(str(s["name"]), dict(t)) for s in catalog["servers"] for t in s["tools"]]
    random.Random(seed).shuffle(tools)  # noqa: S311 - reproducible order
    queries: list[tuple[str, str]] = []
    for line in (directory / "queries.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            item = json.loads(line)
            queries.append((str(item["query"]), str(item["tool"])))
    return tools, queries


@dataclass(frozen=True)
class SizePoint:
    tools: int
    direct_definition_tokens: int
    codemode_definition_tokens: int
    direct_tokens: int
    codemode_tokens: int
    """The suite's total tokens per mode, re-priced at this catalog size."""
    queries: int
    quality: dict[str, float]


def _document(server: str, tool: Tool) -> SearchDocument:
    schema = cast(dict[str, Any], tool.get("inputSchema") or {})
    props = cast(dict[str, Any], schema.get("properties") or {})
    return SearchDocument(
        key=f"{server}/{tool['name']}",
        server=server,
        name=str(tool["name"]),
        title=tool.get("title"),
        description=str(tool.get("description") or ""),
        parameters=tuple((str(k), _param_description(v)) for k, v in props.items()),
    )


def _param_description(spec: Any) -> str:
    return str(cast(dict[str, Any], spec).get("description", "")) if isinstance(spec, dict) else ""


def _quality(index: ToolIndex, queries: list[tuple[str, str]]) -> dict[str, float]:
    hits = dict.fromkeys(KS, 0)
    rr = 0.0
    for text, expected in queries:
        ranked = [hit.key for hit in index.search(text, MRR_DEPTH)]
        if expected in ranked:
            rank = ranked.index(expected)
            rr += 1.0 / (rank + 1)
            for k in KS:
                hits[k] += rank < k
    n = len(queries) or 1
    out = {f"recall@{k}": round(hits[k] / n, 3) for k in KS}
    out["mrr"] = round(rr / n, 3)
    return out


def catalog_series(
    base: list[tuple[str, Tool]],
    runs: list[TaskRun],
    sizes: list[int],
    tokenizer: Tokenizer,
    *,
    corpus: Path | None = None,
) -> tuple[list[SizePoint], str]:
    """Cost and discovery quality at each catalog size (sizes below the base count are skipped)."""
    extra_needed = max(max(sizes, default=0) - len(base), 0)
    if corpus is not None:
        extra, extra_queries = corpus_tools(corpus)
        source = f"corpus ({len(extra)} tools)"
    else:
        extra, extra_queries = generated_tools(extra_needed)
        source = "generated tools"
    base_keys = {f"{s}/{t['name']}" for s, t in base}
    example_queries = [(q, key) for q, key in EXAMPLE_QUERIES if key in base_keys]
    base_direct = _direct_tokens(base, tokenizer)
    base_codemode = _codemode_tokens(base, tokenizer)
    points: list[SizePoint] = []
    for size in sorted({s for s in sizes if s >= len(base)} | {len(base)}):
        catalog = base + extra[: size - len(base)]
        keys = {f"{s}/{t['name']}" for s, t in catalog}
        queries = example_queries + [(q, k) for q, k in extra_queries if k in keys]
        if len(queries) > MAX_QUERIES:
            queries = (
                example_queries
                + random.Random(size).sample(  # noqa: S311 - reproducible sample
                    queries[len(example_queries) :], MAX_QUERIES
                )
            )
        direct_defs = _direct_tokens(catalog, tokenizer)
        codemode_defs = _codemode_tokens(catalog, tokenizer)
        totals = {"direct": 0, "codemode": 0}
        for run in runs:
            if run.mode not in totals:
                continue  # code mode with skills is its own comparison (the report's skills section)
            delta = direct_defs - base_direct if run.mode == "direct" else codemode_defs - base_codemode
            totals[run.mode] += run.input_tokens + run.output_tokens + delta * len(run.turns)
        index = ToolIndex.build([_document(s, t) for s, t in catalog])
        points.append(
            SizePoint(
                tools=len(catalog),
                direct_definition_tokens=direct_defs,
                codemode_definition_tokens=codemode_defs,
                direct_tokens=totals["direct"],
                codemode_tokens=totals["codemode"],
                queries=len(queries),
                quality=_quality(index, queries),
            )
        )
    return points, source


def _direct_tokens(catalog: list[tuple[str, Tool]], tokenizer: Tokenizer) -> int:
    defs = [
        render_definition(
            f"{s}__{t['name']}", str(t.get("description") or ""), t.get("inputSchema") or {}, "openai"
        )
        for s, t in catalog
    ]
    return tokenizer.count(compact(defs))


def _codemode_tokens(catalog: list[tuple[str, Tool]], tokenizer: Tokenizer) -> int:
    servers: dict[str, int] = {}
    for server, _ in catalog:
        servers[server] = servers.get(server, 0) + 1
    return tokenizer.count(compact(definitions("openai", servers=servers)))
