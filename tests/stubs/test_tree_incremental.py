"""render_tree(..., previous=tree): only changed servers are rendered again, and the search indexes
are the previous ones updated, yet every answer equals that of a tree rendered from scratch."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from codemode.catalog import ServerCatalog, ToolSpec, tool_hash
from codemode.search import ToolIndex
from codemode.stubs import VirtualTree, _render_server, render_tree

QUERIES = ("get a customer", "list invoices", "open ticket", "weather in paris", "delete", "b_tool_2")


def tool(server: str, name: str, description: str, params: Sequence[str] = ("id",)) -> ToolSpec:
    definition: dict[str, Any] = {
        "name": name,
        "title": None,
        "description": description,
        "input_schema": {"type": "object", "properties": {p: {"type": "string"} for p in params}},
        "output_schema": None,
        "annotations": None,
    }
    return ToolSpec(server=server, schema_hash=tool_hash(**definition), **definition)


TOPICS = ("customer record", "invoice list", "support ticket", "weather forecast")


def server(name: str, count: int = 4) -> ServerCatalog:
    tools = tuple(
        tool(name, f"{name}_tool_{i}", f"Get the {TOPICS[i % len(TOPICS)]} from {name}.")
        for i in range(count)
    )
    return ServerCatalog(server=name, tools=tools)


BEFORE = [server("a"), server("b"), server("c")]


def changed_b() -> ServerCatalog:
    """Server b re-listed: one tool changed, one removed, one added."""
    old = BEFORE[1].tools
    return ServerCatalog(
        server="b",
        tools=(
            old[0],
            tool("b", "b_tool_1", "Delete an invoice for good."),
            old[3],
            tool("b", "b_tool_9", "Open a support ticket about the weather.", ("title", "body")),
        ),
    )


AFTER = [BEFORE[0], changed_b(), BEFORE[2]]


def answers(tree: VirtualTree) -> list[object]:
    return [tree.search(q, k=k, detail=d) for q in QUERIES for k in (1, 5, 50) for d in ("name", "summary")]


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The tools rendered from now on, by name."""
    rendered: list[str] = []
    original = _render_server.render_tool

    def render_tool(spec: ToolSpec, ident: str) -> str:
        rendered.append(spec.name)
        return original(spec, ident)

    monkeypatch.setattr(_render_server, "render_tool", render_tool)
    return rendered


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the search indexes built from scratch from now on."""
    sizes: list[int] = []
    original: Callable[..., ToolIndex] = ToolIndex.build

    def build(documents: Sequence[Any], **options: Any) -> ToolIndex:
        sizes.append(len(documents))
        return original(documents, **options)

    monkeypatch.setattr(ToolIndex, "build", build)
    return sizes


def test_only_the_changed_server_is_rendered_again(counted: list[str]) -> None:
    before = render_tree(BEFORE)
    before.render_all()
    counted.clear()
    after = render_tree(AFTER, previous=before)
    after.render_all()
    assert sorted(counted) == ["b_tool_0", "b_tool_1", "b_tool_3", "b_tool_9"]
    reused = "servers/a/a_tool_0.py"
    assert after.read(reused) is before.read(reused), "an unchanged server keeps its rendered modules"
    fresh = render_tree(AFTER)
    assert {p: after.read(p) for p in after.files()} == {p: fresh.read(p) for p in fresh.files()}


def test_the_search_index_is_updated_not_rebuilt_and_answers_as_a_fresh_tree(builds: list[int]) -> None:
    before = render_tree(BEFORE)
    before.build_index()
    assert builds == [12]
    after = render_tree(AFTER, previous=before)
    got = answers(after)
    assert builds == [12], "the index of the new tree comes from updating the previous one"
    assert got == answers(render_tree(AFTER))


def test_principal_views_are_updated_from_their_previous_indexes(builds: list[int]) -> None:
    def hide_c(spec: ToolSpec) -> bool:
        return spec.server != "c"

    def only_b(spec: ToolSpec) -> bool:
        return spec.server == "b"

    before = render_tree(BEFORE)
    for view in (before, before.restrict(hide_c), before.restrict(only_b)):
        view.build_index()
    built = len(builds)
    after = render_tree(AFTER, previous=before)
    views = (after, after.restrict(hide_c), after.restrict(only_b))
    got = [answers(view) for view in views]
    assert len(builds) == built, "every view was updated from the previous tree's index of it"
    fresh = render_tree(AFTER)
    assert got == [answers(view) for view in (fresh, fresh.restrict(hide_c), fresh.restrict(only_b))]


def test_servers_may_come_and_go_and_a_chain_of_trees_stays_exact() -> None:
    steps = [
        [BEFORE[0], BEFORE[2]],  # b gone
        [BEFORE[0], BEFORE[2], server("d", 6)],  # d added
        [server("a", 2), server("d", 6), changed_b()],  # a shrinks, c gone, b back
        [],  # nothing at all
        AFTER,
    ]
    tree = render_tree(BEFORE)
    tree.build_index()
    for catalogs in steps:
        tree = render_tree(catalogs, previous=tree)
        assert answers(tree) == answers(render_tree(catalogs))
        assert [e.path for e in tree.list("servers")] == [
            e.path for e in render_tree(catalogs).list("servers")
        ]


def test_a_previous_tree_that_was_never_searched_only_costs_a_build(builds: list[int]) -> None:
    after = render_tree(AFTER, previous=render_tree(BEFORE))
    assert answers(after) == answers(render_tree(AFTER))
    assert builds[0] == 12


def test_the_previous_tree_keeps_answering_as_before() -> None:
    before = render_tree(BEFORE)
    expected = answers(before)
    after = render_tree(AFTER, previous=before)
    answers(after)
    assert answers(before) == expected
