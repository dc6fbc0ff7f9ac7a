"""Filter and aggregate the 12,480-row sales sheet: revenue of one product per region."""

# pyright: basic
# (Task files are written the way a user writes one: plain dicts from JSON, no casts.)

from __future__ import annotations

import json
from typing import Any

from codemode.bench import (
    Final,
    Message,
    Reply,
    call,
    json_results,
    search_then_run,
    turn,
)

KIND = "large sheet filtered and aggregated (docs)"
PROMPT = (
    "From the docs sheet sales-2026, total the revenue (column total) of product 'Harbor Storage TB' "
    'per region. Answer with JSON {"<region>": <total rounded to cents>, ...}.'
)
EXPECTED = {"EMEA": 262546.15, "APAC": 169381.2, "NA": 275557.25, "LATAM": 71280.45}
PAGE = 1000


def direct_agent(history: list[Message]) -> Reply:
    # A model pages through the sheet (the tool's largest page is 1,000 rows) and adds up as it reads.
    pages = [m for m in history if m.get("name") == "docs__get_sheet"]
    if pages:
        last = json_results(history)[0]
        if last["next_offset"] is None:
            totals: dict[str, float] = {}
            for message in pages:
                for row in json.loads(message["content"])["rows"]:
                    if row["product"] == "Harbor Storage TB":
                        totals[row["region"]] = totals.get(row["region"], 0.0) + float(row["total"])
            return Final({k: round(v, 2) for k, v in totals.items()})
        return turn(call("docs__get_sheet", sheet_id="sales-2026", offset=last["next_offset"], limit=PAGE))
    return turn(call("docs__get_sheet", sheet_id="sales-2026", offset=0, limit=PAGE))


PROGRAM = """\
from servers.docs import get_sheet
totals = {}
offset = 0
while offset is not None:
    page = get_sheet(sheet_id="sales-2026", offset=offset, limit=1000)
    for row in page["rows"]:
        if row["product"] == "Harbor Storage TB":
            totals[row["region"]] = totals.get(row["region"], 0.0) + float(row["total"])
    offset = page["next_offset"]
{k: round(v, 2) for k, v in totals.items()}
"""


def codemode_agent(history: list[Message]) -> Reply:
    return search_then_run(history, "read rows of a spreadsheet", PROGRAM, k=3)


def check(answer: Any) -> bool:
    if not isinstance(answer, dict) or set(answer) != set(EXPECTED):  # pyright: ignore[reportUnknownArgumentType]
        return False
    return all(abs(float(answer[k]) - v) < 0.02 for k, v in EXPECTED.items())
