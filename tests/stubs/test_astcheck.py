"""The post-render allow-list rejects anything but the expected node shapes (defence in depth)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from codemode.errors import StubRenderError
from codemode.stubs import render_tree
from codemode.stubs._astcheck import (
    check_package_init,
    check_prompts_module,
    check_resources_module,
    check_tool_module,
)

if TYPE_CHECKING:
    from .conftest import Kit


@pytest.fixture(scope="module")
def good(kit: Kit):
    tree = render_tree(kit.representative_catalogs())
    return {
        "tool": tree.read("servers/crm/simple.py"),
        "typed": tree.read("servers/crm/ref_recursion.py"),
        "package": tree.read("servers/crm/__init__.py"),
        "root": tree.read("servers/__init__.py"),
        "resources": tree.read("servers/crm/_resources.py"),
        "prompts": tree.read("servers/crm/_prompts.py"),
    }


def test_the_rendered_modules_pass_the_check(good: dict[str, str]):
    check_tool_module(good["tool"], "simple")
    check_tool_module(good["typed"], "ref_recursion")
    check_resources_module(good["resources"])
    check_prompts_module(good["prompts"])


TOOL_TAMPERING = [
    ("import os\n", "\nimport typing as _t\n", "\nimport typing as _t\nimport os\n"),
    ("call at module level", "\n__schema_hash__", "\nprint('x')\n__schema_hash__"),
    ("provenance not a constant", "__tool__ = 'simple'", "__tool__ = str('simple')"),
    ("extra statement in the body", "    return _rt.call_tool(", "    print(1)\n    return _rt.call_tool("),
    ("call in a default", "limit: int = 20,", "limit: int = len('xx'),"),
    ("call in an annotation", "customer_id: str,", "customer_id: __import__('os').PathLike,"),
    ("unknown name in an annotation", "customer_id: str,", "customer_id: os,"),
    ("decorator", "\ndef simple(", "\n@staticmethod\ndef simple("),
    ("positional parameter", "def simple(\n    *,", "def simple(\n    x: int,\n    *,"),
    ("a value that is not a parameter", "'limit': limit,", "'limit': __name__,"),
    ("another runtime function", "_rt.call_tool(", "_rt.read_resource("),
    ("hash not passed", "__schema_hash__, _arguments)", "'sha256:0', _arguments)"),
    ("coding cookie", '"""Tool simple', '# -*- coding: utf-7 -*-\n"""Tool simple'),
    ("second function", "\ndef simple(", "\ndef other() -> None:\n    pass\n\n\ndef simple("),
    ("lambda default", "limit: int = 20,", "limit: int = (lambda: 1),"),
    ("attribute chain", "customer_id: str,", "customer_id: _t.os.path,"),
]


@pytest.mark.parametrize(("why", "old", "new"), TOOL_TAMPERING, ids=[t[0] for t in TOOL_TAMPERING])
def test_a_tampered_tool_module_is_refused(good: dict[str, str], why: str, old: str, new: str):
    source = good["tool"]
    assert old in source, why
    with pytest.raises(StubRenderError):
        check_tool_module(source.replace(old, new, 1), "simple")


TYPED_TAMPERING = [
    (
        "class with a method",
        "class Node(_t.TypedDict):\n",
        "class Node(_t.TypedDict):\n    def f(self) -> None: ...\n",
    ),
    ("class with a base other than TypedDict", "class Node(_t.TypedDict):", "class Node(dict):"),
    ("class with a decorator", "class Node(_t.TypedDict):", "@_t.final\nclass Node(_t.TypedDict):"),
    ("alias that is code", "Json: _t.TypeAlias = '", "Json: _t.TypeAlias = __import__('os') or '"),
    (
        "alias string with a call",
        "Json: _t.TypeAlias = 'str",
        'Json: _t.TypeAlias = \'__import__("os") | str',
    ),
    ("field with a value", "    value: int\n", "    value: int = 1\n"),
]


@pytest.mark.parametrize(("why", "old", "new"), TYPED_TAMPERING, ids=[t[0] for t in TYPED_TAMPERING])
def test_tampered_type_definitions_are_refused(good: dict[str, str], why: str, old: str, new: str):
    source = good["typed"]
    assert old in source, why
    with pytest.raises(StubRenderError):
        check_tool_module(source.replace(old, new, 1), "ref_recursion")


def test_a_package_getattr_that_differs_from_the_canonical_one_is_refused(good: dict[str, str]):
    names = ["additional_properties", "arrays_of_objects", "awkward_names", "enums", "nested_objects"]
    names += ["network_ref", "no_schema", "nullable", "output_schema", "ref_recursion", "simple", "unions"]
    check_package_init(good["package"], package="servers.crm", names=names)
    for old, new in [
        ("    return list(__all__)\n", "    print(1)\n    return list(__all__)\n"),
        ("value = getattr(value, name)", "value = __import__('os')"),
        ("_sys.modules[__name__].__class__ = _Package", "_sys.modules[__name__].__class__ = object"),
        ("import types as _types\n", "import types as _types\nimport os\n"),
    ]:
        assert old in good["package"]
        with pytest.raises(StubRenderError):
            check_package_init(good["package"].replace(old, new), package="servers.crm", names=names)
    with pytest.raises(StubRenderError, match="exactly the expected names"):
        check_package_init(good["package"], package="servers.crm", names=names[:-1])


def test_a_root_index_reexporting_from_elsewhere_is_refused(good: dict[str, str]):
    check_package_init(good["root"], package="servers", names=["crm", "tickets_v2"])
    tampered = good["root"].replace("from servers import crm as crm", "from os import crm as crm")
    with pytest.raises(StubRenderError):
        check_package_init(tampered, package="servers", names=["crm", "tickets_v2"])


def test_a_resource_uri_built_from_anything_but_strings_and_quoted_parameters_is_refused(
    good: dict[str, str],
):
    tampered = good["resources"].replace("_quote(customer_id, safe='')", "__import__('os').getcwd()")
    with pytest.raises(StubRenderError):
        check_resources_module(tampered)


def test_a_prompt_module_that_calls_another_runtime_function_is_refused(good: dict[str, str]):
    tampered = good["prompts"].replace("_rt.get_prompt(", "_rt.call_tool(", 1)
    with pytest.raises(StubRenderError):
        check_prompts_module(tampered)


def test_source_that_does_not_parse_is_refused():
    with pytest.raises(StubRenderError, match="does not parse"):
        check_tool_module('"""doc"""\nfrom __future__ import annotations\ndef (:\n', "x")
