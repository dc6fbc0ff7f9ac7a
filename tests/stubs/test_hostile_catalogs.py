"""A hostile definition costs its own module, never the tree, a search or an export, and never
stalls the host: inputs sized so that the quadratic walks they once took outlast the suite's
timeout, and counters where a walk can be counted."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any, cast

import pytest

from codemode.catalog import PromptArgumentSpec, PromptSpec, ResourceTemplateSpec
from codemode.engine._engine import CodeMode
from codemode.engine._tools import dispatch
from codemode.errors import NameCollisionError
from codemode.stubs import VirtualTree, render_tree
from codemode.stubs._module_types import ModuleTypes
from codemode.stubs._names import NameKind, assign_identifiers, identifiers_apart
from codemode.stubs._pytype import ANY, PyType, union
from codemode.stubs._render_resources import render_resources
from codemode.stubs._render_tool import render_tool
from codemode.stubs._sanitize import clean_text
from codemode.stubs._schema_document import SchemaDocument
from tests.stubs.conftest import Kit

# Three valid tool names whose identifiers clash even after disambiguation: "a-b" and "a.b" both
# become a_b plus a hash of their name, and a third tool is named exactly like one of those.
CLASHING = ("a-b", "a.b", f"a_b_{hashlib.sha256(b'a-b').hexdigest()[:8]}")


def test_trailing_spaces_go_line_by_line_and_a_long_run_of_tabs_costs_a_single_pass() -> None:
    assert clean_text("a \t \nb  \n\tc\t", 100) == "a\nb\n    c"
    # A quarter of a million tabs and no newline: the regex this replaced backtracked over them
    # for hours. The limit keeps them all in play.
    assert clean_text("x" + "\t" * 250_000 + "y", 2_000_000) == "x" + " " * 1_000_000 + "y"


def test_a_pointer_is_walked_once_however_often_it_is_followed(monkeypatch: pytest.MonkeyPatch) -> None:
    document = SchemaDocument({"a": {"b": [{"c": 1}]}})
    walks: list[str] = []
    walk = document._walk  # pyright: ignore[reportPrivateUsage]

    def counted(pointer: str) -> object:
        walks.append(pointer)
        return walk(pointer)

    monkeypatch.setattr(document, "_walk", counted)
    assert [document.lookup("/a/b/0/c") for _ in range(1_000)] == [1] * 1_000
    assert document.lookup("/a/missing") is document.lookup("/a/missing")
    assert walks == ["/a/b/0/c", "/a/missing"]


@pytest.mark.parametrize("token", ["\u00b2", "1" * 5_000, "0x1"])
def test_a_list_index_is_plain_ascii_digits_of_a_sane_length(token: str) -> None:
    assert SchemaDocument({"l": [0, 1]}).lookup(f"/l/{token}") is not None  # MISSING, not a crash
    schema: dict[str, Any] = {
        "type": "object",
        "anyOf": [{"type": "object"}],
        "properties": {"q": {"$ref": f"#/anyOf/{token}"}},
    }
    assert "q: _t.Any" in render_tool(Kit.make_tool("t", schema), "t")


def test_a_new_name_resumes_where_the_last_one_with_its_hint_stopped() -> None:
    class CountingSet(set[str]):
        probes = 0

        def __contains__(self, item: object) -> bool:
            CountingSet.probes += 1
            return super().__contains__(item)

    types = ModuleTypes(reserved=())
    types._taken = CountingSet(types._taken)  # pyright: ignore[reportPrivateUsage]
    names = [types.new_name("Node") for _ in range(2_000)]
    assert names[:3] == ["Node", "Node2", "Node3"] and len(set(names)) == 2_000
    assert CountingSet.probes < 5_000  # was about 2 million: every call probed from Node on


def test_a_wide_union_stops_at_its_cap_without_comparing_every_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    compared = 0
    equal = PyType.__eq__

    def counting(self: PyType, other: object) -> bool:
        nonlocal compared
        compared += 1
        return equal(self, other)

    monkeypatch.setattr(PyType, "__eq__", counting)
    members = [PyType("named", f"T{i}") for i in range(5_000)]
    assert union(members) is ANY
    assert compared < 100
    assert union([members[0], members[1], members[0]]).text == "T0 | T1"


def test_a_uri_template_with_hundreds_of_variables_takes_the_whole_uri() -> None:
    template = "x://" + "/".join(f"{{v{i}}}" for i in range(2_000))
    source = render_resources(
        "evil", (), (ResourceTemplateSpec(server="evil", uri_template=template, name="t"),)
    )
    assert "def read_t(*, uri: str)" in source


def test_tools_whose_names_clash_after_disambiguation_are_left_out_alone(
    kit: Kit, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(NameCollisionError, match="even after disambiguation"):
        assign_identifiers(CLASHING, NameKind.TOOL, where="tools")
    ids, left_out = identifiers_apart(CLASHING, NameKind.TOOL, where="tools")
    assert list(ids) == ["a.b"] and set(left_out) == {CLASHING[0], CLASHING[2]}
    good = kit.catalog("good", kit.make_tool("send_email", server="good"))
    evil = kit.catalog("evil", *(kit.make_tool(name, server="evil") for name in CLASHING))
    with caplog.at_level(logging.WARNING, logger="codemode.stubs"):
        tree = render_tree([good, evil])
    assert "servers/good/send_email.py" in tree.files()
    assert [e.name for e in tree.list("servers/evil")] == ["__init__.py", f"a_b_{_suffix('a.b')}.py"]
    assert "2 more tools of this server are not exposed" in tree.read("servers/evil/__init__.py")
    assert "rename one of them on the server" in caplog.text


def _suffix(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:8]


def _tree_with_an_unrenderable_tool(kit: Kit) -> VirtualTree:
    """``send_email`` renders; ``evil`` cannot (its parameters clash), nor can the prompts."""
    properties = {name: {"type": "string", "description": "send email message"} for name in CLASHING}
    prompts = (PromptSpec(server="evil", name="p", arguments=(PromptArgumentSpec(name="a"),) * 2),)
    return render_tree(
        [
            kit.catalog("good", kit.make_tool("send_email", server="good", description="Send an email")),
            kit.catalog(
                "bad",
                kit.make_tool("evil", {"type": "object", "properties": properties}, server="bad"),
                prompts=prompts,
            ),
        ]
    )


def test_one_module_that_cannot_be_rendered_is_left_out_of_an_export(kit: Kit, tmp_path: Path) -> None:
    tree = _tree_with_an_unrenderable_tool(kit)
    for path in ("servers/bad/evil.py", "servers/bad/_prompts.py"):
        with pytest.raises(NameCollisionError):
            tree.read(path)
    tree.export(tmp_path)
    assert (tmp_path / "servers" / "good" / "send_email.py").read_text() == tree.read(
        "servers/good/send_email.py"
    )
    assert not (tmp_path / "servers" / "bad" / "evil.py").exists()
    assert not (tmp_path / "servers" / "bad" / "_prompts.py").exists()


def test_a_full_search_shows_an_unrenderable_tool_by_its_summary(kit: Kit) -> None:
    hits = {
        hit.tool: hit for hit in _tree_with_an_unrenderable_tool(kit).search("send email", k=5, detail="full")
    }
    assert "def send_email(" in hits["send_email"].text
    assert "cannot be rendered safely" in hits["evil"].text


class _Engine:
    def __init__(self, tree: VirtualTree) -> None:
        self.tree = tree

    def tree_for(self, principal: str | None = None) -> VirtualTree:
        return self.tree

    async def tree_with_skills(self, principal: str | None = None, tenant: str | None = None) -> VirtualTree:
        return self.tree


@pytest.mark.anyio
async def test_the_model_s_file_and_search_tools_answer_errors_not_exceptions(kit: Kit) -> None:
    engine = cast(CodeMode, _Engine(_tree_with_an_unrenderable_tool(kit)))
    for path in ("servers/bad/evil.py", "servers/bad/_prompts.py"):
        reply = await dispatch(engine, "read_file", {"path": path})
        assert reply.is_error and reply.text == "this module's definition cannot be rendered safely"
    reply = await dispatch(engine, "search_tools", {"query": "email", "k": "five"})
    assert reply.is_error and "k must be a whole number" in reply.text
    assert not (await dispatch(engine, "search_tools", {"query": "email", "detail": "full"})).is_error
