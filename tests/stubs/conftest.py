"""Shared helpers for the stub tests: a recording fake runtime and an in-memory import hook.

Helpers are handed out through the session-scoped ``kit`` fixture so hypothesis tests (which
cannot use function-scoped fixtures) can use them too.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from codemode.catalog import (
    PromptSpec,
    ResourceSpec,
    ResourceTemplateSpec,
    ServerCatalog,
    ToolSpec,
    tool_hash,
)
from codemode.stubs import VirtualTree

SNAPSHOTS = Path(__file__).parent / "snapshots"


@dataclass
class FakeRuntime:
    """Stands in for ``codemode_runtime``: records every call, returns ``result``."""

    calls: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    result: Any = None

    def module(self) -> types.ModuleType:
        module = types.ModuleType("codemode_runtime")

        def call_tool(
            server: str,
            tool: str,
            schema_hash: str,
            arguments: Any,
            *,
            idempotency_key: str | None = None,
        ) -> Any:
            self.calls.append(
                {
                    "kind": "tool",
                    "server": server,
                    "tool": tool,
                    "schema_hash": schema_hash,
                    "arguments": dict(arguments),
                    "idempotency_key": idempotency_key,
                }
            )
            return self.result

        def read_resource(server: str, uri: str) -> Any:
            self.calls.append({"kind": "resource", "server": server, "uri": uri})
            return self.result

        def get_prompt(server: str, name: str, arguments: Any = None) -> Any:
            self.calls.append(
                {"kind": "prompt", "server": server, "name": name, "arguments": dict(arguments or {})}
            )
            return self.result

        module.call_tool = call_tool  # type: ignore[attr-defined]
        module.read_resource = read_resource  # type: ignore[attr-defined]
        module.get_prompt = get_prompt  # type: ignore[attr-defined]
        for name in ("ResourceContents", "PromptMessage", "Image", "Audio"):
            setattr(module, name, type(name, (), {}))
        return module


class _TreeFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves ``tree.module_source`` the way the sandbox's import hook does."""

    def __init__(self, tree: VirtualTree) -> None:
        self.tree = tree

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        source = self.tree.module_source(fullname)
        if source is None:
            return None
        return importlib.util.spec_from_loader(fullname, self, is_package=source.is_package)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        source = self.tree.module_source(module.__name__)
        assert source is not None
        exec(compile(source.source, f"<tree>/{module.__name__}", "exec"), module.__dict__)


def _purge() -> None:
    for name in list(sys.modules):
        if name in ("servers", "codemode_runtime") or name.startswith("servers."):
            del sys.modules[name]


@contextlib.contextmanager
def importable(tree: VirtualTree | None, runtime: FakeRuntime, path: Path | None = None) -> Generator[None]:
    """Make ``servers`` importable from ``tree`` (in memory) or from an exported ``path``."""
    _purge()
    finder = _TreeFinder(tree) if tree is not None else None
    if finder is not None:
        sys.meta_path.insert(0, finder)
    if path is not None:
        sys.path.insert(0, str(path))
    importlib.invalidate_caches()
    sys.modules["codemode_runtime"] = runtime.module()
    try:
        yield
    finally:
        if finder is not None:
            sys.meta_path.remove(finder)
        if path is not None:
            sys.path.remove(str(path))
        _purge()


def make_tool(
    name: str,
    schema: dict[str, Any] | None = None,
    *,
    server: str = "crm",
    output: dict[str, Any] | None = None,
    description: str | None = None,
    title: str | None = None,
    annotations: dict[str, Any] | None = None,
) -> ToolSpec:
    definition: dict[str, Any] = {
        "name": name,
        "title": title,
        "description": description,
        "input_schema": {"type": "object"} if schema is None else schema,
        "output_schema": output,
        "annotations": annotations,
    }
    try:
        schema_hash = tool_hash(**definition)
    except ValueError:  # lone surrogates: the catalog excludes such tools, the renderer must still cope
        schema_hash = "sha256:" + "0" * 64
    return ToolSpec(server=server, schema_hash=schema_hash, **definition)


def catalog(
    server: str,
    *tools: ToolSpec,
    resources: Sequence[ResourceSpec] = (),
    templates: Sequence[ResourceTemplateSpec] = (),
    prompts: Sequence[PromptSpec] = (),
) -> ServerCatalog:
    return ServerCatalog(
        server=server,
        tools=tuple(tools),
        resources=tuple(resources),
        resource_templates=tuple(templates),
        prompts=tuple(prompts),
    )


# ----------------------------------------------------------------------------- representative schemas

_ADDRESS = {
    "type": "object",
    "description": "A postal address.",
    "properties": {
        "street": {"type": "string"},
        "city": {"type": "string"},
        "geo": {
            "type": "object",
            "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
            "required": ["lat", "lon"],
        },
    },
    "required": ["street"],
}

