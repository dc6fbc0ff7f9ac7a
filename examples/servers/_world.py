"""The seeded "world" the example servers (``docs``, ``crm``, ``tickets``) agree on.

Customers, staff, products, and which customer each ticket belongs to, so that joins across
servers make sense. Imported by the server scripts as a plain top-level module (``import _world``),
like ``_common``. Everything is generated from fixed seeds and is always the same.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cache

SEED = "codemode-examples-v1"

# --------------------------------------------------------------------------------------------
# The shared, seeded world
# --------------------------------------------------------------------------------------------

FIRST_NAMES = (
    "Ada", "Aiko", "Alejandro", "Amara", "Anders", "Ana", "Arjun", "Beatriz", "Bruno", "Camille",
    "Carlos", "Chen", "Chloe", "Dana", "Daniel", "Diego", "Elena", "Emeka", "Emma", "Farah",
    "Felix", "Fatima", "Gabriel", "Grace", "Hana", "Hugo", "Ines", "Isaac", "Ivan", "Jana",
    "Javier", "Jin", "Johan", "Julia", "Kai", "Karin", "Kwame", "Lars", "Laura", "Leila",
    "Liam", "Lucia", "Mateo", "Maya", "Mei", "Mohammed", "Nadia", "Nikhil", "Noah", "Olga",
    "Omar", "Paula", "Pedro", "Rafael", "Rina", "Rosa", "Sara", "Sofia", "Sven", "Tomas",
    "Valentina", "Victor", "Yara", "Yusuf", "Zara", "Zoe",
)  # fmt: skip
LAST_NAMES = (
    "Abe", "Adeyemi", "Alvarez", "Andersson", "Bauer", "Becker", "Bianchi", "Costa", "Dubois",
    "Eriksen", "Fernandes", "Fischer", "Garcia", "Gupta", "Hansen", "Haddad", "Ibrahim", "Ivanova",
    "Jensen", "Kim", "Kowalski", "Kumar", "Laurent", "Lee", "Lindqvist", "Lopez", "Mensah",
    "Moreau", "Muller", "Nakamura", "Novak", "Nowak", "Okafor", "Olsen", "Park", "Patel",
    "Petrov", "Rossi", "Santos", "Sato", "Schmidt", "Silva", "Singh", "Tanaka", "Torres",
    "Van Dijk", "Wagner", "Wang", "Weber", "Yilmaz", "Zhang",
)  # fmt: skip
COMPANY_PREFIXES = (
    "Northwind", "Bluefin", "Cobalt", "Evergreen", "Granite", "Harbor", "Ironclad", "Juniper",
    "Keystone", "Lumen", "Meridian", "Nimbus", "Orchid", "Pinnacle", "Quarry", "Redwood",
    "Sable", "Tidewater", "Umbra", "Vantage", "Willow", "Xenon", "Yellowstone", "Zephyr",
    "Alder", "Brightline", "Crescent", "Driftwood", "Ember", "Foxglove", "Glacier", "Helix",
)  # fmt: skip
COMPANY_SUFFIXES = (
    "Logistics", "Analytics", "Health", "Foods", "Robotics", "Capital", "Energy", "Labs",
    "Media", "Outfitters", "Pharma", "Retail", "Systems", "Telecom", "Travel", "Ventures",
    "Manufacturing", "Insurance", "Education", "Biotech",
)  # fmt: skip
COUNTRIES = {
    # country: (region, phone country code, email tld)
    "US": ("NA", "+1", "com"),
    "CA": ("NA", "+1", "ca"),
    "MX": ("LATAM", "+52", "mx"),
    "BR": ("LATAM", "+55", "com.br"),
    "GB": ("EMEA", "+44", "co.uk"),
    "DE": ("EMEA", "+49", "de"),
    "FR": ("EMEA", "+33", "fr"),
    "NL": ("EMEA", "+31", "nl"),
    "SE": ("EMEA", "+46", "se"),
    "ES": ("EMEA", "+34", "es"),
    "NG": ("EMEA", "+234", "com.ng"),
    "IN": ("APAC", "+91", "in"),
    "JP": ("APAC", "+81", "jp"),
    "SG": ("APAC", "+65", "sg"),
    "AU": ("APAC", "+61", "com.au"),
}
COUNTRY_WEIGHTS = (30, 6, 4, 5, 9, 8, 6, 4, 3, 3, 2, 7, 5, 4, 4)
SEGMENTS = ("enterprise", "mid-market", "smb", "startup")
SEGMENT_WEIGHTS = (15, 30, 40, 15)

# Staff of the company that runs these systems: they speak in the transcripts, write the memos
# and work the tickets. handle -> (full name, team)
STAFF = {
    "priya.shah": ("Priya Shah", "support"),
    "marcus.lee": ("Marcus Lee", "support"),
    "elena.rossi": ("Elena Rossi", "support"),
    "tom.becker": ("Tom Becker", "support"),
    "aisha.okafor": ("Aisha Okafor", "engineering"),
    "kenji.tanaka": ("Kenji Tanaka", "engineering"),
    "sofia.alvarez": ("Sofia Alvarez", "engineering"),
    "david.kim": ("David Kim", "sales"),
    "hannah.weber": ("Hannah Weber", "sales"),
    "lucas.moreau": ("Lucas Moreau", "customer-success"),
    "nina.petrov": ("Nina Petrov", "customer-success"),
    "omar.haddad": ("Omar Haddad", "finance"),
}

# product: list price in USD
PRODUCTS = {
    "Atlas Analytics Seat": 49.0,
    "Atlas Analytics Enterprise Seat": 119.0,
    "Beacon Sync Add-on": 19.0,
    "Compass API 100k Calls": 12.5,
    "Harbor Storage TB": 23.0,
    "Lighthouse Monitoring Host": 15.0,
    "Sentinel SSO": 6.0,
    "Premium Support": 499.0,
    "Onboarding Package": 1500.0,
    "Data Export Connector": 79.0,
}

TICKET_COUNT = 300
FIRST_TICKET = 1001
CUSTOMER_COUNT = 500


def customer_id(number: int) -> str:
    return f"CUST-{number:04d}"


def ticket_id(number: int) -> str:
    return f"TCK-{number}"


@dataclass(frozen=True)
class CustomerBrief:
    """The part of a customer record every server agrees on."""

    customer_id: str
    company: str
    contact_first: str
    contact_last: str
    country: str
    region: str
    segment: str

    @property
    def contact_name(self) -> str:
        return f"{self.contact_first} {self.contact_last}"


@cache
def customers() -> tuple[CustomerBrief, ...]:
    """The 500 customers (CUST-0001 … CUST-0500), always the same."""
    rng = random.Random(f"{SEED}:customers")
    companies = [f"{p} {s}" for p in COMPANY_PREFIXES for s in COMPANY_SUFFIXES]
    rng.shuffle(companies)
    countries = rng.choices(list(COUNTRIES), weights=COUNTRY_WEIGHTS, k=CUSTOMER_COUNT)
    segments = rng.choices(SEGMENTS, weights=SEGMENT_WEIGHTS, k=CUSTOMER_COUNT)
    result: list[CustomerBrief] = []
    for index in range(CUSTOMER_COUNT):
        country = countries[index]
        result.append(
            CustomerBrief(
                customer_id=customer_id(index + 1),
                company=companies[index],
                contact_first=rng.choice(FIRST_NAMES),
                contact_last=rng.choice(LAST_NAMES),
                country=country,
                region=COUNTRIES[country][0],
                segment=segments[index],
            )
        )
    return tuple(result)


def customer_by_id(cid: str) -> CustomerBrief | None:
    try:
        number = int(cid.removeprefix("CUST-"))
    except ValueError:
        return None
    if not cid.startswith("CUST-") or not 1 <= number <= CUSTOMER_COUNT or cid != customer_id(number):
        return None
    return customers()[number - 1]


@cache
def ticket_customers() -> tuple[str, ...]:
    """customer id of ticket TCK-1001 + i, for i in range(300). Some customers file many tickets."""
    rng = random.Random(f"{SEED}:ticket-customers")
    busy = rng.sample(range(1, CUSTOMER_COUNT + 1), 25)
    out: list[str] = []
    for _ in range(TICKET_COUNT):
        number = rng.choice(busy) if rng.random() < 0.45 else rng.randint(1, CUSTOMER_COUNT)
        out.append(customer_id(number))
    return tuple(out)


def ticket_customer(tid: str) -> str | None:
    try:
        number = int(tid.removeprefix("TCK-"))
    except ValueError:
        return None
    index = number - FIRST_TICKET
    if not tid.startswith("TCK-") or not 0 <= index < TICKET_COUNT:
        return None
    return ticket_customers()[index]
