"""The text of the example ``docs`` server's documents: meeting transcripts and memos.

Transcripts have speaker turns such as ``[00:12:31] Priya Shah: ...`` that mention ``crm``
customers like ``CUST-0042`` and ``tickets`` tickets like ``TCK-1017``; memos are a lead paragraph
and seeded sentences about the same customers and tickets. ``document_text`` returns any
document's full text (a spreadsheet as CSV, from ``_docs_sheets``). Everything is generated from
fixed seeds, on first use. Imported by ``docs_server.py`` as a plain top-level module
(``import _docs_text``), like ``_common``.
"""

from __future__ import annotations

import datetime as dt
import random
from functools import cache

import _docs_corpus
import _docs_sheets
import _world

# --------------------------------------------------------------------------------------------
# Transcripts
# --------------------------------------------------------------------------------------------

GENERIC = (
    "Okay, moving on.",
    "Agreed.",
    "Yes, that makes sense to me.",
    "Sorry, I was on mute. Could you say that again?",
    "Let me check after the call and come back to you.",
    "Can we take that offline? We're running short on time.",
    "I'll put it in the notes.",
    "Good point, I hadn't thought about that.",
    "I'm not sure that's right, let me double check the numbers.",
    "Who owns that action item?",
    "I can take it.",
    "Let's revisit this next week.",
    "That's fair.",
    "Right, and the customer said the same thing on their last call.",
    "Just to make sure we're aligned: we're not promising a date.",
    "Can everyone see my screen?",
    "Thanks, that's helpful context.",
    "Quick question before we move on.",
    "I think we covered that already.",
    "Let's keep it to five minutes per item.",
)
POOLS: dict[str, tuple[str, ...]] = {
    "triage": (
        "Next one is {ticket}, {tcompany} ({tcust}).",
        "{ticket} is still waiting on the customer; I pinged {tcontact} again on {weekday}.",
        "I looked at {ticket} yesterday and it's the same root cause as {ticket2}, so I linked them.",
        "For {tcust} we promised an update by {weekday}, can someone own that?",
        "I'll take {ticket}. I know their admin from the onboarding.",
        "That one needs engineering; Aisha said the fix for {ticket} is in review.",
        "We had {n} new tickets this week, {n2} of them tagged {label}.",
        "Median first response time was {mins} minutes, a bit worse than last week.",
        "CSAT came in at {csat} for the week.",
        "Let's not close {ticket} until {tcompany} confirms the export worked.",
        "{tcompany} opened three tickets about the same thing; I merged them into {ticket}.",
        "Can we bump {ticket} to urgent? {tcompany} has a board meeting on {weekday}.",
        "The knowledge base article for {label} issues is out of date, I'll rewrite it.",
        "I think we should offer {tcust} a credit, this is the second time they've hit this.",
        "It was {ticket}, the {label} one from {tcompany}.",
        "I'll add a note on {tcust} in the CRM so the account team sees it.",
        "Engineering thinks {ticket} is related to the {product} release on {date}.",
        "The SLA on {ticket} breaches tomorrow morning if nobody replies today.",
        "{tcontact} at {tcompany} called the support line twice about {ticket}.",
        "We closed {n} tickets since Monday, mostly {label}.",
        "I reproduced {ticket} on staging with {tcompany}'s settings.",
        "Backlog is at {n3} open tickets, {n} of them unassigned.",
    ),
    "account": (
        "{fcompany} ({fcust}) is at about {arr} thousand ARR today.",
        "Their renewal is in {month}; {fcontact} wants pricing before then.",
        "Usage of {product} at {fcompany} is up {pct} percent quarter over quarter.",
        "They still have open tickets; the one that worries me is {fticket}.",
        "{fcontact} mentioned they are evaluating a competitor for analytics.",
        "The expansion opportunity is mostly {product}, maybe {n} more seats.",
        "Support-wise, {fticket} was the big one this quarter for {fcust}.",
        "We should invite {fcontact} to the customer advisory board.",
        "Their security team asked again about SSO and the SOC 2 report.",
        "Finance flagged two late invoices for {fcust}, both paid now.",
        "Executive sponsor on their side changed in {month}.",
        "I'd like a success plan for {fcompany} by the end of {month}.",
        "Their admin told me the {product} onboarding took too long.",
        "If we fix {fticket} before the renewal, I think they sign for two years.",
        "Let's compare them with {company}, similar size, and they renewed at a discount.",
    ),
    "qbr": (
        "{region} closed {m} million this quarter, {pct} percent of plan.",
        "Top account in {region} was {company} ({cust}).",
        "{product} revenue grew {pct} percent quarter over quarter.",
        "Churn was concentrated in the {segment} segment, {n} logos.",
        "Net revenue retention came in at {nrr} percent.",
        "The biggest deal was {company}, {cust}, on a three-year term.",
        "Discounting is creeping up in {region}; average discount is {pct} percent.",
        "Support volume per customer went down, {n} tickets per hundred accounts.",
        "The sales-2026 sheet has the line items if anyone wants to slice it by product.",
        "Pipeline coverage for next quarter is {cov} times.",
        "We lost {company} ({cust}) to a competitor on price.",
        "{segment} deals are taking {n} days longer to close than last year.",
        "Headcount is flat; we backfilled two roles in {region}.",
        "Marketing-sourced pipeline was {pct} percent of the total.",
    ),
    "incident": (
        "At 14:{mm} UTC the error rate on the Compass API crossed {pct} percent.",
        "The first customer report came from {company} ({cust}) as {ticket}.",
        "We rolled back the deploy at 15:{mm} UTC, but the cache stayed cold.",
        "p99 latency peaked at {ms} milliseconds in {region}.",
        "{n} customers were affected, mostly on the {segment} plan.",
        "The pager went to the secondary because the primary was on a flight.",
        "Status page was updated {n} minutes after the first alert, which is too slow.",
        "{ticket} from {tcompany} ({tcust}) was a duplicate of the incident ticket.",
        "Root cause was a connection pool limit that we lowered in the config change.",
        "Action item: alert on pool saturation, not just on error rate.",
        "Action item: customer-facing postmortem to {company} and the other large accounts.",
        "We should credit {cust}; their contract has a 99.9 percent SLA.",
        "Load test didn't catch it because staging has a tenth of the traffic.",
        "Retries from the SDK made it worse, every client retried three times.",
    ),
    "cab": (
        "Our biggest pain point is still the {product} export, it takes hours.",
        "We'd pay for a per-team usage breakdown, honestly.",
        "Support has been great this year, especially on {ticket}.",
        "SSO with SCIM is a must for us before we roll out to all regions.",
        "We want an audit log that we can stream into our SIEM.",
        "Pricing is confusing; we never know which add-ons we actually use.",
        "The new dashboards are good, but they are slow for large accounts.",
        "Can you share the roadmap for {product} for the second half?",
        "We're expanding to {region}, so data residency matters a lot.",
        "The API rate limits hit us at month-end close.",
        "Honestly the onboarding was the best part, {staff} was fantastic.",
    ),
    "cab_staff": (
        "Thanks, that's really useful. Can you say more about how often that happens?",
        "We hear that from several of you; it's on the H2 list.",
        "For {product} the export rewrite ships in the third quarter.",
        "Per-team usage breakdowns are in design right now, we'd love beta testers.",
        "On SCIM: we fixed the duplicate users bug in {ticket}, the fix is live.",
        "Data residency in {region} depends on our storage vendor, I can't promise a date yet.",
        "Let's follow up on that with your account manager after the session.",
        "How many of you are hitting the rate limits at month end? Show of hands.",
        "Audit log streaming is scoped; we're aiming at Splunk and Sentinel first.",
    ),
    "roadmap": (
        "For H2 the big bet is the new {product} query engine.",
        "We're cutting the dark theme again, sorry Nina.",
        "Customers keep asking for per-team usage breakdowns; {n} tickets mention it.",
        "The audit log streaming is scoped, {n} engineer-weeks.",
        "Data residency in {region} is blocked on the storage vendor.",
        "Let's ship SCIM improvements before the advisory board.",
        "The webhooks for seat changes are ready for beta.",
        "{company} ({cust}) volunteered for the beta.",
    ),
    "renewals": (
        "{company} ({cust}) renews in {month}, current ARR {arr} thousand, risk {risk}.",
        "I'd put {cust} at high risk, they opened {n} tickets last month.",
        "Proposed uplift for {company} is {pct} percent.",
        "Finance wants all renewals over 100 thousand reviewed by Omar.",
        "{cust} asked for net-60 terms, I said no.",
        "Multi-year on {company} is likely if we hold the price.",
        "The renewals-2026 sheet is up to date as of this morning.",
        "We're at {pct} percent gross retention year to date.",
        "{company} wants to drop {product} but keep the core seats.",
    ),
}
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September")
REGIONS = ("NA", "EMEA", "APAC", "LATAM")