SCHEMA_CASES: dict[str, dict[str, Any]] = {
    "simple": {
        "description": "Fetch one customer by id.",
        "input": {
            "type": "object",
            "properties": {
                "customer_id": {"type": "string", "description": "The customer's id."},
                "limit": {"type": "integer", "default": 20, "description": "Maximum rows."},
                "verbose": {"type": "boolean", "default": False},
                "ratio": {"type": "number", "default": 0.5},
                "note": {"type": "string", "default": "n/a"},
            },
            "required": ["customer_id"],
        },
        "annotations": {"readOnlyHint": True},
    },
    "enums": {
        "description": "Set a status.",
        "input": {
            "type": "object",
            "properties": {
                "status": {"type": "string", "enum": ["open", "closed", "pending"]},
                "priority": {"type": "integer", "enum": [1, 2, 3], "default": 2},
                "kind": {"const": "ticket"},
                "maybe": {"enum": ["a", "b", None]},
                "flag": {"enum": [True, False]},
                "weird": {"enum": [1.5, "x", {"a": 1}]},
            },
            "required": ["status", "kind"],
        },
    },
    "nested_objects": {
        "description": "Create a customer.",
        "input": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "address": _ADDRESS,
                "billing": {"type": "object", "properties": {"same_as_address": {"type": "boolean"}}},
            },
            "required": ["name", "address"],
        },
    },
    "arrays_of_objects": {
        "description": "Create an order.",
        "input": {
            "type": "object",
            "properties": {
                "lines": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "minimum": 1}},
                        "required": ["sku", "qty"],
                    },
                },
                "tags": {"type": "array", "items": {"type": "string"}},
                "matrix": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}},
                "anything": {"type": "array"},
                "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]},
            },
            "required": ["lines"],
        },
    },
    "unions": {
        "description": "Look something up.",
        "input": {
            "type": "object",
            "properties": {
                "key": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
                "target": {
                    "oneOf": [
                        {
                            "type": "object",
                            "properties": {"email": {"type": "string"}},
                            "required": ["email"],
                        },
                        {
                            "type": "object",
                            "properties": {"phone": {"type": "string"}},
                            "required": ["phone"],
                        },
                    ]
                },
                "optional_text": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
                "multi": {"type": ["string", "integer", "boolean"]},
                "narrowed": {
                    "type": "object",
                    "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
                    "oneOf": [{"required": ["a"]}, {"required": ["b"]}],
                },
            },
            "required": ["key"],
        },
    },
    "nullable": {
        "description": "Update a contact.",
        "input": {
            "type": "object",
            "properties": {
                "email": {"type": ["string", "null"]},
                "phone": {"type": "string", "nullable": True},
                "address": {**_ADDRESS, "type": ["object", "null"]},
                "nickname": {"type": ["string", "null"], "default": "none"},
            },
            "required": ["email"],
        },
    },
    "ref_recursion": {
        "description": "Store a tree.",
        "input": {
            "type": "object",
            "$defs": {
                "Node": {
                    "type": "object",
                    "properties": {
                        "value": {"type": "integer"},
                        "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                        "parent": {"anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}]},
                    },
                    "required": ["value"],
                },
                "Json": {
                    "anyOf": [
                        {"type": "string"},
                        {"type": "number"},
                        {"type": "boolean"},
                        {"type": "null"},
                        {"type": "array", "items": {"$ref": "#/$defs/Json"}},
                        {"type": "object", "additionalProperties": {"$ref": "#/$defs/Json"}},
                    ]
                },
                "Loop": {"$ref": "#/$defs/Loop"},
            },
            "definitions": {"Color": {"type": "string", "enum": ["red", "green"]}},
            "properties": {
                "root": {"$ref": "#/$defs/Node"},
                "payload": {"$ref": "#/$defs/Json"},
                "color": {"$ref": "#/definitions/Color"},
                "loop": {"$ref": "#/$defs/Loop"},
                "self": {"$ref": "#"},
            },
            "required": ["root"],
        },
    },
    "additional_properties": {
        "description": "Set labels.",
        "input": {
            "type": "object",
            "properties": {
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "counts": {"type": "object", "additionalProperties": {"type": "integer"}, "default": None},
                "blobs": {"type": "object", "additionalProperties": True},
                "by_pattern": {"type": "object", "patternProperties": {"^x-": {"type": "string"}}},
                "records": {
                    "type": "object",
                    "additionalProperties": {"type": "object", "properties": {"id": {"type": "string"}}},
                },
            },
            "required": ["labels"],
        },
    },
    "output_schema": {
        "description": "Get an invoice.",
        "input": {
            "type": "object",
            "properties": {"invoice_id": {"type": "string"}},
            "required": ["invoice_id"],
        },
        "output": {
            "type": "object",
            "description": "The invoice.",
            "properties": {
                "id": {"type": "string"},
                "total": {"type": "number", "description": "Amount in cents."},
                "lines": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"sku": {"type": "string"}},
                        "required": ["sku"],
                    },
                },
                "paid_at": {"type": ["string", "null"], "format": "date-time"},
            },
            "required": ["id", "total"],
        },
        "annotations": {"readOnlyHint": True},
    },
    "no_schema": {"description": None, "input": {"type": "object"}},
    "network_ref": {
        "description": "Refer to things we never fetch.",
        "input": {
            "type": "object",
            "properties": {
                "remote": {"$ref": "https://example.com/schemas/thing.json"},
                "relative": {"$ref": "other.json#/defs/x"},
                "anchor": {"$ref": "#thing"},
                "missing": {"$ref": "#/$defs/Nope"},
                "merged": {
                    "allOf": [
                        {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
                        {"type": "object", "properties": {"b": {"type": "integer"}}},
                    ]
                },
                "conflict": {
                    "allOf": [
                        {"type": "object", "properties": {"a": {"type": "string"}}},
                        {"type": "object", "properties": {"a": {"type": "integer"}}},
                    ]
                },
                "scalars": {"allOf": [{"type": "string"}, {"type": "integer"}]},
                "dynamic": {"$dynamicRef": "#meta"},
            },
        },
    },
    "awkward_names": {
        "description": "Parameters with names Python cannot use as-is.",
        "input": {
            "type": "object",
            "properties": {
                "user-id": {"type": "string"},
                "from": {"type": "string", "description": "Start date."},
                "_id": {"type": "string"},
                "id": {"type": "string"},
                "class": {"type": "string"},
                "list": {"type": "array", "items": {"type": "string"}},
                "Größe": {"type": "integer"},
                "1st": {"type": "boolean"},
                "_idempotency_key": {"type": "string"},
                "record": {
                    "type": "object",
                    "properties": {
                        "from": {"type": "string"},
                        "x-trace": {"type": "string"},
                        "str": {"type": "string"},
                    },
                },
            },
            "required": ["user-id", "from"],
        },
    },
}


