"""Idempotency keys derived for the side-effecting calls of a keyed run (a batch item).

The key is ``scope + tool + argument digest + occurrence``: the second identical call in one item
is a second operation, and a re-run of the item derives the same keys in the same order, so
completed calls replay instead of running again.
"""

from __future__ import annotations

import dataclasses
import hashlib

from codemode.broker._facts import Call, Facts
from codemode.ledger import arguments_digest

LONG_SCOPE_CHARS = 256
"""A batch item's idempotency scope longer than this enters its calls' derived keys as a digest."""


def with_derived_key(call: Call, facts: Facts) -> Call:
    """``call`` with its derived idempotency key, when it is a side-effecting call of a keyed run
    that has no key of its own; otherwise ``call`` unchanged."""
    request = call.request
    scope = call.binding.idempotency_scope
    if scope is None or request is None or request.idempotency_key is not None or facts.risk == "low":
        return call
    digest = arguments_digest(dict(call.arguments))
    with call.run.lock:
        call.run.occurrences[f"{call.label}\x00{digest}"] += 1
        occurrence = call.run.occurrences[f"{call.label}\x00{digest}"]
    if len(scope) > LONG_SCOPE_CHARS:
        # An item's key may be long (up to the ledger's own limit), and the full key adds the
        # tenant, principal and tool, escaped: a digest keeps it within the limit. Short scopes
        # stay readable - and unchanged, so jobs begun before still replay.
        scope = "sha256:" + hashlib.sha256(scope.encode("utf-8", "surrogatepass")).hexdigest()
    key = f"{scope}/{call.label}/{digest.removeprefix('sha256:')[:32]}/{occurrence}"
    return dataclasses.replace(call, request=request.model_copy(update={"idempotency_key": key}))
