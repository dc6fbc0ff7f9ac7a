"""A long meeting transcript (over 90,000 characters) copied into a CRM record, as notes of at
most 5,000 characters each (the crm's note limit)."""

# pyright: basic
# (Task files are written the way a user writes one: plain dicts from JSON, no casts.)

from __future__ import annotations

import json
from typing import Any

from codemode.bench import (
    Final,
    Message,
    Reply,
    assistant_turns,
    call,
    json_results,
    search_then_run,
    turn,
)

KIND = "large result moved between servers (docs -> crm)"
PROMPT = (
    "Copy the full text of the longest meeting transcript in docs into the CRM record of customer "
    "CUST-0311, as consecutive notes of at most 5000 characters. Answer with JSON "
    '{"doc_id": ..., "notes": <notes written>, "chars": <characters copied>}.'
)
CHUNK = 5000


def direct_agent(history: list[Message]) -> Reply:
    step = assistant_turns(history)
    if step == 0:
        return turn(call("docs__list_documents", kind="transcript", limit=50))
    if step == 1:
        docs = json_results(history)[0]["documents"]
        longest = max(docs, key=lambda d: d["size_chars"])
        return turn(call("docs__get_document", doc_id=longest["doc_id"]))
    if step == 2:
        document = json_results(history)[0]
        text = document["text"]
        chunks = [text[i : i + CHUNK] for i in range(0, len(text), CHUNK)]
        return turn(*(call("crm__add_note", customer_id="CUST-0311", text=c) for c in chunks))
    receipts = json_results(history)
    ok = [r for r in receipts if isinstance(r, dict) and str(r.get("receipt_id", "")).startswith("rcpt_")]
    read = next(m for m in history if m.get("name") == "docs__get_document")
    document = json.loads(read["content"])
    return Final({"doc_id": document["doc_id"], "notes": len(ok), "chars": len(document["text"])})


PROGRAM = """\
from servers.docs import list_documents, get_document
from servers.crm import add_note
docs = list_documents(kind="transcript", limit=50)["documents"]
longest = max(docs, key=lambda d: d["size_chars"])
text = get_document(doc_id=longest["doc_id"])["text"]
receipts = [add_note(customer_id="CUST-0311", text=text[i:i + 5000]) for i in range(0, len(text), 5000)]
{"doc_id": longest["doc_id"], "notes": len(receipts), "chars": len(text)}
"""


def codemode_agent(history: list[Message]) -> Reply:
    return search_then_run(history, "read a document's full text, add a note to a customer", PROGRAM, k=4)


def check(answer: Any) -> bool:
    if not isinstance(answer, dict):
        return False
    chars = int(answer.get("chars", 0))  # pyright: ignore[reportUnknownArgumentType]
    notes = int(answer.get("notes", 0))  # pyright: ignore[reportUnknownArgumentType]
    return (
        answer.get("doc_id") == "mtg-2026-04-09-q1-business-review"
        and chars > 90_000
        and notes == -(-chars // CHUNK)
    )