def case_tool(case: str, *, server: str = "crm", name: str | None = None) -> ToolSpec:
    spec = SCHEMA_CASES[case]
    return make_tool(
        name or case,
        spec["input"],
        server=server,
        output=spec.get("output"),
        description=spec.get("description"),
        annotations=spec.get("annotations"),
    )


def representative_catalogs() -> list[ServerCatalog]:
    """Every schema case as a tool of ``crm``, plus resources and prompts, plus a second server."""
    from codemode.catalog import PromptArgumentSpec

    crm = catalog(
        "crm",
        *(case_tool(case) for case in SCHEMA_CASES),
        resources=[
            ResourceSpec(
                server="crm", uri="crm://config", name="config", description="Server configuration."
            ),
            ResourceSpec(server="crm", uri="crm://stats", name="stats", mime_type="application/json"),
        ],
        templates=[
            ResourceTemplateSpec(server="crm", uri_template="crm://customers/{customer_id}", name="customer"),
            ResourceTemplateSpec(server="crm", uri_template="file:///{+path}", name="file", title="A file"),
            ResourceTemplateSpec(server="crm", uri_template="crm://search{?q,limit}", name="search"),
        ],
        prompts=[
            PromptSpec(
                server="crm",
                name="summarize-account",
                description="Summarise an account for a sales call.",
                arguments=(
                    PromptArgumentSpec(name="customer_id", description="Whose account.", required=True),
                    PromptArgumentSpec(name="tone"),
                ),
            ),
            PromptSpec(server="crm", name="greeting"),
        ],
    )
    # Tool names that are builtins or standard-library modules.
    tickets = catalog(
        "tickets-v2",
        make_tool(
            "list",
            {"type": "object", "properties": {"state": {"enum": ["open", "closed"]}}},
            server="tickets-v2",
        ),
        make_tool("json", {"type": "object"}, server="tickets-v2", annotations={"readOnlyHint": True}),
        make_tool("typing", {"type": "object"}, server="tickets-v2"),
    )
    return [crm, tickets]


class Kit:
    """The helpers, as one object (usable from hypothesis tests)."""

    make_tool = staticmethod(make_tool)
    catalog = staticmethod(catalog)
    importable = staticmethod(importable)
    case_tool = staticmethod(case_tool)
    representative_catalogs = staticmethod(representative_catalogs)
    FakeRuntime = FakeRuntime
    SCHEMA_CASES = SCHEMA_CASES
    SNAPSHOTS = SNAPSHOTS


@pytest.fixture(scope="session")
def kit() -> Kit:
    return Kit()
