"""Importing and calling stubs: lazy loading, original argument names, hashes, None, idempotency keys."""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, cast

import pytest

from codemode.catalog import PromptArgumentSpec, PromptSpec, ResourceSpec, ResourceTemplateSpec
from codemode.stubs import VirtualTree, render_tree

if TYPE_CHECKING:
    from .conftest import FakeRuntime, Kit


@pytest.fixture(scope="module")
def tree(kit: Kit):
    crm = kit.catalog(
        "crm",
        kit.make_tool(
            "get-customer",
            {
                "type": "object",
                "properties": {
                    "customer-id": {"type": "string"},
                    "include_orders": {"type": "boolean", "default": False},
                    "region": {"enum": ["eu", "us"]},
                    "from": {"type": "string"},
                },
                "required": ["customer-id"],
            },
            annotations={"readOnlyHint": True},
        ),
        kit.make_tool(
            "delete_customer",
            {
                "type": "object",
                "properties": {"customer_id": {"type": "string"}},
                "required": ["customer_id"],
            },
        ),
        kit.make_tool("list_orders", {"type": "object"}, annotations={"readOnlyHint": True}),
        resources=[ResourceSpec(server="crm", uri="crm://config", name="config")],
        templates=[
            ResourceTemplateSpec(server="crm", uri_template="crm://customers/{id}/notes", name="notes"),
            ResourceTemplateSpec(server="crm", uri_template="file:///{+path}{#section}", name="file"),
        ],
        prompts=[
            PromptSpec(
                server="crm",
                name="summarize",
                arguments=(
                    PromptArgumentSpec(name="customer-id", required=True),
                    PromptArgumentSpec(name="tone"),
                ),
            )
        ],
    )
    return render_tree([crm])


@pytest.fixture(params=["exported", "import-hook"])
def load(
    request: pytest.FixtureRequest, tree: VirtualTree, kit: Kit, tmp_path: Path
) -> Iterator[FakeRuntime]:
    """Import from an exported directory on sys.path, or through an in-memory import hook."""
    runtime = kit.FakeRuntime(result={"ok": True})
    if request.param == "exported":
        tree.export(tmp_path)
        context = kit.importable(None, runtime, tmp_path)
    else:
        context = kit.importable(tree, runtime)
    with context:
        yield runtime


def test_importing_one_tool_loads_only_that_tool_module(load: FakeRuntime):
    from servers.crm import get_customer  # type: ignore[import-not-found]

    loaded = sorted(name for name in sys.modules if name.startswith("servers"))
    assert loaded == ["servers", "servers.crm", "servers.crm.get_customer"]
    assert callable(cast(object, get_customer))  # the generated tree has no static types here


def test_both_import_forms_give_the_same_function_every_time(load: FakeRuntime):
    from servers.crm import get_customer as first  # type: ignore[import-not-found]
    from servers.crm import get_customer as second  # type: ignore[import-not-found]
    from servers.crm.get_customer import get_customer as third  # type: ignore[import-not-found]

    assert first is second is third
    import servers  # type: ignore[import-not-found]

    assert servers.crm.get_customer is first


def test_the_package_attribute_stays_the_function_whichever_import_form_ran_first(load: FakeRuntime):
    # The submodule is imported first (as `from servers.crm.get_customer import ...` does) ...
    direct = importlib.import_module("servers.crm.get_customer").get_customer
    # ... and `from servers.crm import get_customer` must still give the function.
    via_package = importlib.import_module("servers.crm").get_customer
    assert via_package is direct
    assert callable(via_package)


def test_calling_a_stub_sends_original_names_and_the_hash_and_drops_none(
    load: FakeRuntime, tree: VirtualTree
):
    from servers.crm import get_customer  # type: ignore[import-not-found]

    assert get_customer(customer_id="c1", region=None, from_="2024-01-01") == {"ok": True}
    [call] = load.calls
    spec = tree.tool("crm", "get-customer")
    assert spec is not None
    assert call == {
        "kind": "tool",
        "server": "crm",
        "tool": "get-customer",
        "schema_hash": spec.schema_hash,
        "arguments": {"customer-id": "c1", "include_orders": False, "from": "2024-01-01"},
        "idempotency_key": None,
    }


def test_provenance_constants_match_the_catalog(load: FakeRuntime, tree: VirtualTree):
    module = importlib.import_module("servers.crm.get_customer")
    spec = tree.tool_for_module("servers.crm.get_customer")
    assert spec is not None
    assert (module.__server__, module.__tool__, module.__schema_hash__) == (
        "crm",
        spec.name,
        spec.schema_hash,
    )


def test_side_effecting_tools_pass_the_idempotency_key(load: FakeRuntime):
    from servers.crm import delete_customer  # type: ignore[import-not-found]

    delete_customer(customer_id="c1", _idempotency_key="run-1/delete-c1")
    assert load.calls[0]["idempotency_key"] == "run-1/delete-c1"
    assert load.calls[0]["arguments"] == {"customer_id": "c1"}


def test_read_only_tools_take_no_idempotency_key(load: FakeRuntime):
    from servers.crm import list_orders  # type: ignore[import-not-found]

    with pytest.raises(TypeError):
        list_orders(_idempotency_key="x")


def test_parameters_are_keyword_only(load: FakeRuntime):
    from servers.crm import get_customer  # type: ignore[import-not-found]

    with pytest.raises(TypeError):
        get_customer("c1")


def test_unknown_names_raise_attribute_error_and_dir_lists_the_tools(load: FakeRuntime):
    import servers.crm  # type: ignore[import-not-found]

    with pytest.raises(AttributeError):
        servers.crm.nope  # noqa: B018
    with pytest.raises(ImportError):
        from servers.crm import nope  # type: ignore[import-not-found]  # noqa: F401
    assert dir(cast(types.ModuleType, servers.crm)) == ["delete_customer", "get_customer", "list_orders"]
    import servers  # type: ignore[import-not-found]

    assert dir(servers) == ["crm"]


def test_resource_templates_percent_encode_their_variables(load: FakeRuntime):
    from servers.crm._resources import read, read_config, read_file, read_notes  # type: ignore[import-not-found]

    read_config()
    read_notes(id="a/b c?ü")
    read_file(path="etc/some file", section="a b")
    read(uri="crm://anything")
    assert [c["uri"] for c in load.calls] == [
        "crm://config",
        "crm://customers/a%2Fb%20c%3F%C3%BC/notes",
        "file:///etc/some%20file#a%20b",
        "crm://anything",
    ]


def test_prompts_send_original_argument_names_and_drop_none(load: FakeRuntime):
    from servers.crm._prompts import summarize  # type: ignore[import-not-found]

    summarize(customer_id="c1", tone=None)
    assert load.calls == [
        {"kind": "prompt", "server": "crm", "name": "summarize", "arguments": {"customer-id": "c1"}}
    ]
