"""The tree API: list, read, module_source, search, restrict, tool lookup, export."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from codemode.calls import ModuleSource
from codemode.catalog import ServerCatalog
from codemode.errors import CodemodeError, NameCollisionError, StubRenderError
from codemode.stubs import TreePathError, VirtualTree, render_tree

if TYPE_CHECKING:
    from .conftest import Kit


@pytest.fixture(scope="module")
def catalogs(kit: Kit):
    crm = kit.catalog(
        "crm",
        kit.make_tool(
            "get_customer",
            {"type": "object", "properties": {"customer_id": {"type": "string"}}},
            description="Fetch one customer by id. Returns the record.",
            annotations={"readOnlyHint": True},
        ),
        kit.make_tool(
            "delete_customer",
            {"type": "object", "properties": {"customer_id": {"type": "string"}}},
            description="Delete a customer permanently.",
        ),
        kit.make_tool(
            "list-invoices",
            {"type": "object", "properties": {"status": {"enum": ["open", "paid"]}}},
            description="List invoices by status.",
        ),
    )
    tickets = kit.catalog(
        "tickets",
        kit.make_tool(
            "open_ticket",
            {"type": "object", "properties": {"title": {"type": "string"}}},
            server="tickets",
            description="Open a support ticket.",
        ),
    )
    return [crm, tickets]


@pytest.fixture(scope="module")
def tree(catalogs: list[ServerCatalog]):
    return render_tree(catalogs)


def test_the_root_lists_the_servers_package_and_the_runtime_stub(tree: VirtualTree):
    assert [(e.path, e.kind) for e in tree.list("")] == [
        ("servers", "directory"),
        ("codemode_runtime.pyi", "file"),
    ]


def test_the_servers_directory_lists_its_index_and_one_directory_per_server(tree: VirtualTree):
    entries = tree.list("servers")
    assert [e.path for e in entries] == ["servers/__init__.py", "servers/crm", "servers/tickets"]
    assert entries[1].summary == "3 tools"


def test_a_server_directory_lists_its_index_then_its_tools(tree: VirtualTree):
    entries = tree.list("servers/crm/")
    assert [e.name for e in entries] == [
        "__init__.py",
        "delete_customer.py",
        "get_customer.py",
        "list_invoices.py",
    ]
    assert entries[2].module == "servers.crm.get_customer"
    assert entries[2].summary == "Fetch one customer by id."


def test_listing_a_file_returns_its_entry(tree: VirtualTree):
    [entry] = tree.list("servers/crm/get_customer.py")
    assert entry.kind == "file"


@pytest.mark.parametrize("path", ["/servers", "servers/../etc", "..", "C:/x", "servers\\crm", "servers/\x00"])
def test_absolute_and_escaping_paths_are_rejected(tree: VirtualTree, path: str):
    with pytest.raises(TreePathError) as info:
        tree.read(path)
    assert isinstance(info.value, KeyError)
    assert isinstance(info.value, CodemodeError)


def test_a_missing_path_is_a_clear_key_error(tree: VirtualTree):
    with pytest.raises(KeyError, match="no such file"):
        tree.read("servers/crm/nope.py")
    with pytest.raises(TreePathError, match="no such file or directory"):
        tree.list("servers/nope")
    with pytest.raises(TreePathError, match="is a directory"):
        tree.read("servers/crm")


def test_read_returns_module_sources_and_the_runtime_stub(tree: VirtualTree):
    assert "def get_customer(" in tree.read("servers/crm/get_customer.py")
    assert tree.read("./servers/crm/get_customer.py") == tree.read("servers/crm/get_customer.py")
    assert "def call_tool(" in tree.read("codemode_runtime.pyi")


def test_module_source_serves_packages_and_modules_by_dotted_name(tree: VirtualTree):
    sources = [tree.module_source(m) for m in ("servers", "servers.crm", "servers.crm.get_customer")]
    assert [s.is_package if s else None for s in sources] == [True, True, False]
    assert tree.module_source("servers.crm.nope") is None
    assert tree.module_source("os") is None
    assert tree.module_source("codemode_runtime") is None


def test_the_tool_behind_a_module_can_be_looked_up_both_ways(tree: VirtualTree):
    spec = tree.tool_for_module("servers.crm.list_invoices")
    assert spec is not None
    assert spec.name == "list-invoices"
    assert tree.tool("crm", "list-invoices") == spec
    assert tree.module_for_tool("crm", "list-invoices") == "servers.crm.list_invoices"
    assert tree.tool("crm", "nope") is None


def test_search_returns_results_at_each_detail_level(tree: VirtualTree):
    [by_name] = tree.search("delete a customer", k=1, detail="name")
    assert by_name.tool == "delete_customer"
    assert by_name.text == "servers.crm.delete_customer"
    assert by_name.import_line == "from servers.crm import delete_customer"
    assert by_name.path == "servers/crm/delete_customer.py"
    [summary] = tree.search("delete a customer", k=1)
    assert summary.text == "servers.crm.delete_customer: Delete a customer permanently."
    [full] = tree.search("delete a customer", k=1, detail="full")
    assert full.text.startswith("def delete_customer(")
    assert "_idempotency_key" in full.text
    assert full.text.rstrip().endswith('"""')
    assert "_arguments" not in full.text