class _Slots(dict[str, str]):
    """Lazily generated template slots (only the ones a sentence uses are drawn)."""

    def __init__(self, rng: random.Random, spec: _docs_corpus.Spec) -> None:
        super().__init__()
        self.rng = rng
        self.spec = spec
        self.ticket_number = rng.randint(_world.FIRST_TICKET, _world.FIRST_TICKET + _world.TICKET_COUNT - 1)
        self.customer = _world.customers()[rng.randrange(_world.CUSTOMER_COUNT)]

    def __missing__(self, key: str) -> str:
        rng = self.rng
        value: str
        if key == "ticket":
            value = _world.ticket_id(self.ticket_number)
        elif key == "ticket2":
            value = _world.ticket_id(rng.randint(_world.FIRST_TICKET, 1300))
        elif key in ("tcust", "tcompany", "tcontact"):
            cid = _world.ticket_customer(_world.ticket_id(self.ticket_number))
            brief = _world.customer_by_id(cid or "")
            assert brief is not None
            value = {"tcust": cid or "", "tcompany": brief.company, "tcontact": brief.contact_name}[key]
        elif key in ("fcust", "fcompany", "fcontact", "fticket"):
            brief = _world.customer_by_id(self.spec.focus or "") or self.customer
            tickets = [
                _world.ticket_id(_world.FIRST_TICKET + i)
                for i, c in enumerate(_world.ticket_customers())
                if c == brief.customer_id
            ]
            value = {
                "fcust": brief.customer_id,
                "fcompany": brief.company,
                "fcontact": brief.contact_name,
                "fticket": rng.choice(tickets) if tickets else "the SSO ticket",
            }[key]
        elif key == "cust":
            value = self.customer.customer_id
        elif key == "company":
            value = self.customer.company
        elif key == "contact":
            value = self.customer.contact_name
        elif key == "region":
            value = rng.choice(REGIONS)
        elif key == "segment":
            value = rng.choice(_world.SEGMENTS)
        elif key == "product":
            value = rng.choice(list(_world.PRODUCTS))
        elif key == "label":
            value = rng.choice(("billing", "sso", "performance", "data-export", "api", "integration"))
        elif key == "weekday":
            value = rng.choice(WEEKDAYS)
        elif key == "month":
            value = rng.choice(MONTHS)
        elif key == "date":  # a day shortly before the document was written
            created = dt.date.fromisoformat(self.spec.created)
            value = (created - dt.timedelta(days=rng.randint(2, 30))).isoformat()
        elif key == "staff":
            value = _docs_corpus.staff_name(rng.choice(list(_world.STAFF)))
        elif key == "risk":
            value = rng.choice(("low", "medium", "high"))
        elif key == "csat":
            value = f"{rng.uniform(4.1, 4.8):.1f}"
        elif key == "nrr":
            value = str(rng.randint(104, 121))
        elif key == "cov":
            value = f"{rng.uniform(2.1, 3.8):.1f}"
        elif key == "m":
            value = f"{rng.uniform(0.8, 6.5):.1f}"
        elif key == "arr":
            value = str(rng.randint(8, 420))
        elif key == "ms":
            value = str(rng.randint(1800, 9500))
        elif key == "mm":
            value = f"{rng.randint(0, 59):02d}"
        elif key == "mins":
            value = str(rng.randint(14, 95))
        elif key == "pct":
            value = str(rng.randint(3, 48))
        elif key == "n3":
            value = str(rng.randint(80, 160))
        elif key == "n2":  # a part of n
            value = str(rng.randint(1, int(self["n"])))
        else:  # n
            value = str(rng.randint(2, 40))
        self[key] = value
        return value


