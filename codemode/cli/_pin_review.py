"""What ``codemode pin`` shows a reviewer: each new or changed tool with its risk and what changed.

A person approving a pin approves a definition: the server and tool, the risk codemode will
give it (which decides consent), its annotations and the risk they would give if the reviewer
accepts them (``codemode pin --accept-hints``), for a changed tool which parts of the
definition differ from the approved one, and its title and description exactly as the stub
gives them to the model (cleaned of control and invisible characters, cut where the stub cuts).
Notes under the description say what the review does not show or what the model does not see:

* characters the stub drops (invisible, control, bidi: a place to hide instructions);
* a description cut short in the stub;
* the descriptions inside the input and output schemas, which the stub also carries
  (``codemode pin --diff`` shows the whole definition);
* regular expressions (``pattern``, ``patternProperties``) that RE2 cannot run: each call's
  check of them runs in a separate process, killed after the time limit; or that are no
  ECMA-262 regular expression at all, so that every call is refused.
"""

from __future__ import annotations

from typing import Any, cast

from rich.markup import escape
from rich.table import Table

from codemode._json_schema import json_objects, pattern_notes
from codemode._schema_isolation import CHECK_LIMIT_S
from codemode.broker import tool_risk
from codemode.catalog import COMPENSATION_META_KEY, LockEntry, claimed_risk
from codemode.config import Config
from codemode.stubs import TITLE_LIMIT, TOOL_DOC_LIMIT, clean_text, escape_invisible

_HINTS = (
    ("readOnlyHint", "read-only"),
    ("destructiveHint", "destructive"),
    ("idempotentHint", "idempotent"),
    ("openWorldHint", "open-world"),
)
_PARTS = ("title", "description", "inputSchema", "outputSchema", "annotations", "_meta")
_STYLES = {"approved": "green", "new": "cyan", "changed": "yellow", "removed": "red"}
_RISK_STYLES = {"low": "green", "medium": "yellow", "high": "red"}


def plain(text: str) -> str:
    """Lock text (server and tool names) as markup that prints it literally and visibly."""
    return escape(escape_invisible(text))


def annotation_text(annotations: Any) -> str:
    """``read-only, not destructive`` style summary of the hints that are set."""
    if not isinstance(annotations, dict):
        return "-"
    words = [
        (word if annotations[key] else f"not {word}")  # pyright: ignore[reportUnknownArgumentType]
        for key, word in _HINTS
        if isinstance(annotations.get(key), bool)  # pyright: ignore[reportUnknownMemberType]
    ]
    return ", ".join(words) or "-"


def changed_parts(entry: LockEntry) -> list[str]:
    """Which top-level parts of the definition differ between the approved and the observed one."""
    if entry.approved is None or entry.observed is None:
        return []
    old, new = entry.approved.definition, entry.observed.definition
    return [part for part in _PARTS if old.get(part) != new.get(part)]


def _hidden_count(text: str) -> int:
    """How many characters of ``text`` the stub drops or replaces (within what it reads)."""
    return sum(1 for char in text[: TOOL_DOC_LIMIT * 4 + 64] if escape_invisible(char) != char)


def _schema_descriptions(definition: dict[str, Any]) -> int:
    return sum(
        isinstance(node.get("description"), str)
        for part in ("inputSchema", "outputSchema")
        for node in json_objects(definition.get(part))
    )


def review_notes(server: str, tool: str, definition: dict[str, Any]) -> list[str]:
    """What a reviewer should know that the description column does not say (see the module)."""
    notes: list[str] = []
    description = str(definition.get("description") or "")
    hidden = _hidden_count(description)
    if hidden:
        notes.append(
            f"{hidden} invisible, control or unusual space character(s) in the description are "
            "dropped or replaced in the stub: see them with 'codemode pin --diff'"
        )
    if clean_text(description, TOOL_DOC_LIMIT) != clean_text(description, 2 * TOOL_DOC_LIMIT):
        notes.append(
            f"the stub keeps the first {TOOL_DOC_LIMIT:,} characters of the description "
            f"({len(description):,} in all)"
        )
    inner = _schema_descriptions(definition)
    if inner:
        notes.append(
            f"the stub also carries {inner} description(s) from the input and output schemas: "
            f"'codemode pin --diff {server}/{tool}' shows them"
        )
    for part, label in (("inputSchema", "input"), ("outputSchema", "output")):
        for note in pattern_notes(definition.get(part)):
            if note.refused:
                notes.append(f"{label} schema: every call is refused: {note.problem}")
            else:
                notes.append(
                    f"{label} schema: {note.problem}: calls are checked against it in a separate "
                    f"process, and refused if that takes over {CHECK_LIMIT_S:g} s"
                )
    return notes


