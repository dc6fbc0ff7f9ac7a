"""The hash chain over the event log.

Each event is linked to the one before it::

    header(n)  = canonical_json({"seq": n, "at": …, "kind": …, "subject": …})
    hash(n)    = sha256( hash(n-1) "\\n" header(n) "\\n" payload(n) )
    hash(0)    = sha256( "codemode-ledger-v1\\0" ledger_id )        (the genesis value)

``payload(n)`` is the exact stored canonical JSON text, so changing any byte of any field of
an event, deleting or reordering events, or splicing in events from another ledger (a
different ``ledger_id``) changes a hash that a later event or the head depends on.

What this does NOT protect against: someone with write access to the file and this source
code can recompute every hash after their edit, rewrite the head and the derived tables, and
``verify`` will pass. The chain makes tampering *evident*, not impossible. Recording the head
(``seq`` + ``hash``, printed by ``codemode ledger verify``) somewhere the attacker cannot write,
and passing it back as an anchor, closes that gap for everything up to the anchor.
"""

from __future__ import annotations

import hashlib
from typing import Any

from codemode.catalog import canonical_json

_GENESIS_PREFIX = b"codemode-ledger-v1\x00"


def genesis_hash(ledger_id: str) -> str:
    return hashlib.sha256(_GENESIS_PREFIX + ledger_id.encode("utf-8")).hexdigest()


def payload_text(payload: dict[str, Any]) -> str:
    return canonical_json(payload).decode("utf-8")


def event_hash(prev_hash: str, *, seq: int, at: str, kind: str, subject: str, payload: str) -> str:
    header = canonical_json({"seq": seq, "at": at, "kind": kind, "subject": subject})
    digest = hashlib.sha256()
    digest.update(prev_hash.encode("ascii", errors="replace"))
    digest.update(b"\n")
    digest.update(header)
    digest.update(b"\n")
    digest.update(payload.encode("utf-8", errors="surrogatepass"))
    return digest.hexdigest()
