# Which high-risk renewals should the account team look at first?
#
# Joins three servers inside the sandbox: the renewals sheet (docs), open tickets (tickets) and
# 2026 sales (docs, 12,480 rows read in pages). Only the five-row answer goes back to the model.
from servers.docs import get_sheet, query_sheet
from servers.tickets import list_tickets

import codemode

renewals = query_sheet(sheet_id="renewals-2026", column="risk", equals="high", limit=500)["rows"]

# 2026 revenue per customer, paging through the whole sales sheet.
revenue: dict[str, float] = {}
offset = 0
while offset is not None:
    page = get_sheet(sheet_id="sales-2026", offset=offset, limit=1000)
    for row in page["rows"]:
        revenue[row["customer_id"]] = revenue.get(row["customer_id"], 0.0) + float(row["total"])
    offset = page["next_offset"]

# Open tickets of every at-risk customer, fetched concurrently.
ids = [row["customer_id"] for row in renewals]
tickets = codemode.parallel(list_tickets, [{"customer_id": cid, "status": "open"} for cid in ids])
open_count = {cid: len(result["tickets"]) for cid, result in zip(ids, tickets, strict=True)}

ranked = sorted(renewals, key=lambda row: float(row["current_arr"]), reverse=True)[:5]
[
    {
        "customer": row["customer_id"],
        "company": row["company"],
        "arr": float(row["current_arr"]),
        "renewal": row["renewal_date"],
        "open_tickets": open_count[row["customer_id"]],
        "revenue_2026": round(revenue.get(row["customer_id"], 0.0), 2),
    }
    for row in ranked
]
