"""Glob scopes: ``*`` stays inside one segment, URL globs are matched as URLs, named arguments
count at any depth, and values that could change what they point at are refused."""

from __future__ import annotations

from typing import Any

import pytest

from codemode.broker._decisions import Allow, Deny
from codemode.broker.gates import ScopeGate
from tests.broker._gate_calls import context, policy, principal_facts, spec

pytestmark = pytest.mark.anyio

CUSTOMERS: dict[str, Any] = {"tools": ["crm/*"], "argument": "customer_id", "allow": ["CUST-00*"]}
WEB: dict[str, Any] = {"tools": ["crm/*"], "argument": "url", "allow": ["https://*.example.com/*"]}


async def decide(rule: dict[str, Any], arguments: dict[str, Any], *, read_only: bool = True) -> Allow | Deny:
    rules = policy(principals={"local": {"scopes": [rule]}})
    facts = principal_facts(rules, risk="low" if read_only else "high")
    decision = await ScopeGate().check(context(spec(), arguments), facts)
    assert isinstance(decision, Allow | Deny)
    return decision


@pytest.mark.parametrize(
    "value",
    [
        "CUST-00/../../CUST-9999",
        "CUST-00/x",
        "CUST-00%2F..%2FCUST-9999",
        "CUST-00%2Fx",
        "CUST-00％２Ｆ..％２Ｆx",
        "CUST-00?id=CUST-9999",
        "CUST-00#x",
        "CUST-00@evil",
        "CUST-00\\..\\CUST-9999",
        "CUST-00\nCUST-9999",
        "CUST-00%ff",
        "CUST-00" + "1" * 9_000,
    ],
)
async def test_a_star_does_not_reach_past_its_segment_or_change_meaning(value: str) -> None:
    decision = await decide(CUSTOMERS, {"customer_id": value})
    assert isinstance(decision, Deny) and decision.gate == "resource"
    assert "customer_id=" in decision.reason


async def test_a_double_star_crosses_slashes_but_not_dot_dot() -> None:
    rule = {"tools": ["crm/*"], "argument": "repo", "allow": ["acme/*", "docs/**"]}
    assert isinstance(await decide(rule, {"repo": "acme/api"}), Allow)
    assert isinstance(await decide(rule, {"repo": "docs/a/b/c"}), Allow)
    for value in ("acme/api/../../other", "acme/api/x", "docs/a/../../secret", "docs/a?b"):
        assert isinstance(await decide(rule, {"repo": value}), Deny), value


async def test_sets_and_question_marks_never_match_a_slash_or_a_special_character() -> None:
    rule = {"tools": ["crm/*"], "argument": "code", "allow": ["X-[!a]?", "Y-[?]"]}
    assert isinstance(await decide(rule, {"code": "X-bc"}), Allow)
    assert isinstance(await decide(rule, {"code": "Y-?"}), Allow), "a set that lists '?' matches it"
    for value in ("X-/c", "X-b/", "X-#c", "X-b@"):
        assert isinstance(await decide(rule, {"code": value}), Deny), value


@pytest.mark.parametrize(
    "url",
    [
        "https://evil.test/?.example.com/",
        "https://evil.test#.example.com/",
        "https://evil.test/x.example.com/",
        "https://api.example.com@evil.test/x",
        "https://a.b.example.com/x",
        "https://api.example.com/a/b",
        "https://api.example.com/x?to=evil",
        "https://api.example.com:8443/x",
        "https://api.example.com./x",
        "https://evil.test%2f.example.com/x",
        "http://api.example.com/x",
    ],
)
async def test_a_url_glob_is_matched_as_a_url(url: str) -> None:
    assert isinstance(await decide(WEB, {"url": "https://api.example.com/v1"}), Allow)
    assert isinstance(await decide(WEB, {"url": "HTTPS://API.Example.COM/v1"}), Allow)
    decision = await decide(WEB, {"url": url})
    assert isinstance(decision, Deny) and "outside the granted scope" in decision.reason


async def test_a_url_glob_allows_what_it_spells_out() -> None:
    rule = {
        "tools": ["crm/*"],
        "argument": "url",
        "allow": ["https://**.example.com/**", "https://search.test/find?q=*"],
    }
    for url in ("https://a.b.example.com/x/y", "https://search.test/find?q=widgets"):
        assert isinstance(await decide(rule, {"url": url}), Allow), url
    for url in ("https://search.test/find?q=a#frag", "https://example.com.evil.test/x/y"):
        assert isinstance(await decide(rule, {"url": url}), Deny), url


async def test_a_named_argument_is_checked_at_any_depth() -> None:
    allowed = await decide(CUSTOMERS, {"items": [{"customer_id": "CUST-0042"}, {"note": "n"}]})
    assert isinstance(allowed, Allow) and allowed.facts.scope == ("items[0].customer_id=CUST-0042",)
    denied = await decide(CUSTOMERS, {"items": [{"customer_id": "CUST-0042"}, {"customer_id": "CUST-9999"}]})
    assert isinstance(denied, Deny) and "items[1].customer_id='CUST-9999'" in denied.reason


@pytest.mark.parametrize("value", [{"$ne": "CUST-0042"}, [["CUST-0042"]], None, 1.5, True])
async def test_a_nested_value_that_is_not_text_is_refused(value: Any) -> None:
    decision = await decide(CUSTOMERS, {"filter": {"customer_id": value}})
    assert isinstance(decision, Deny) and "filter.customer_id" in decision.reason


async def test_a_nested_argument_makes_a_read_only_rule_apply() -> None:
    rule = {**CUSTOMERS, "access": "read"}
    decision = await decide(rule, {"batch": {"customer_id": "CUST-0042"}}, read_only=False)
    assert isinstance(decision, Deny) and "only read access" in decision.reason


async def test_a_path_rule_checks_an_oddly_named_argument_at_any_depth() -> None:
    rule = {"tools": ["crm/*"], "arguments": ["from"], "kind": "path", "allow": ["/srv/data"]}
    decision = await decide(rule, {"ops": [{"from": "/etc/passwd"}]})
    assert isinstance(decision, Deny) and "ops[0].from" in decision.reason


async def test_a_path_nested_deeper_than_any_walk_is_refused_not_skipped() -> None:
    rule = {"tools": ["crm/*"], "argument": "path", "kind": "path", "allow": ["/srv/data"]}
    nested: dict[str, Any] = {"path": "/etc/passwd"}
    for _ in range(40):
        nested = {"step": nested}
    decision = await decide(rule, {"ops": nested})
    assert isinstance(decision, Deny) and decision.gate == "resource", decision