def _transcript(spec: _docs_corpus.Spec) -> str:
    rng = random.Random(f"{_world.SEED}:docs:{spec.doc_id}")
    speakers = [_docs_corpus.staff_name(h) for h in spec.participants]
    guests: list[str] = []
    if spec.style == "cab":
        for cid in _docs_corpus.CAB_GUESTS:
            brief = _world.customer_by_id(cid)
            assert brief is not None
            guests.append(f"{brief.contact_name} ({brief.company}, {cid})")
    lines = [
        f"Meeting: {spec.title}",
        f"Date: {spec.created}",
        "Participants: " + ", ".join(speakers + guests),
        "Recording transcribed automatically; speaker labels may be imperfect.",
        "",
    ]
    size = sum(len(line) + 1 for line in lines)
    pool = POOLS[spec.style]
    seconds = rng.randint(3, 20)
    previous = ""
    while size < spec.target:
        if guests and rng.random() < 0.45:
            speaker = rng.choice(guests)
        else:
            speaker = rng.choice([s for s in speakers if s != previous] or speakers)
        previous = speaker
        slots = _Slots(rng, spec)
        speaker_pool = POOLS["cab_staff"] if guests and speaker not in guests else pool
        sentences = list(
            dict.fromkeys(
                (rng.choice(speaker_pool) if rng.random() < 0.72 else rng.choice(GENERIC)).format_map(slots)
                for _ in range(rng.choice((1, 1, 2, 2, 3, 4)))
            )
        )
        hours, rest = divmod(seconds, 3600)
        stamp = f"[{hours:02d}:{rest // 60:02d}:{rest % 60:02d}]"
        line = f"{stamp} {speaker}: {' '.join(sentences)}"
        lines.append(line)
        size += len(line) + 1
        seconds += rng.randint(5, 12) * len(sentences) + rng.randint(0, 8)
    lines.append("")
    lines.append("[end of recording]")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# Memos
