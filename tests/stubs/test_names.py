"""The one name mapping: MCP names -> Python identifiers (rules in codemode/stubs/_names.py)."""

from __future__ import annotations

import builtins
import keyword

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codemode.errors import NameCollisionError
from codemode.stubs import NameKind, assign_identifiers
from codemode.stubs._names import MAX_IDENTIFIER, base_identifier


def one(name: str, kind: NameKind = NameKind.TOOL) -> str:
    return assign_identifiers([name], kind, where="test")[name]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("get_customer", "get_customer"),
        ("get-customer", "get_customer"),
        ("repos.list-commits", "repos_list_commits"),
        ("a - b", "a_b"),
        ("getUser", "getUser"),
        ("class", "class_"),
        ("None", "None_"),
        ("list", "list_"),
        ("annotations", "annotations_"),  # bound by `from __future__ import annotations`
        ("1st", "n_1st"),
        ("__init__", "init__"),
        ("__import__", "import__"),
        ("_private", "private"),
        ("os.system", "os_system"),
        ("", "unnamed"),
        ("---", "unnamed"),
        ("café", "cafe"),
        ("名前", "u540d_u524d"),
        ("ﬁle", "file"),
        ("CON", "CON_"),
        ("com1", "com1_"),
        ("match", "match"),
        ("json", "json"),
    ],
)
def test_a_tool_name_maps_to_the_documented_identifier(name: str, expected: str):
    assert one(name) == expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [("id", "id"), ("type", "type"), ("list", "list"), ("from", "from_"), ("_id", "id"), ("con", "con")],
)
def test_parameters_may_shadow_builtins_but_not_keywords(name: str, expected: str):
    assert one(name, NameKind.PARAMETER) == expected


def test_a_name_that_already_is_its_identifier_keeps_it_and_the_others_get_a_hash_suffix():
    mapping = assign_identifiers(["a_b", "a-b", "a.b"], NameKind.TOOL, where="tools")
    assert mapping["a_b"] == "a_b"
    assert mapping["a-b"].startswith("a_b_")
    assert mapping["a.b"].startswith("a_b_")
    assert len({v.lower() for v in mapping.values()}) == 3


def test_names_that_differ_only_in_case_get_distinct_identifiers_for_case_insensitive_filesystems():
    mapping = assign_identifiers(["getUser", "getuser"], NameKind.TOOL, where="tools")
    assert mapping["getUser"].lower() != mapping["getuser"].lower()
    assert all(v.startswith(("getUser_", "getuser_")) for v in mapping.values())


def test_the_identifier_of_a_name_does_not_depend_on_listing_order():
    names = ["a-b", "a_b", "a.b", "getUser", "getuser", "x"]
    forward = assign_identifiers(names, NameKind.TOOL, where="t")
    backward = assign_identifiers(list(reversed(names)), NameKind.TOOL, where="t")
    assert forward == backward


def test_a_name_listed_twice_is_a_collision_error():
    with pytest.raises(NameCollisionError, match="listed twice"):
        assign_identifiers(["dup", "dup"], NameKind.TOOL, where="tools of server 'x'")


def test_an_unresolvable_collision_names_both_originals():
    # "a-b" gets the suffixed identifier a_b_<hash>; a tool literally named that collides with it.
    suffixed = assign_identifiers(["a_b", "a-b"], NameKind.TOOL, where="t")["a-b"]
    with pytest.raises(NameCollisionError) as info:
        assign_identifiers(["a_b", "a-b", suffixed], NameKind.TOOL, where="tools of server 'x'")
    message = str(info.value)
    assert "'a-b'" in message
    assert repr(suffixed) in message


def test_long_names_are_cut_with_a_hash_so_they_stay_distinct():
    a, b = "x" * 100 + "a", "x" * 100 + "b"
    mapping = assign_identifiers([a, b], NameKind.TOOL, where="t")
    assert len(mapping[a]) <= MAX_IDENTIFIER
    assert mapping[a] != mapping[b]


@given(st.lists(st.text(max_size=30), max_size=25, unique=True), st.sampled_from(list(NameKind)))
@settings(max_examples=300, deadline=None)
def test_any_set_of_names_maps_to_distinct_safe_identifiers(names: list[str], kind: NameKind):
    try:
        mapping = assign_identifiers(names, kind, where="property test")
    except NameCollisionError:
        return  # allowed, never a silent merge; checked below that it is rare
    idents = list(mapping.values())
    assert len({i.lower() for i in idents}) == len(idents)
    for ident in idents:
        assert ident.isidentifier()
        assert ident.isascii()
        assert not keyword.iskeyword(ident)
        assert not ident.startswith("_")
        assert len(ident) <= MAX_IDENTIFIER
        if kind.module_level:
            assert ident not in dir(builtins)


@given(st.text(max_size=60))
@settings(max_examples=300, deadline=None)
def test_the_base_identifier_is_deterministic_and_valid(name: str):
    ident = base_identifier(name, NameKind.PARAMETER)
    assert ident == base_identifier(name, NameKind.PARAMETER)
    assert ident.isidentifier()
    assert not ident.startswith("_")
