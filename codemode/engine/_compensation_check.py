"""What ``[compensation]`` means, checked against the tools the servers list and the pins.

Configuration parsing checks only the shape of a rule; whether its tools exist, are approved,
and whether its arguments fit them is known only once the servers are listed. This runs at the
start of whatever compensates (a run with ``--compensate``, ``ledger compensate``, a batch job),
so a rule that cannot work is refused before any side effect, with its key named.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, cast

from codemode.catalog import Pins, ServerCatalog, ToolSpec, ToolStatus
from codemode.config import CompensationRule
from codemode.errors import ConfigError


def _properties(schema: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A schema's top-level properties; None when it declares none (nothing to check against)."""
    if schema is None:
        return None
    found = schema.get("properties")
    return cast(dict[str, Any], found) if isinstance(found, dict) else None


Problem = tuple[str, str]
"""Where (the configuration key) and what is wrong, as :class:`ConfigError` lists them."""


def _source_problem(key: str, name: str, source: str, undone: ToolSpec) -> Problem | None:
    """Why ``source`` (``args.x`` / ``result.x``) cannot come from a call of ``undone``."""
    origin, _, path = source.partition(".")
    first = path.split(".", 1)[0]
    schema = undone.input_schema if origin == "args" else undone.output_schema
    known = _properties(schema)
    if known is None or first in known:
        return None  # a result without a declared schema is checked per call, when undoing it
    what = "argument" if origin == "args" else "result field"
    return (
        f'compensation."{key}".arguments.{name}',
        f"{source!r}: {key} has no {what} {first!r} (it has: {', '.join(sorted(known)) or 'none'})",
    )


def rule_problems(
    key: str, rule: CompensationRule, listed: Mapping[str, ToolSpec], approved: Mapping[str, bool]
) -> list[Problem]:
    """Why ``rule`` (under ``[compensation."key"]``) cannot undo calls of ``key``; empty: it can."""
    where = f'compensation."{key}"'
    undone = listed.get(key)
    undoing = listed.get(rule.tool)
    problems: list[Problem] = []
    if undone is None:
        problems.append((where, f"no configured server lists the tool {key}"))
    if undoing is None:
        problems.append((f"{where}.tool", f"no configured server lists the tool {rule.tool}"))
    elif not approved.get(rule.tool, False):
        why = f"the tool {rule.tool} is not approved: review it with `codemode pin --approve {rule.tool}`"
        problems.append((f"{where}.tool", why))
    if undoing is not None:
        takes = _properties(undoing.input_schema) or {}
        for name in rule.arguments:
            if name not in takes:
                problems.append((f"{where}.arguments.{name}", f"{rule.tool} takes no argument {name!r}"))
        required = cast(list[str], undoing.input_schema.get("required") or [])
        for name in required:
            if name not in rule.arguments:
                why = f"{rule.tool} needs the argument {name!r}: map it to 'args.<name>' or 'result.<name>'"
                problems.append((f"{where}.arguments", why))
    if undone is not None:
        for name, source in rule.arguments.items():
            problem = _source_problem(key, name, source, undone)
            if problem is not None:
                problems.append(problem)
    return problems


def check_compensations(
    source: str, rules: Mapping[str, CompensationRule], catalogs: Iterable[ServerCatalog], pins: Pins
) -> None:
    """Refuse the ``[compensation]`` rules that cannot work (every problem, each with its key),
    against the tools the servers list now and their pins."""
    listed = {f"{t.server}/{t.name}": t for catalog in catalogs for t in catalog.tools}
    approved = {name: pins.status(tool) is ToolStatus.APPROVED for name, tool in listed.items()}
    problems = [p for key, rule in sorted(rules.items()) for p in rule_problems(key, rule, listed, approved)]
    if problems:
        raise ConfigError(source, problems)
