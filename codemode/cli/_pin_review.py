"""What ``codemode pin`` shows a reviewer: each new or changed tool with its risk and what changed.

A person approving a pin approves a definition they should be able to read in one screen: the
server and tool, the risk codemode will give it (which decides consent), its annotations, a
short description (server text, cleaned of control and invisible characters), and for a
changed tool which parts of the definition differ from the approved one.
"""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.table import Table

from codemode.broker._risk import tool_risk
from codemode.catalog import LockEntry
from codemode.config import Config
from codemode.stubs._sanitize import first_sentence

_HINTS = (
    ("readOnlyHint", "read-only"),
    ("destructiveHint", "destructive"),
    ("idempotentHint", "idempotent"),
    ("openWorldHint", "open-world"),
)
_PARTS = ("title", "description", "inputSchema", "outputSchema", "annotations")
_STYLES = {"approved": "green", "new": "cyan", "changed": "yellow", "removed": "red"}
_RISK_STYLES = {"low": "green", "medium": "yellow", "high": "red"}


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


def review_row(config: Config, server: str, tool: str, status: str, entry: LockEntry) -> dict[str, Any]:
    pinned = entry.observed or entry.approved
    definition: dict[str, Any] = pinned.definition if pinned is not None else {}
    server_config = config.servers.get(server)
    risk = tool_risk(
        config.policy,
        server,
        tool,
        definition.get("annotations"),
        trusted=bool(server_config and server_config.trusted),
    )
    return {
        "server": server,
        "tool": tool,
        "status": status,
        "risk": risk,
        "annotations": annotation_text(definition.get("annotations")),
        "description": first_sentence(str(definition.get("description") or ""), 80),
        "changed": changed_parts(entry),
    }


def review_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(show_edge=False, header_style="bold", title="to review", title_justify="left")
    table.add_column("server/tool", overflow="fold")
    table.add_column("status")
    table.add_column("risk")
    table.add_column("annotations", overflow="fold")
    table.add_column("changed", overflow="fold")
    table.add_column("description", ratio=1, overflow="fold")
    for row in rows:
        table.add_row(
            escape(f"{row['server']}/{row['tool']}"),
            f"[{_STYLES[row['status']]}]{row['status']}[/]",
            f"[{_RISK_STYLES[row['risk']]}]{row['risk']}[/]",
            escape(row["annotations"]),
            escape(", ".join(row["changed"]) or ("-" if row["status"] != "new" else "(new)")),
            escape(row["description"]),
        )
    return table
