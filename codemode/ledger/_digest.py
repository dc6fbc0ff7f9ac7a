"""Digests and idempotency keys, shared with the consent gate so both sides hash alike."""

from __future__ import annotations

import hashlib
from typing import Any

from codemode.catalog import HASH_PREFIX, canonical_json
from codemode.errors import LedgerError

MAX_KEY_CHARS = 1024


def sha256_text(data: bytes) -> str:
    return HASH_PREFIX + hashlib.sha256(data).hexdigest()


def canonical_arguments(arguments: dict[str, Any]) -> bytes:
    """Canonical JSON of a call's arguments; refuses what JSON cannot carry exactly (NaN, sets…)."""
    try:
        return canonical_json(arguments)
    except (TypeError, ValueError) as exc:
        raise LedgerError(f"arguments cannot be recorded as canonical JSON: {exc}") from exc


def arguments_digest(arguments: dict[str, Any]) -> str:
    """``"sha256:<hex>"`` of the canonical JSON of ``arguments``.

    Key order and formatting never change it; any change of a value does. Idempotency keys are
    bound to this digest, approvals to it and the pin (see :func:`approval_digest`).
    """
    return sha256_text(canonical_arguments(arguments))


def approval_digest(args_digest: str, schema_hash: str | None) -> str:
    """What an approval binds: a call's arguments (their digest) under one pinned definition of
    its tool (its hash), so that an approval of a tool does not outlive a change to what it does."""
    return sha256_text(f"{args_digest}\x00{schema_hash or ''}".encode())


def escape_part(part: str) -> str:
    """One component of a full idempotency key, as :func:`scoped_key` writes it."""
    # '%' first, so the escape of ':' cannot be forged by a literal "%3A" in a component.
    return part.replace("%", "%25").replace(":", "%3A")


def scoped_key(tenant: str, principal: str, server: str, tool: str, key: str) -> str:
    """The full idempotency key ``tenant:principal:server:tool:key``.

    Each component has ``%`` and ``:`` percent-escaped, so the mapping is injective: tenant
    ``a:b`` with principal ``c`` can never collide with tenant ``a`` and principal ``b:c``.
    A key is therefore never shared across tenants, principals or tools.
    """
    if not key:
        raise LedgerError("an idempotency key must not be empty")
    full = ":".join(escape_part(part) for part in (tenant, principal, server, tool, key))
    if len(full) > MAX_KEY_CHARS:
        raise LedgerError(f"idempotency key is too long ({len(full)} > {MAX_KEY_CHARS} characters)")
    return full
