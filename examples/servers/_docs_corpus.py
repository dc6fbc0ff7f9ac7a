"""The catalogue of the example ``docs`` server: which of its 40 seeded documents exist.

20 meeting transcripts (six of them longer than 50,000 characters), 12 memos and 8 spreadsheets,
each described by a ``Spec`` (id, title, kind, date, author, speakers, tags and how to generate
it). The text comes from ``_docs_text`` and the spreadsheet rows from ``_docs_sheets``, lazily, from
fixed seeds, so every start serves exactly the same bytes. Imported by ``docs_server.py`` as a plain
top-level module (``import _docs_corpus``), like ``_common``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Literal

import _docs_sheets
import _world

Kind = Literal["transcript", "memo", "spreadsheet"]

# --------------------------------------------------------------------------------------------
# Catalogue
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    doc_id: str
    title: str
    kind: Kind
    created: str
    author: str | None
    participants: tuple[str, ...]
    tags: tuple[str, ...]
    style: str  # generator style
    target: int = 0  # transcripts: minimum length in characters
    focus: str | None = None  # a customer id the document is about


def staff_name(handle: str) -> str:
    return _world.STAFF[handle][0]


TRIAGE = ("priya.shah", "marcus.lee", "elena.rossi", "tom.becker", "aisha.okafor")
ACCOUNT = ("david.kim", "lucas.moreau", "priya.shah", "hannah.weber")
QBR = ("david.kim", "hannah.weber", "omar.haddad", "lucas.moreau", "priya.shah", "kenji.tanaka")
INCIDENT = ("aisha.okafor", "kenji.tanaka", "sofia.alvarez", "priya.shah", "marcus.lee")
ROADMAP = ("kenji.tanaka", "sofia.alvarez", "aisha.okafor", "nina.petrov")
RENEWALS = ("omar.haddad", "david.kim", "hannah.weber", "lucas.moreau", "nina.petrov")
CAB = ("nina.petrov", "lucas.moreau", "kenji.tanaka")
ACCOUNT_FOCUS = ("CUST-0042", "CUST-0127", "CUST-0253", "CUST-0310", "CUST-0437")
CAB_GUESTS = ("CUST-0069", "CUST-0184", "CUST-0219", "CUST-0391")


@cache
def catalogue() -> tuple[Spec, ...]:
    specs: list[Spec] = []
    triage_dates = ("01-12", "01-26", "02-09", "02-23", "03-09", "03-23", "04-13", "05-04")
    triage_long = {"02-23", "04-13"}
    for index, md in enumerate(triage_dates):
        specs.append(
            Spec(
                f"mtg-2026-{md}-support-triage",
                f"Weekly support triage, 2026-{md}",
                "transcript",
                f"2026-{md}",
                None,
                TRIAGE,
                ("support", "triage", "tickets"),
                "triage",
                target=56_000 + 4_000 * index if md in triage_long else 9_000 + 1_700 * index,
            )
        )
    for index, cid in enumerate(ACCOUNT_FOCUS):
        brief = _world.customer_by_id(cid)
        assert brief is not None
        md = ("01-15", "02-12", "03-12", "04-16", "05-21")[index]
        specs.append(
            Spec(
                f"mtg-2026-{md}-account-review-{cid.lower()}",
                f"Account review: {brief.company} ({cid})",
                "transcript",
                f"2026-{md}",
                None,
                ACCOUNT,
                ("account-review", "customer", cid),
                "account",
                target=61_000 if index == 2 else 12_000 + 2_500 * index,
                focus=cid,
            )
        )
    specs += [
        Spec(
            "mtg-2026-04-09-q1-business-review",
            "Quarterly business review, Q1 2026",
            "transcript",
            "2026-04-09",
            None,
            QBR,
            ("qbr", "revenue", "regions"),
            "qbr",
            target=91_000,
        ),
        Spec(
            "mtg-2026-03-16-incident-review-api-latency",
            "Incident review: Compass API latency on 2026-03-14",
            "transcript",
            "2026-03-16",
            None,
            INCIDENT,
            ("incident", "api", "postmortem"),
            "incident",
            target=66_000,
        ),
        Spec(
            "mtg-2026-06-11-customer-advisory-board",
            "Customer advisory board, June 2026",
            "transcript",
            "2026-06-11",
            None,
            CAB,
            ("customer-advisory-board", "feedback", "roadmap"),
            "cab",
            target=72_000,
        ),
        Spec(
            "mtg-2026-02-05-roadmap-sync",
            "Product roadmap sync, February",
            "transcript",
            "2026-02-05",
            None,
            ROADMAP,
            ("roadmap", "product"),
            "roadmap",
            target=7_000,
        ),
        Spec(
            "mtg-2026-05-07-roadmap-sync",
            "Product roadmap sync, May",
            "transcript",
            "2026-05-07",
            None,
            ROADMAP,
            ("roadmap", "product"),
            "roadmap",
            target=8_500,
        ),
        Spec(
            "mtg-2026-03-03-renewal-pipeline",
            "Renewal pipeline review, March",
            "transcript",
            "2026-03-03",
            None,
            RENEWALS,
            ("renewals", "finance", "pipeline"),
            "renewals",
            target=14_000,
        ),
        Spec(
            "mtg-2026-06-02-renewal-pipeline",
            "Renewal pipeline review, June",
            "transcript",
            "2026-06-02",
            None,
            RENEWALS,
            ("renewals", "finance", "pipeline"),
            "renewals",
            target=16_000,
        ),
    ]
    for doc_id, title, created, author, tags, focus in MEMOS:
        specs.append(Spec(doc_id, title, "memo", created, author, (), tags, "memo", focus=focus))
    for sheet_id, (title, created, author, tags, _rows, _cols) in _docs_sheets.SHEETS.items():
        specs.append(Spec(sheet_id, title, "spreadsheet", created, author, (), tags, "sheet"))
    specs.sort(key=lambda s: (s.created, s.doc_id))
    return tuple(specs)


@cache
def specs_by_id() -> dict[str, Spec]:
    return {s.doc_id: s for s in catalogue()}


# --------------------------------------------------------------------------------------------
# Memos (the catalogue rows; their text is in _docs_text)
# --------------------------------------------------------------------------------------------


MEMOS: tuple[tuple[str, str, str, str, tuple[str, ...], str | None], ...] = (
    ("memo-2026-01-08-support-staffing-h1", "Support staffing plan, H1 2026", "2026-01-08", "priya.shah",
     ("support", "staffing"), None),
    ("memo-2026-01-20-harbor-storage-pricing", "Harbor Storage price change from 1 March", "2026-01-20",
     "omar.haddad", ("pricing", "finance"), None),
    ("memo-2026-02-02-sso-certificate-rotation", "Action required: SSO certificate rotation", "2026-02-02",
     "aisha.okafor", ("security", "sso"), None),
    ("memo-2026-02-16-escalation-cust-0253", "Escalation: renewal at risk (CUST-0253)", "2026-02-16",
     "lucas.moreau", ("escalation", "customer", "CUST-0253"), "CUST-0253"),
    ("memo-2026-03-17-postmortem-api-latency", "Postmortem: Compass API latency, 14 March", "2026-03-17",
     "kenji.tanaka", ("incident", "postmortem", "api"), None),
    ("memo-2026-03-31-q1-support-summary", "Q1 support summary", "2026-03-31", "priya.shah",
     ("support", "quarterly"), None),
    ("memo-2026-04-06-data-retention-policy", "Data retention policy update", "2026-04-06", "sofia.alvarez",
     ("policy", "security"), None),
    ("memo-2026-04-20-renewal-risk-list", "Renewal risk list, Q2", "2026-04-20", "nina.petrov",
     ("renewals", "risk"), None),
    ("memo-2026-05-04-refund-policy", "Refund policy clarification", "2026-05-04", "omar.haddad",
     ("finance", "policy", "billing"), None),
    ("memo-2026-05-18-enterprise-onboarding", "Enterprise onboarding playbook v2", "2026-05-18",
     "nina.petrov", ("onboarding", "playbook"), None),
    ("memo-2026-06-01-h2-roadmap-priorities", "H2 roadmap priorities", "2026-06-01", "kenji.tanaka",
     ("roadmap", "product"), None),
    ("memo-2026-06-15-advisory-board-recap", "Customer advisory board recap", "2026-06-15", "nina.petrov",
     ("customer-advisory-board", "feedback"), None),
)  # fmt: skip
