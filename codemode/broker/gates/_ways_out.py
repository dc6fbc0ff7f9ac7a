"""What a person can do about a call refused for its risk: the ways out a denial names.

A refusal that only says "needs approval" leaves a new user to find the setting that helps. The
ways out are worked out from what the gates know, and only the ones that would help are named:

- the tool's own hints, if believed, would take it below the consent threshold: accept them at
  review (``codemode pin --accept-hints``), or trust the whole server (``trusted = true``);
- the policy can declare the tool read-only (``[policy.consent] read_only``), if it only reads;
- a single call can be approved ahead with ``codemode approve``, given as a line to paste: the
  arguments the program passed, shell-quoted. The line is left out when it could not work or
  would show what must stay hidden: arguments holding a secret or a PII placeholder (the
  approval binds the real values, which the program never sees), or too long for a command line.
"""

from __future__ import annotations

import json
import shlex

from codemode._redaction import redact_value_counting
from codemode.broker._facts import Call, Facts
from codemode.catalog import claimed_risk
from codemode.config import RISK_ORDER, PolicyConfig, Risk

MAX_ARGS_CHARS = 500
"""Arguments longer than this (as JSON) go through ``--args-file`` rather than the line."""


def hints_would_lower(facts: Facts, below: Risk) -> Risk | None:
    """The risk the tool's pinned hints give, if believing them would take the call below
    ``below``; else None (no hints, destructive, already believed, or not low enough)."""
    if facts.pinned is None:
        return None
    claimed = claimed_risk(facts.pinned.get("annotations"))
    if RISK_ORDER[claimed] < min(RISK_ORDER[below], RISK_ORDER[facts.risk]):
        return claimed
    return None


def lowering_ways(call: Call, facts: Facts, below: Risk) -> list[str]:
    """Ways to take the tool's risk below ``below`` for good (the policy or the pin, not a call)."""
    ways: list[str] = []
    quoted = shlex.quote(call.label)
    claimed = hints_would_lower(facts, below)
    if claimed is not None:
        ways.append(
            f"accept the tool's own hints (they rate it {claimed} risk) after reviewing it: "
            f"codemode pin --accept-hints {quoted}"
        )
        ways.append(
            f"or believe every hint of this server: trusted = true under [servers.{call.server}] "
            "in codemode.toml"
        )
    ways.append(f"if it only reads, declare it so: [policy.consent] read_only = {json.dumps([call.label])}")
    return ways


def approve_line(policy: PolicyConfig, call: Call) -> str:
    """How to approve this one call ahead: the ``codemode approve`` line to paste, or why there is
    none (see the module)."""
    passed = dict(call.as_passed)
    head = f"codemode approve {shlex.quote(call.label)}"
    if call.binding.principal != policy.default_principal:
        head += f" --principal {shlex.quote(call.binding.principal)}"
    if call.binding.tenant != policy.default_tenant:
        head += f" --tenant {shlex.quote(call.binding.tenant)}"
    if passed != dict(call.arguments):
        return (
            "approve this one call when asked (run interactively): its arguments hold PII "
            "placeholders, and a pre-issued approval must name the real values"
        )
    _, hidden = redact_value_counting(passed)
    if hidden:
        return (
            "approve this one call when asked (run interactively), or write its arguments as a "
            f"JSON object to a file and run: {head} --args-file FILE (they hold a value that looks "
            "like a secret, so they are not shown here)"
        )
    try:
        # ASCII: the program chose these values, and the line is printed to a terminal.
        text = json.dumps(passed, ensure_ascii=True, separators=(", ", ": "))
    except (TypeError, ValueError):
        return f"approve this one call when asked (run interactively), or with {head} --args JSON"
    if len(text) > MAX_ARGS_CHARS:
        return (
            f"approve this one call ahead: write its arguments ({len(text):,} characters of JSON) "
            f"to a file and run: {head} --args-file FILE"
        )
    return f"approve this one call ahead, then run again: {head} --args {shlex.quote(text)}"


def ways_out_text(ways: list[str]) -> str:
    return "\n".join(["Ways out:", *(f"  - {way}" for way in ways)])
