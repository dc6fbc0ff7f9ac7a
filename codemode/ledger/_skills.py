"""Saved skills in the ledger's database: versions of a tenant's skill and who moved them.

Every change is an event (``skill_proposed``, ``skill_approved``, ``skill_revoked``) whose
payload is the columns it writes, so the ``skills`` table is derived from the log like every
other table and ``verify`` checks it exactly. The rules that are the ledger's own live here:
versions are numbered per tenant and name inside the write transaction (two proposals never
share a number, on any store), a version's content never changes, and a proposal made from
inside a run is not approved by the principal that made it unless the caller allows it.

What a skill may contain and how its pin is computed are :mod:`codemode.skills`' business: the
ledger stores what it is given.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import cast

from codemode.ledger._context import LedgerContext, stored_text
from codemode.ledger._errors import LedgerStateError
from codemode.ledger._events import emit
from codemode.ledger._models import _Value  # pyright: ignore[reportPrivateUsage]
from codemode.ledger._records import opt_time
from codemode.ledger._reduce import Row
from codemode.ledger._time import from_text, to_text
from codemode.ledger.stores import StoreTransaction


class SkillVersion(_Value):
    """One version of a tenant's skill, as the ledger holds it."""

    skill_id: str
    """``<tenant>::<name>@<version>``."""
    tenant: str
    name: str
    version: int
    description: str
    source: str
    digest: str
    """``sha256:<hex>`` of the source."""
    pin: str
    """The digest of the source and of every dependency's pin (see :mod:`codemode.skills`)."""
    deps: dict[str, str]
    """What it imports, by tree module (``servers.crm.get_customer``, ``skills.other``), and the
    pin each had when this version was proposed."""
    status: str
    proposed_by: str
    proposed_in_run: str | None
    """The run that proposed it (``codemode.propose_skill``); None when a person added it."""
    proposed_at: datetime
    approved_by: str | None
    approved_at: datetime | None
    revoked_by: str | None
    revoked_at: datetime | None
    note: str | None


def skill_id(tenant: str, name: str, version: int) -> str:
    # A name is an identifier and a version digits, so the id splits back from the right.
    return f"{tenant}::{name}@{version}"


def _record(row: Row) -> SkillVersion:
    return SkillVersion(
        skill_id=str(row["skill_id"]),
        tenant=str(row["tenant"]),
        name=str(row["name"]),
        version=int(cast("int", row["version"])),
        description=str(row["description"]),
        source=str(row["source"]),
        digest=str(row["digest"]),
        pin=str(row["pin"]),
        deps=cast("dict[str, str]", json.loads(str(row["deps_json"]))),
        status=str(row["status"]),
        proposed_by=str(row["proposed_by"]),
        proposed_in_run=cast("str | None", row["proposed_in_run"]),
        proposed_at=from_text(str(row["proposed_at"])),
        approved_by=cast("str | None", row["approved_by"]),
        approved_at=opt_time(row["approved_at"]),
        revoked_by=cast("str | None", row["revoked_by"]),
        revoked_at=opt_time(row["revoked_at"]),
        note=cast("str | None", row["note"]),
    )


def _rows(tx: StoreTransaction, tenant: str, name: str | None = None) -> list[Row]:
    # A tenant holds tens of skills, not millions: a scan keeps the store Protocol unchanged.
    found = [
        row for row in tx.rows("skills") if row["tenant"] == tenant and (name is None or row["name"] == name)
    ]
    return sorted(found, key=lambda r: (str(r["name"]), int(cast("int", r["version"]))))


