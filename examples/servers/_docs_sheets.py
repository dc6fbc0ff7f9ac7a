"""The spreadsheets of the example ``docs`` server: 8 seeded sheets and their rows.

Each sheet's rows are generated from a fixed seed on first use (``sheet_rows``), from the shared
world in ``_world``, so ``sales-2026`` (12,480 rows) costs nothing until it is read. Imported by
``docs_server.py`` and ``_docs_corpus`` as a plain top-level module (``import _docs_sheets``), like
``_common``.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import random
from collections.abc import Callable
from functools import cache

import _world

Cell = str | int | float

# --------------------------------------------------------------------------------------------
# Spreadsheets
# --------------------------------------------------------------------------------------------

Row = dict[str, Cell]


def _sales(first: dt.date, days: int, count: int, seed: str) -> list[Row]:
    rng = random.Random(seed)
    everyone = _world.customers()
    weights = [{"enterprise": 6, "mid-market": 3, "smb": 1, "startup": 1}[c.segment] for c in everyone]
    buyers = rng.choices(everyone, weights=weights, k=count)
    products = list(_world.PRODUCTS)
    rows: list[Row] = []
    for index, buyer in enumerate(buyers):
        product = rng.choice(products)
        list_price = _world.PRODUCTS[product]
        units = rng.randint(1, 3) if list_price >= 400 else rng.randint(1, 60)
        price = round(list_price * rng.choice((1.0, 1.0, 1.0, 0.9, 0.85, 0.8)), 2)
        rows.append(
            {
                "date": (first + dt.timedelta(days=index * days // count)).isoformat(),
                "region": buyer.region,
                "customer_id": buyer.customer_id,
                "product": product,
                "units": units,
                "unit_price": price,
                "total": round(units * price, 2),
            }
        )
    return rows


def _renewals() -> list[Row]:
    rng = random.Random(f"{_world.SEED}:renewals")
    base = {"enterprise": 180, "mid-market": 45, "smb": 9, "startup": 5}
    owners = ("david.kim", "hannah.weber", "lucas.moreau", "nina.petrov")
    rows: list[Row] = []
    for c in _world.customers():
        arr = round(base[c.segment] * 1000 * rng.lognormvariate(0, 0.45), 2)
        rows.append(
            {
                "customer_id": c.customer_id,
                "company": c.company,
                "segment": c.segment,
                "renewal_date": f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
                "current_arr": arr,
                "proposed_arr": round(arr * rng.choice((1.0, 1.03, 1.05, 1.08, 1.1, 0.95)), 2),
                "risk": rng.choices(("low", "medium", "high"), weights=(60, 28, 12))[0],
                "owner": rng.choice(owners),
            }
        )
    return rows


def _headcount() -> list[Row]:
    rng = random.Random(f"{_world.SEED}:headcount")
    teams = ("support", "engineering", "sales", "customer-success", "finance", "marketing", "product")
    rows: list[Row] = []
    people = [(name, team) for name, team in _world.STAFF.values()]
    while len(people) < 140:
        people.append(
            (f"{rng.choice(_world.FIRST_NAMES)} {rng.choice(_world.LAST_NAMES)}", rng.choice(teams))
        )
    for index, (name, team) in enumerate(people):
        rows.append(
            {
                "employee_id": f"E{1001 + index}",
                "name": name,
                "team": team,
                "location": rng.choice(("Berlin", "London", "New York", "Toronto", "Singapore", "Remote")),
                "start_date": f"{rng.randint(2016, 2026)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
                "level": rng.choice(("L2", "L3", "L3", "L4", "L4", "L5", "L6")),
            }
        )
    return rows


def _kpis() -> list[Row]:
    rng = random.Random(f"{_world.SEED}:kpis")
    start = dt.date(2026, 1, 5)
    return [
        {
            "week_start": (start + dt.timedelta(weeks=w)).isoformat(),
            "tickets_opened": rng.randint(8, 19),
            "tickets_closed": rng.randint(7, 18),
            "median_first_response_minutes": rng.randint(22, 58),
            "csat": round(rng.uniform(4.1, 4.8), 2),
        }
        for w in range(26)
    ]


def _pipeline() -> list[Row]:
    rng = random.Random(f"{_world.SEED}:pipeline")
    stages = ("qualification", "discovery", "proposal", "negotiation", "closed-won", "closed-lost")
    return [
        {
            "opportunity_id": f"OPP-{5001 + i}",
            "customer_id": _world.customer_id(rng.randint(1, _world.CUSTOMER_COUNT)),
            "stage": rng.choice(stages),
            "amount": round(rng.lognormvariate(10, 0.9), 2),
            "close_month": rng.choice(("2026-07", "2026-08", "2026-09")),
            "owner": rng.choice(("david.kim", "hannah.weber")),
        }
        for i in range(420)
    ]


def _price_list() -> list[Row]:
    units = ("seat", "seat", "seat", "100k calls", "TB", "host", "user", "account", "package", "connector")
    return [
        {"product": p, "list_price": price, "unit": unit}
        for (p, price), unit in zip(_world.PRODUCTS.items(), units, strict=True)
    ]


def _sla_breaches() -> list[Row]:
    rng = random.Random(f"{_world.SEED}:sla")
    numbers = sorted(rng.sample(range(_world.TICKET_COUNT), 60))
    rows: list[Row] = []
    for i in numbers:
        tid = _world.ticket_id(_world.FIRST_TICKET + i)
        rows.append(
            {
                "ticket_id": tid,
                "customer_id": _world.ticket_customers()[i],
                "sla": rng.choice(("first_response", "resolution")),
                "breached_on": (dt.date(2026, 1, 6) + dt.timedelta(days=i * 175 // 300 + 2)).isoformat(),
                "hours_over": round(rng.uniform(0.2, 30.0), 1),
            }
        )
    return rows


SALES_COLUMNS = ["date", "region", "customer_id", "product", "units", "unit_price", "total"]
SHEETS: dict[str, tuple[str, str, str, tuple[str, ...], Callable[[], list[Row]], list[str]]] = {
    "sales-2026": (
        "Sales line items, 2026 (January to June)", "2026-07-01", "omar.haddad", ("sales", "finance", "2026"),
        lambda: _sales(dt.date(2026, 1, 1), 181, 12_480, f"{_world.SEED}:sales-2026"), SALES_COLUMNS,
    ),
    "sales-2025-h2": (
        "Sales line items, 2025 H2", "2026-01-04", "omar.haddad", ("sales", "finance", "2025"),
        lambda: _sales(dt.date(2025, 7, 1), 184, 6_000, f"{_world.SEED}:sales-2025-h2"), SALES_COLUMNS,
    ),
    "renewals-2026": (
        "Renewals 2026", "2026-01-06", "nina.petrov", ("renewals", "customers"), _renewals,
        ["customer_id", "company", "segment", "renewal_date", "current_arr", "proposed_arr", "risk", "owner"],
    ),
    "headcount-2026": (
        "Headcount 2026", "2026-01-10", "omar.haddad", ("people", "finance"), _headcount,
        ["employee_id", "name", "team", "location", "start_date", "level"],
    ),
    "support-kpis-2026-weekly": (
        "Support KPIs, weekly, H1 2026", "2026-06-29", "priya.shah", ("support", "kpi"), _kpis,
        ["week_start", "tickets_opened", "tickets_closed", "median_first_response_minutes", "csat"],
    ),
    "pipeline-2026-q3": (
        "Sales pipeline, Q3 2026", "2026-06-24", "david.kim", ("sales", "pipeline"), _pipeline,
        ["opportunity_id", "customer_id", "stage", "amount", "close_month", "owner"],
    ),
    "price-list-2026": (
        "Price list 2026", "2026-01-02", "omar.haddad", ("pricing",), _price_list,
        ["product", "list_price", "unit"],
    ),
    "sla-breaches-2026": (
        "SLA breaches, H1 2026", "2026-06-30", "priya.shah", ("support", "sla", "tickets"), _sla_breaches,
        ["ticket_id", "customer_id", "sla", "breached_on", "hours_over"],
    ),
}  # fmt: skip


@cache
def sheet_rows(sheet_id: str) -> tuple[Row, ...]:
    return tuple(SHEETS[sheet_id][4]())


def sheet_csv(sheet_id: str) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=SHEETS[sheet_id][5], lineterminator="\n")
    writer.writeheader()
    writer.writerows(sheet_rows(sheet_id))
    return out.getvalue()