# --------------------------------------------------------------------------------------------

MEMO_LEADS = {
    "memo-2026-01-08-support-staffing-h1": "We are adding one support engineer in EMEA and moving to a "
    "follow-the-sun rota from February. Weekend coverage stays with the on-call engineer.",
    "memo-2026-01-20-harbor-storage-pricing": "From 1 March the list price of Harbor Storage goes from 21 to "
    "23 USD per TB per month. Existing contracts keep their price until renewal.",
    "memo-2026-02-02-sso-certificate-rotation": "Our SAML signing certificate expires on 28 February. Every "
    "customer using SSO must upload the new certificate before then or their users cannot log in.",
    "memo-2026-02-16-escalation-cust-0253": "This account has escalated twice this quarter and the renewal "
    "is due in April. The executive sponsor asked for a call with our VP of Customer Success.",
    "memo-2026-03-17-postmortem-api-latency": "On 14 March between 14:02 and 15:47 UTC the Compass API "
    "served 7 percent errors and p99 latency reached 9 seconds. A lowered connection pool limit in a "
    "configuration change was the root cause.",
    "memo-2026-03-31-q1-support-summary": "Ticket volume grew 12 percent over Q4 while median first response "
    "time improved from 41 to 33 minutes. SSO and data export remain the top two categories.",
    "memo-2026-04-06-data-retention-policy": "Customer data in deleted workspaces is now purged after 30 "
    "days instead of 90. Backups follow within 35 days. This is required by two enterprise contracts.",
    "memo-2026-04-20-renewal-risk-list": "These accounts renew in Q2 or Q3 and show at least two risk "
    "signals: open urgent tickets, falling usage, or a new decision maker.",
    "memo-2026-05-04-refund-policy": "Refunds within the 30-day trial are automatic. After that, refunds "
    "need approval from finance and are issued as credit unless the contract says otherwise.",
    "memo-2026-05-18-enterprise-onboarding": "Enterprise onboarding now has four phases: kick-off, SSO and "
    "provisioning, data import, and a 30-day success review. Each phase has an owner and an exit check.",
    "memo-2026-06-01-h2-roadmap-priorities": "H2 focuses on three themes: performance for large accounts, "
    "audit and compliance (audit log streaming, SCIM), and usage transparency (per-team breakdowns).",
    "memo-2026-06-15-advisory-board-recap": "Eleven customers joined the June advisory board. The clearest "
    "asks were faster exports, audit log streaming and clearer pricing for add-ons.",
}
MEMO_SENTENCES = (
    "Please reach out to {staff} with questions.",
    "This affects {company} ({cust}) among others; see {ticket} for the details.",
    "We expect about {n} customers to need help with this.",
    "The change has been reviewed by legal and finance.",
    "Account managers should mention it on their next call with {segment} customers.",
    "Support will tag related tickets with '{label}' so we can track the volume.",
    "The {product} team is on point for the technical side.",
    "A customer-facing note will go out in {month}.",
    "Numbers in this memo come from the sales-2026 and renewals-2026 sheets.",
    "{company} ({cust}) asked to be notified personally before the change.",
    "If a customer pushes back, escalate to {staff} rather than making an exception.",
    "Open question: how do we handle customers on legacy contracts in {region}?",
    "{ticket} is a good example of what goes wrong when we skip this step.",
)