def compensation_note(server: str, tool: str, definition: dict[str, Any], trusted: bool) -> str | None:
    """What the tool's own ``_meta`` says undoes its calls, and whether codemode will use it."""
    meta: object = definition.get("_meta")
    declared = cast(dict[str, Any], meta).get(COMPENSATION_META_KEY) if isinstance(meta, dict) else None
    if not isinstance(declared, dict):
        return None
    from codemode.engine import declared_rule

    try:
        rule = declared_rule(server, cast(dict[str, Any], declared))
    except ValueError as exc:
        return f"declares a compensation that cannot be used: {exc}"
    sources = ", ".join(f"{name}={source}" for name, source in rule.arguments.items())
    said = f"declares its compensation: {rule.tool}({sources})"
    if trusted:
        return f'{said}; used once approved (the server is trusted; [compensation."{server}/{tool}"] wins)'
    return (
        f"{said}; not used: the server is not trusted. To use it, copy it into "
        f'[compensation."{server}/{tool}"] or set trusted = true'
    )


def review_row(config: Config, server: str, tool: str, status: str, entry: LockEntry) -> dict[str, Any]:
    """What the reviewer sees of one pin: for a new or changed tool its definition under review
    (rated as it would be once approved: without accepted hints), else the approved one."""
    pinned = entry.observed or entry.approved
    definition: dict[str, Any] = pinned.definition if pinned is not None else {}
    server_config = config.servers.get(server)
    trusted = bool(server_config and server_config.trusted)
    accepted = pinned.accepted_risk if pinned is not None else None
    risk = tool_risk(
        config.policy, server, tool, definition.get("annotations"), trusted=trusted, accepted=accepted
    )
    return {
        "server": server,
        "tool": tool,
        "status": status,
        "risk": risk,
        "hints_risk": claimed_risk(definition.get("annotations")),
        "hints_accepted": accepted is not None,
        "trusted": trusted,
        "annotations": annotation_text(definition.get("annotations")),
        "title": clean_text(str(definition.get("title") or ""), TITLE_LIMIT),
        "description": clean_text(str(definition.get("description") or ""), TOOL_DOC_LIMIT),
        "notes": review_notes(server, tool, definition)
        + [note for note in [compensation_note(server, tool, definition, trusted)] if note],
        "changed": changed_parts(entry),
    }


def _description_cell(row: dict[str, Any]) -> str:
    """Title, description and notes, as markup that prints the server's text literally."""
    parts = [f"[bold]{escape(row['title'])}[/]"] if row["title"] else []
    parts.append(escape(row["description"]) or "[dim](no description)[/]")
    # A note may quote a pattern, or RE2's words about one: server text, made visible too.
    parts.extend(f"[yellow]! {escape(escape_invisible(note))}[/]" for note in row["notes"])
    return "\n".join(parts)


def hints_cell(row: dict[str, Any]) -> str:
    """The tool's annotations and the risk they give if believed, said as what they are: claims
    (accepted at review, believed because the server is trusted, or not believed yet)."""
    claimed = row["hints_risk"]
    text = f"{escape(row['annotations'])} → [{_RISK_STYLES[claimed]}]{claimed}[/]"
    if row["hints_accepted"]:
        return text + " [dim](accepted)[/]"
    if row["trusted"]:
        return text + " [dim](server trusted)[/]"
    return text


def review_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(show_edge=False, header_style="bold", title="to review", title_justify="left")
    table.add_column("server/tool", overflow="fold")
    table.add_column("status")
    table.add_column("risk")
    table.add_column("annotations → risk if accepted", overflow="fold")
    table.add_column("changed", overflow="fold")
    table.add_column("description", ratio=1, overflow="fold")
    for row in rows:
        table.add_row(
            escape(f"{row['server']}/{row['tool']}"),
            f"[{_STYLES[row['status']]}]{row['status']}[/]",
            f"[{_RISK_STYLES[row['risk']]}]{row['risk']}[/]",
            hints_cell(row),
            escape(", ".join(row["changed"]) or ("-" if row["status"] != "new" else "(new)")),
            _description_cell(row),
        )
    return table
