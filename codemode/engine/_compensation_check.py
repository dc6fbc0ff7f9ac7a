"""What ``[compensation]`` means, checked against the tools the servers list and the pins.

A trusted server may also declare how a tool's call is undone, in the tool's ``_meta``
(``dev.codemode/compensation``: a tool of the same server and its argument sources). A
declaration is part of the pinned definition, so it is used only as a reviewer approved it,
and only where the server is trusted (``trusted = true``): an untrusted server's declaration
is a claim nobody checked, shown at ``codemode pin`` and never used. ``[compensation]`` in the
configuration overrides a declaration for the same tool. A declaration that cannot work is left
out with a warning (its tool is "not compensable"): a server's mistake never stops the
configured rules from working.

Configuration parsing checks only the shape of a rule; whether its tools exist, are approved,
and whether its arguments fit them is known only once the servers are listed. This runs at the
start of whatever compensates (a run with ``--compensate``, ``ledger compensate``, a batch job),
so a rule that cannot work is refused before any side effect, with its key named.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from pydantic import ValidationError

from codemode.catalog import COMPENSATION_META_KEY, Pins, ServerCatalog, ToolSpec, ToolStatus
from codemode.config import CompensationRule, Config
from codemode.errors import ConfigError

log = logging.getLogger("codemode.engine")


def _properties(schema: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A schema's top-level properties; None when it declares none (nothing to check against)."""
    if schema is None:
        return None
    found = schema.get("properties")
    return cast(dict[str, Any], found) if isinstance(found, dict) else None


Problem = tuple[str, str]
"""Where (the configuration key) and what is wrong, as :class:`ConfigError` lists them."""


def _source_problem(key: str, where: str, name: str, source: str, undone: ToolSpec) -> Problem | None:
    """Why ``source`` (``args.x`` / ``result.x``) cannot come from a call of ``undone``."""
    origin, _, path = source.partition(".")
    first = path.split(".", 1)[0]
    schema = undone.input_schema if origin == "args" else undone.output_schema
    known = _properties(schema)
    if known is None or first in known:
        return None  # a result without a declared schema is checked per call, when undoing it
    what = "argument" if origin == "args" else "result field"
    return (
        f"{where}.arguments.{name}",
        f"{source!r}: {key} has no {what} {first!r} (it has: {', '.join(sorted(known)) or 'none'})",
    )


def declared_key(spec: ToolSpec) -> str:
    """Where a tool's declared compensation is, said the way a configuration key is."""
    return f'servers.{spec.server} tool {spec.name} _meta."{COMPENSATION_META_KEY}"'


def declared_rule(server: str, declared: Mapping[str, Any]) -> CompensationRule:
    """The rule a tool of ``server`` declares in its ``_meta`` (its tool is one of the same
    server); a ``ValueError`` saying what is wrong with it otherwise."""
    tool = declared.get("tool")
    if not isinstance(tool, str) or "/" in tool:
        raise ValueError("'tool' must name a tool of the same server, without the server's name")
    try:
        return CompensationRule.model_validate({**declared, "tool": f"{server}/{tool}"})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ValueError(f"{where}: {first['msg']}" if where else first["msg"]) from None


@dataclass(frozen=True)
class Compensations:
    """The compensation rules a deployment uses: ``[compensation]`` over what trusted servers
    declare for their approved tools."""

    rules: dict[str, CompensationRule] = field(default_factory=lambda: {})
    """``server/tool`` -> how its calls are undone."""
    unusable: list[Problem] = field(default_factory=lambda: [])
    """Declarations of trusted servers that cannot work, left out (their tools are not
    compensable): a server's mistake must not stop the configured rules from working."""


def compensations_of(config: Config, catalogs: Iterable[ServerCatalog], pins: Pins) -> Compensations:
    """The rules in use: ``[compensation]``, and the declarations of the approved tools of
    trusted servers that it does not override and that can work."""
    catalogs = list(catalogs)
    return _with_declared(config, catalogs, pins, *_listing(catalogs, pins))


def _with_declared(
    config: Config,
    catalogs: list[ServerCatalog],
    pins: Pins,
    listed: Mapping[str, ToolSpec],
    approved: Mapping[str, bool],
) -> Compensations:
    configured = config.compensation
    found = Compensations(rules=dict(configured))
    for catalog in pins.usable(catalogs):
        server = config.servers.get(catalog.server)
        if server is None or not server.trusted:
            continue
        for spec in catalog.tools:
            label = f"{spec.server}/{spec.name}"
            if spec.compensation is None or label in configured:
                continue
            try:
                rule = declared_rule(spec.server, spec.compensation)
            except ValueError as exc:
                found.unusable.append((declared_key(spec), str(exc)))
                continue
            problems = rule_problems(label, rule, listed, approved, declared_key(spec))
            if problems:
                found.unusable.extend(problems)
            else:
                found.rules[label] = rule
    return found


def _listing(catalogs: list[ServerCatalog], pins: Pins) -> tuple[dict[str, ToolSpec], dict[str, bool]]:
    """Every listed tool by ``server/tool``, and whether each is approved."""
    listed = {f"{t.server}/{t.name}": t for catalog in catalogs for t in catalog.tools}
    return listed, {name: pins.status(tool) is ToolStatus.APPROVED for name, tool in listed.items()}


def rule_problems(
    key: str,
    rule: CompensationRule,
    listed: Mapping[str, ToolSpec],
    approved: Mapping[str, bool],
    where: str | None = None,
) -> list[Problem]:
    """Why ``rule`` (under ``where``, by default ``[compensation."key"]``) cannot undo calls of
    ``key``; empty: it can."""
    where = where or f'compensation."{key}"'
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
            problem = _source_problem(key, where, name, source, undone)
            if problem is not None:
                problems.append(problem)
    return problems


def check_compensations(config: Config, catalogs: Iterable[ServerCatalog], pins: Pins) -> None:
    """Refuse the ``[compensation]`` rules that cannot work (every problem, each with its key),
    against the tools the servers list now and their pins; say which declarations are left out."""
    catalogs = list(catalogs)
    listed, approved = _listing(catalogs, pins)
    for where, why in _with_declared(config, catalogs, pins, listed, approved).unusable:
        log.warning("a declared compensation is not used: %s: %s", where, why)
    problems = [
        problem
        for key, rule in sorted(config.compensation.items())
        for problem in rule_problems(key, rule, listed, approved)
    ]
    if problems:
        raise ConfigError(config.source, problems)