def _memo(spec: _docs_corpus.Spec) -> str:
    rng = random.Random(f"{_world.SEED}:docs:{spec.doc_id}")
    assert spec.author is not None
    header = [
        f"To: {rng.choice(('All staff', 'Support and Customer Success', 'Leadership team', 'Go-to-market'))}",
        f"From: {_docs_corpus.staff_name(spec.author)}",
        f"Date: {spec.created}",
        f"Subject: {spec.title}",
        "",
    ]
    paragraphs = [MEMO_LEADS[spec.doc_id]]
    for _ in range(rng.randint(4, 9)):
        slots = _Slots(rng, spec)
        picked = (rng.choice(MEMO_SENTENCES).format_map(slots) for _ in range(rng.randint(2, 5)))
        paragraphs.append(" ".join(dict.fromkeys(picked)))
    if spec.doc_id == "memo-2026-04-20-renewal-risk-list":
        picks = sorted(rng.sample(range(_world.CUSTOMER_COUNT), 15))
        rows = [
            f"- {c.customer_id} {c.company} ({c.segment}, {c.region})"
            for c in (_world.customers()[i] for i in picks)
        ]
        paragraphs.append("Accounts:\n" + "\n".join(rows))
    if spec.focus:
        brief = _world.customer_by_id(spec.focus)
        assert brief is not None
        tickets = [
            _world.ticket_id(_world.FIRST_TICKET + i)
            for i, c in enumerate(_world.ticket_customers())
            if c == spec.focus
        ]
        paragraphs.append(
            f"Customer: {brief.company} ({brief.customer_id}), contact {brief.contact_name}, "
            f"{brief.country}. Related tickets: {', '.join(tickets) or 'none'}."
        )
    return "\n".join(header) + "\n" + "\n\n".join(paragraphs) + "\n"


# --------------------------------------------------------------------------------------------
# Text
# --------------------------------------------------------------------------------------------


@cache
def document_text(doc_id: str) -> str:
    spec = _docs_corpus.specs_by_id()[doc_id]
    if spec.kind == "transcript":
        return _transcript(spec)
    if spec.kind == "memo":
        return _memo(spec)
    return _docs_sheets.sheet_csv(doc_id)