def test_full_detail_includes_the_types_the_signature_uses(tree: VirtualTree, kit: Kit):
    typed = render_tree([kit.catalog("crm", kit.case_tool("output_schema", name="get_invoice"))])
    [hit] = typed.search("invoice", k=1, detail="full")
    assert hit.text.startswith("class GetInvoiceResult(_t.TypedDict):")
    assert "def get_invoice(" in hit.text


def test_search_rejects_unknown_detail_levels_and_handles_k(tree: VirtualTree):
    with pytest.raises(ValueError, match="detail"):
        tree.search("x", detail="everything")  # type: ignore[arg-type]
    assert tree.search("customer", k=0) == []


def test_a_restricted_view_hides_tools_everywhere(tree: VirtualTree):
    view = tree.restrict(lambda spec: spec.name != "delete_customer")
    assert "servers/crm/delete_customer.py" not in [e.path for e in view.list("servers/crm")]
    assert view.module_source("servers.crm.delete_customer") is None
    assert view.tool("crm", "delete_customer") is None
    with pytest.raises(TreePathError):
        view.read("servers/crm/delete_customer.py")
    index = view.read("servers/crm/__init__.py")
    assert "delete_customer" not in index
    assert "1 more tool of this server is not exposed" in index
    assert all(r.tool != "delete_customer" for r in view.search("delete a customer", k=5))
    # the original tree is unchanged
    assert tree.module_source("servers.crm.delete_customer") is not None


def test_a_view_that_hides_a_whole_server_drops_it_from_the_index(tree: VirtualTree):
    view = tree.restrict(lambda spec: spec.server != "tickets")
    assert [e.path for e in view.list("servers")] == ["servers/__init__.py", "servers/crm"]
    assert "tickets" not in view.read("servers/__init__.py")
    assert view.module_source("servers.tickets") is None


def test_views_with_the_same_tools_share_their_package_indexes_and_others_do_not(
    catalogs: list[ServerCatalog],
):
    # serve makes a view per run: its package indexes are rendered and checked once, not per run,
    # and a view that shows fewer tools never gets another view's index.
    tree = render_tree(catalogs)
    some = tree.restrict(lambda spec: spec.name != "delete_customer")
    same = tree.restrict(lambda spec: spec.name != "delete_customer")
    for module in ("servers", "servers.crm", "servers.tickets"):
        first, second = some.module_source(module), same.module_source(module)
        assert first is not None and second is not None
        assert first.source is second.source
    fewer = tree.restrict(lambda spec: spec.name not in ("delete_customer", "get_customer"))
    index = fewer.read("servers/crm/__init__.py")
    assert "get_customer" not in index and "2 more tools of this server are not exposed" in index
    assert "get_customer" in same.read("servers/crm/__init__.py")
    no_tickets = tree.restrict(lambda spec: spec.server != "tickets")
    assert "tickets" not in no_tickets.read("servers/__init__.py")
    assert "tickets" in same.read("servers/__init__.py")


def test_restrictions_compose(tree: VirtualTree):
    view = tree.restrict(lambda s: s.server == "crm").restrict(lambda s: s.name.startswith("get"))
    assert [spec.name for spec in view.tools()] == ["get_customer"]


def test_hidden_tools_do_not_crowd_visible_ones_out_of_a_restricted_search(tree: VirtualTree):
    view = tree.restrict(lambda spec: spec.name != "get_customer")
    assert [r.tool for r in view.search("fetch one customer by id", k=1)] == ["delete_customer"]


