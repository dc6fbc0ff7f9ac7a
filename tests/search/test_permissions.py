"""A principal never finds, lists, reads or counts the tools its policy refuses.

Two in-memory servers (no process): ``crm`` with three tools and ``vault`` with one. The principal
``analyst`` may use ``crm/*`` except ``crm/delete_customer``; ``vault`` is not granted to it at all.
Every check runs once for an unrestricted principal too, so each assertion can fail, and with BM25
alone and fused with the retrieval model (``[search] semantic = "e5"``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp.server.mcpserver import MCPServer

from codemode import CodeMode, config_from_mapping
from codemode.catalog import ServerCatalog, ToolSpec, approve, load_lock, observe, save_lock, tool_hash
from codemode.host import ConnectionState, McpHost
from codemode.stubs import TreePathError, _tree_search, render_tree
from codemode.testing import in_memory_transports

pytestmark = pytest.mark.anyio

HIDDEN = ("delete_customer", "read_secret")
OPEN = "admin"
RESTRICTED = "analyst"


def crm_server() -> MCPServer:
    app = MCPServer("crm")

    @app.tool()
    def get_customer(customer_id: str) -> str:
        """Look up one customer by id."""
        return customer_id

    @app.tool()
    def delete_customer(customer_id: str) -> str:
        """Delete a customer permanently."""
        return customer_id

    @app.tool()
    def list_customers(limit: int = 10) -> str:
        """List customers, newest first."""
        return str(limit)

    return app


def vault_server() -> MCPServer:
    app = MCPServer("vault")

    @app.tool()
    def read_secret(name: str) -> str:
        """Read a secret value from the vault."""
        return name

    return app


def _transports() -> Any:
    return in_memory_transports({"crm": crm_server(), "vault": vault_server()})


@pytest.fixture(params=["off", "e5"])
async def engine(
    tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[CodeMode]:
    if request.param == "e5":
        request.getfixturevalue("e5")  # the model, or the reason there is none
    monkeypatch.setenv("CODEMODE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CODEMODE_SEARCH_SEMANTIC", raising=False)
    monkeypatch.setattr(_tree_search, "_embeddings", None)  # vectors cached under this test's folder
    data: dict[str, Any] = {
        "search": {"semantic": request.param},
        "servers": {
            "crm": {"command": "not-a-real-command", "trusted": True},
            "vault": {"command": "not-a-real-command", "trusted": True},
        },
        "sandbox": {"backend": "process", "pool_size": 0},
        "policy": {
            "default_principal": OPEN,
            "principals": {
                OPEN: {"tools": ["*"]},
                RESTRICTED: {"tools": ["crm/*"], "deny_tools": ["crm/delete_customer"]},
            },
        },
    }
    config = config_from_mapping(data, base_dir=tmp_path)
    async with McpHost(config, transports=_transports()) as host:
        assert all(s.state is ConnectionState.READY for s in host.statuses()), host.statuses()
        lock = load_lock(config.lock_path)
        for catalog in host.catalogs():
            lock, _ = observe(lock, catalog)
        save_lock(config.lock_path, approve(lock)[0])
    async with CodeMode(config, transports=_transports()) as running:
        yield running


def _mentions_hidden(text: str) -> list[str]:
    return [name for name in (*HIDDEN, "vault") if name in text]


@pytest.mark.integration
async def test_search_never_returns_a_refused_tool(engine: CodeMode) -> None:
    for query in ("delete a customer", "delete_customer", "read a secret from the vault", "customer"):
        open_hits = {h.tool for h in engine.search(query, k=10, principal=OPEN)}
        restricted_hits = {h.tool for h in engine.search(query, k=10, principal=RESTRICTED)}
        assert restricted_hits <= {"get_customer", "list_customers"}, query
        assert open_hits - restricted_hits, f"{query!r} should find a hidden tool for {OPEN}"


@pytest.mark.integration
async def test_an_exact_name_query_for_a_refused_tool_finds_nothing_of_it(engine: CodeMode) -> None:
    assert [h.tool for h in engine.search("delete_customer", k=1, principal=OPEN)] == ["delete_customer"]
    hits = engine.search("delete_customer", k=5, principal=RESTRICTED)
    assert "delete_customer" not in {h.tool for h in hits}
    assert not any(
        _mentions_hidden(h.text) for h in engine.search("customer", k=5, detail="full", principal=RESTRICTED)
    )


@pytest.mark.integration
async def test_the_model_facing_search_tool_hides_refused_tools(engine: CodeMode) -> None:
    reply = await engine.handle_tool_call(
        "search_tools", {"query": "delete customer", "k": 10}, principal=RESTRICTED
    )
    assert not reply.is_error
    assert _mentions_hidden(reply.text) == []
    shown = await engine.handle_tool_call(
        "search_tools", {"query": "delete customer", "k": 10}, principal=OPEN
    )
    assert "delete_customer" in shown.text


@pytest.mark.integration
async def test_the_tree_lists_and_reads_only_permitted_tools(engine: CodeMode) -> None:
    open_tree, tree = engine.tree_for(OPEN), engine.tree_for(RESTRICTED)
    assert {e.name for e in open_tree.list("servers/crm")} >= {"delete_customer.py"}
    assert {e.name for e in tree.list("servers/crm")} == {
        "__init__.py",
        "get_customer.py",
        "list_customers.py",
    }
    assert [e.name for e in tree.list("servers") if e.kind == "directory"] == ["crm"]
    with pytest.raises(TreePathError):
        tree.list("servers/vault")
    for path in ("servers/crm/delete_customer.py", "servers/vault/read_secret.py"):
        assert open_tree.read(path)
        with pytest.raises(TreePathError):
            tree.read(path)
    every_file = "\n".join(tree.read(path) for path in tree.files())
    assert _mentions_hidden(every_file) == []
    assert {spec.name for spec in tree.tools()} == {"get_customer", "list_customers"}


@pytest.mark.integration
async def test_read_file_and_list_files_refuse_hidden_paths(engine: CodeMode) -> None:
    read = await engine.handle_tool_call(
        "read_file", {"path": "servers/crm/delete_customer.py"}, principal=RESTRICTED
    )
    assert read.is_error
    assert (
        await engine.handle_tool_call("read_file", {"path": "servers/crm/delete_customer.py"}, principal=OPEN)
    ).is_error is False
    for path in ("", "servers", "servers/crm"):
        listed = await engine.handle_tool_call("list_files", {"path": path}, principal=RESTRICTED)
        assert _mentions_hidden(listed.text) == [], path


@pytest.mark.integration
async def test_counts_cover_only_permitted_tools(engine: CodeMode) -> None:
    assert engine.server_index(OPEN) == {"crm": 3, "vault": 1}
    assert engine.server_index(RESTRICTED) == {"crm": 2}
    tree = engine.tree_for(RESTRICTED)
    summaries = " ".join(e.summary for path in ("", "servers") for e in tree.list(path))
    assert "3 tools" not in summaries and "2 servers" not in summaries
    assert "2 tools" in summaries and "1 server" in summaries
    definitions = json.dumps(engine.tool_definitions(principal=RESTRICTED))
    assert _mentions_hidden(definitions) == []
    assert "vault" in json.dumps(engine.tool_definitions(principal=OPEN))


def _spec(server: str, name: str, description: str) -> ToolSpec:
    digest = tool_hash(
        name=name,
        title=None,
        description=description,
        input_schema={"type": "object"},
        output_schema=None,
        annotations=None,
    )
    return ToolSpec(server=server, name=name, description=description, schema_hash=digest)


def test_scores_of_a_restricted_view_do_not_depend_on_hidden_tools() -> None:
    # BM25 statistics over the whole catalog would let a principal infer hidden tools from scores.
    visible = [
        _spec("crm", "get_customer", "Look up a customer."),
        _spec("crm", "list_orders", "List orders."),
    ]
    hidden = [_spec("crm", f"customer_report_{i}", "Customer report for a customer.") for i in range(20)]
    full = render_tree([ServerCatalog(server="crm", tools=tuple(visible + hidden))])
    alone = render_tree([ServerCatalog(server="crm", tools=tuple(visible))])
    restricted = full.restrict(lambda spec: not spec.name.startswith("customer_report"))
    assert [(h.tool, h.score) for h in restricted.search("customer")] == [
        (h.tool, h.score) for h in alone.search("customer")
    ]
    assert full.search("customer")[0].score != alone.search("customer")[0].score


def test_fused_scores_of_a_restricted_view_do_not_depend_on_hidden_tools(
    e5: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The fusion scales BM25 by the view's best score: hidden tools must not move that either.
    monkeypatch.setenv("CODEMODE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("CODEMODE_SEARCH_SEMANTIC", raising=False)
    monkeypatch.setattr(_tree_search, "_embeddings", None)
    visible = [
        _spec("crm", "get_customer", "Look up a customer."),
        _spec("crm", "list_orders", "List orders."),
    ]
    hidden = [_spec("crm", f"customer_report_{i}", "Customer report for a customer.") for i in range(20)]
    full = render_tree([ServerCatalog(server="crm", tools=tuple(visible + hidden))], semantic="e5")
    alone = render_tree([ServerCatalog(server="crm", tools=tuple(visible))], semantic="e5")
    restricted = full.restrict(lambda spec: not spec.name.startswith("customer_report"))
    assert restricted.search_snapshot()[0].ranker == "hybrid:e5"
    for query in ("customer", "customer report", "which orders were placed"):
        got = [(h.tool, round(h.score, 6)) for h in restricted.search(query)]
        assert got == [(h.tool, round(h.score, 6)) for h in alone.search(query)], query
        assert not any(tool.startswith("customer_report") for tool, _ in got)
    assert full.search("customer report")[0].tool.startswith("customer_report")