class SkillBook:
    """The skills of every tenant in one ledger. Obtained from ``StoreLedger.skills``."""

    def __init__(self, ctx: LedgerContext) -> None:
        self._ctx = ctx

    # -- writing ----------------------------------------------------------------------------------

    def propose(
        self,
        tenant: str,
        name: str,
        *,
        description: str,
        source: str,
        digest: str,
        pin: str,
        deps: Mapping[str, str],
        proposed_by: str,
        proposed_in_run: str | None = None,
        approve: bool = False,
        note: str | None = None,
    ) -> SkillVersion:
        """Record a new version of ``name`` (the next number), proposed; with ``approve`` it is
        approved by ``proposed_by`` in the same transaction (a person adding a skill)."""
        if approve and proposed_in_run is not None:
            raise LedgerStateError("a skill proposed from inside a run is approved by a person, later")
        with self._ctx.write() as tx:
            existing = _rows(tx, tenant, name)
            version = 1 + max((int(cast("int", r["version"])) for r in existing), default=0)
            key = skill_id(tenant, name, version)
            now = to_text(self._ctx.now())
            fields: dict[str, str | int | None] = {
                "skill_id": key,
                "tenant": tenant,
                "name": name,
                "version": version,
                "description": stored_text(description),
                "source": source,
                "digest": digest,
                "pin": pin,
                "deps_json": json.dumps(dict(sorted(deps.items())), separators=(",", ":")),
                "status": "proposed",
                "proposed_by": proposed_by,
                "proposed_in_run": proposed_in_run,
                "proposed_at": now,
                "note": None if note is None else stored_text(note),
            }
            row = emit(self._ctx, tx, "skill_proposed", key, fields, creating=True)
            if approve:
                moved = {"status": "approved", "approved_by": proposed_by, "approved_at": now}
                row = emit(self._ctx, tx, "skill_approved", key, moved, current=row)
        return _record(row)

    def approve(
        self,
        tenant: str,
        name: str,
        version: int,
        *,
        by: str,
        allow_self: bool = False,
        note: str | None = None,
    ) -> SkillVersion:
        """Approve a proposed version. A proposal made inside a run by principal P is refused to
        approver P unless ``allow_self`` (the policy's ``approve_own_skills``)."""
        key = skill_id(tenant, name, version)
        with self._ctx.write() as tx:
            row = tx.row("skills", key)
            if row is None:
                raise LedgerStateError(f"no skill {name!r} version {version} in tenant {tenant!r}")
            if row["status"] != "proposed":
                raise LedgerStateError(f"skill {name!r} version {version} is {row['status']}, not proposed")
            if row["proposed_in_run"] is not None and row["proposed_by"] == by and not allow_self:
                raise LedgerStateError(
                    f"skill {name!r} version {version} was proposed from a run by {by!r}, who may not "
                    "approve it: a person (or another principal) approves it, or the policy allows it "
                    f"with [policy.principals.{by}] approve_own_skills = true"
                )
            fields: dict[str, str | int | None] = {
                "status": "approved",
                "approved_by": by,
                "approved_at": to_text(self._ctx.now()),
            }
            if note is not None:
                fields["note"] = stored_text(note)
            row = emit(self._ctx, tx, "skill_approved", key, fields, current=row)
        return _record(row)

    def revoke(
        self, tenant: str, name: str, *, by: str, version: int | None = None, note: str | None = None
    ) -> list[SkillVersion]:
        """Revoke one version, or (``version`` None) every version not revoked yet. Returns the
        versions revoked; raises when there is none to revoke."""
        with self._ctx.write() as tx:
            rows = [
                r
                for r in _rows(tx, tenant, name)
                if r["status"] != "revoked" and (version is None or r["version"] == version)
            ]
            if not rows:
                which = "" if version is None else f" version {version}"
                raise LedgerStateError(f"skill {name!r}{which} in tenant {tenant!r} has nothing to revoke")
            done: list[SkillVersion] = []
            now = to_text(self._ctx.now())
            for row in rows:
                fields: dict[str, str | int | None] = {
                    "status": "revoked",
                    "revoked_by": by,
                    "revoked_at": now,
                }
                if note is not None:
                    fields["note"] = stored_text(note)
                done.append(
                    _record(emit(self._ctx, tx, "skill_revoked", str(row["skill_id"]), fields, current=row))
                )
        return done

    # -- reading ----------------------------------------------------------------------------------

    def versions(self, tenant: str, name: str | None = None) -> list[SkillVersion]:
        """Every version of ``name`` (or of every skill) in ``tenant``, by name then version."""
        with self._ctx.read() as tx:
            return [_record(r) for r in _rows(tx, tenant, name)]

    def tenants(self) -> list[str]:
        """Every tenant with at least one skill version, sorted."""
        with self._ctx.read() as tx:
            return sorted({str(row["tenant"]) for row in tx.rows("skills")})

    def get(self, tenant: str, name: str, version: int) -> SkillVersion | None:
        with self._ctx.read() as tx:
            row = tx.row("skills", skill_id(tenant, name, version))
        return None if row is None else _record(row)

    def active(self, tenant: str) -> dict[str, SkillVersion]:
        """Each skill's newest approved version (name -> version); revoked ones are gone."""
        found: dict[str, SkillVersion] = {}
        for record in self.versions(tenant):
            if record.status == "approved":
                found[record.name] = record  # versions come in ascending order: the last wins
        return found