def test_rendering_is_deterministic(catalogs: list[ServerCatalog]):
    first, second = render_tree(catalogs), render_tree(list(catalogs))
    assert list(first.files()) == list(second.files())
    for path in first.files():
        assert first.read(path) == second.read(path)


def test_two_servers_with_indistinguishable_names_get_distinct_packages(kit: Kit):
    names = ["my-server", "my_server", "My.Server"]
    tree = render_tree([kit.catalog(name, kit.make_tool("t", server=name)) for name in names])
    dirs = [e.name for e in tree.list("servers")[1:]]
    assert len({d.lower() for d in dirs}) == 3


def test_a_server_listed_twice_is_a_name_collision(kit: Kit):
    with pytest.raises(NameCollisionError):
        render_tree([kit.catalog("crm"), kit.catalog("crm")])


def test_a_tool_that_claims_another_server_is_refused(kit: Kit):
    with pytest.raises(StubRenderError, match="belongs to server"):
        render_tree([kit.catalog("crm", kit.make_tool("x", server="other"))])


def test_export_writes_the_tree_and_the_runtime_stub(tree: VirtualTree, tmp_path: Path):
    tree.export(tmp_path)
    assert (tmp_path / "codemode_runtime.pyi").read_text() == tree.read("codemode_runtime.pyi")
    for path in tree.files():
        assert (tmp_path / path).read_text(encoding="utf-8") == tree.read(path)


def test_a_second_export_replaces_the_first_so_removed_tools_disappear(tree: VirtualTree, tmp_path: Path):
    tree.export(tmp_path)
    tree.restrict(lambda spec: spec.name != "delete_customer").export(tmp_path)
    assert not (tmp_path / "servers/crm/delete_customer.py").exists()
    assert (tmp_path / "servers/crm/get_customer.py").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_export_refuses_to_overwrite_a_servers_directory_it_did_not_write(tree: VirtualTree, tmp_path: Path):
    (tmp_path / "servers").mkdir()
    (tmp_path / "servers" / "mine.py").write_text("precious = True\n")
    with pytest.raises(CodemodeError, match="not written by codemode"):
        tree.export(tmp_path)
    assert (tmp_path / "servers" / "mine.py").exists()


def test_resources_and_prompts_get_their_own_modules(kit: Kit):
    from codemode.catalog import PromptSpec, ResourceSpec

    tree = render_tree(
        [
            kit.catalog(
                "docs",
                resources=[ResourceSpec(server="docs", uri="docs://readme", name="readme")],
                prompts=[PromptSpec(server="docs", name="explain")],
            )
        ]
    )
    names = [e.name for e in tree.list("servers/docs")]
    assert names == ["__init__.py", "_prompts.py", "_resources.py"]
    assert "def read_readme() -> list[_rt.ResourceContents]:" in tree.read("servers/docs/_resources.py")
    assert "def explain() -> list[_rt.PromptMessage]:" in tree.read("servers/docs/_prompts.py")


def test_concurrent_first_reads_render_each_module_once(catalogs: list[ServerCatalog]):
    from concurrent.futures import ThreadPoolExecutor

    tree = render_tree(catalogs)
    with ThreadPoolExecutor(max_workers=8) as pool:

        def first_read(_: int) -> ModuleSource | None:
            return tree.module_source("servers.crm.get_customer")

        sources = list(pool.map(first_read, range(32)))
    assert len({id(s.source) for s in sources if s is not None}) == 1


@pytest.mark.slow
def test_rendering_is_byte_identical_across_processes_with_different_hash_seeds():
    import hashlib
    import os
    import subprocess
    import sys

    script = (
        "import hashlib, sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from conftest import representative_catalogs\n"
        "from codemode.stubs import render_tree\n"
        "tree = render_tree(representative_catalogs())\n"
        "digest = hashlib.sha256()\n"
        "for path in tree.files():\n"
        "    digest.update(path.encode() + b'\\0' + tree.read(path).encode() + b'\\0')\n"
        "print(digest.hexdigest())\n"
    )
    digests: set[str] = set()
    for seed in ("0", "1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
        )
        digests.add(out.stdout.strip())
    assert len(digests) == 1
    assert len(hashlib.sha256().hexdigest()) == len(digests.pop())
