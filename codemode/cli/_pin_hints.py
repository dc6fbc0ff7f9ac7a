"""Accepting tools' own hints at review: ``codemode pin --accept-hints``, and the question
``codemode pin --approve`` asks at a terminal.

An untrusted server's hints (``readOnlyHint`` …) never lower a tool's risk by themselves, so
every call of such a tool needs approval. The reviewer who reads a tool's definition is the
person to say whether its claim is believable: accepting stores the risk the hints give with the
approved pin (``codemode.catalog.accept_hints``), bound to its hash. After a plain
``--approve`` at a terminal the reviewer is asked, server by server; elsewhere a line says how.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import click

from codemode.catalog import HintReview, Pins, ToolStatus, load_lock
from codemode.cli._common import print_json, stdout
from codemode.cli._pin_review import plain, review_row
from codemode.config import RISK_ORDER, Config
from codemode.stubs import escape_invisible


def at_a_terminal() -> bool:
    """Whether a person can be asked: both ends of the conversation are a terminal."""
    return sys.stdin.isatty() and sys.stdout.isatty()


def candidates(config: Config, labels: Sequence[str]) -> list[dict[str, Any]]:
    """The review rows of the approved tools among ``labels`` whose own hints, if accepted, would
    lower their risk (their server is not trusted and nothing was accepted yet)."""
    lock = load_lock(config.lock_path)
    rows: list[dict[str, Any]] = []
    for label in labels:
        server, _, tool = label.partition("/")
        entry = lock.entry(server, tool)
        if entry is None or entry.approved is None or entry.observed is not None or entry.removed:
            continue
        row = review_row(config, server, tool, ToolStatus.APPROVED.value, entry)
        if not row["trusted"] and RISK_ORDER[row["hints_risk"]] < RISK_ORDER[row["risk"]]:
            rows.append(row)
    return rows


def _ask(rows: list[dict[str, Any]]) -> list[str]:
    """Server by server, whether to accept the hints of ``rows``: yes, no, or tool by tool."""
    chosen: list[str] = []
    servers = sorted({row["server"] for row in rows})
    for server in servers:
        group = [row for row in rows if row["server"] == server]
        width = max(len(f"{row['server']}/{row['tool']}") for row in group)
        click.echo(
            f"\n{escape_invisible(server)}: {len(group)} tool(s) claim hints that would lower their "
            "risk if you accept them:"
        )
        for row in group:
            label = escape_invisible(f"{row['server']}/{row['tool']}")
            click.echo(f"  {label:<{width}}  {row['annotations']} → {row['hints_risk']} (now {row['risk']})")
        answer = click.prompt(
            "Accept these hints? A tool keeps them until its definition changes. "
            "[y]es, [n]o, or ask for [e]ach tool",
            type=click.Choice(["y", "n", "e"]),
            default="n",
            show_choices=False,
        )
        for row in group:
            label = f"{row['server']}/{row['tool']}"
            if answer == "y" or (
                answer == "e"
                and click.confirm(
                    f"  accept the hints of {escape_invisible(label)} ({row['hints_risk']} risk)?",
                    default=False,
                )
            ):
                chosen.append(label)
    return chosen


def approve_and_accept(
    config: Config, selectors: Sequence[str], *, approve: bool, accept: bool, as_json: bool, ask: bool
) -> None:
    """``codemode pin --approve`` and/or ``--accept-hints`` for ``selectors`` (all when empty)."""
    pins = Pins(config.lock_path)
    chosen: list[str | None] = [*selectors] or [None]
    reviews: list[HintReview] = []
    if accept:
        done, reviews = pins.accept_hints(chosen, approve_first=approve)
    else:
        done = pins.approve(chosen)
    open_claims = [] if accept else candidates(config, done)
    if open_claims and ask and not as_json:
        accepted = _ask(open_claims)
        if accepted:
            reviews = pins.accept_hints(accepted)[1]
        open_claims = [row for row in open_claims if f"{row['server']}/{row['tool']}" not in accepted]
    if as_json:
        print_json(
            {
                "approved": done,
                "hints_accepted": [
                    {"tool": r.label, "risk": r.claimed} for r in reviews if r.claimed != "high"
                ],
                "hints_give_nothing_lower": [r.label for r in reviews if r.claimed == "high"],
                "hints_to_review": [f"{row['server']}/{row['tool']}" for row in open_claims],
            }
        )
        return
    for label in done:
        stdout.print(f"[green]approved[/] {plain(label)}", highlight=False)
    if approve and not done:
        stdout.print("nothing was pending approval", highlight=False)
    _print_reviews(config, reviews)
    if open_claims:
        listed = ", ".join(f"{row['server']}/{row['tool']} ({row['hints_risk']})" for row in open_claims)
        stdout.print(
            f"{len(open_claims)} approved tool(s) claim hints that would lower their risk: "
            f"{plain(listed)}. Every call of them needs approval until you accept them (after "
            "reading them) with 'codemode pin --accept-hints SERVER\\[/TOOL]'.",
            highlight=False,
        )


def _print_reviews(config: Config, reviews: list[HintReview]) -> None:
    for review in reviews:
        label = plain(review.label)
        server = config.servers.get(review.server)
        if review.claimed == "high":
            stdout.print(
                f"{label}: its hints give nothing lower than high risk (no read-only or "
                "non-destructive claim, or a destructive one): nothing to accept",
                highlight=False,
            )
        else:
            trusted = " (its server is trusted: they counted already)" if server and server.trusted else ""
            stdout.print(
                f"[green]accepted[/] the hints of {label}: {review.claimed} risk{trusted}", highlight=False
            )
