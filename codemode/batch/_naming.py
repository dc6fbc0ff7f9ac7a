"""Names a batch job gives its runs: the idempotency scope of an item, and a job's default id."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

LEGACY_MARK = "/item:"
"""What separates the job id from the item key in a scope."""


def item_scope(job_id: str, key: str) -> str:
    """The idempotency scope of item ``key`` of job ``job_id``; one scope names one item only.

    The scope was ``job:{job_id}/item:{key}`` unescaped, which is ambiguous only when the job id
    itself holds ``/item:`` (job ``j`` with key ``x/item:y`` and job ``j/item:x`` with key ``y``
    shared a scope, so the second item's writes replayed the first's). When the job id does not
    hold it, the first ``/item:`` of the scope ends the job id, so the old form is injective there
    and is kept byte for byte: a job begun by an earlier version resumes and replays its
    completed calls, whatever its keys. A job id that holds ``/item:`` gets another prefix
    (``jobs:``, never the start of an old scope) and ``%`` and ``/`` percent-escaped, so its first
    ``/`` ends it.
    """
    if LEGACY_MARK not in job_id:
        return f"job:{job_id}{LEGACY_MARK}{key}"
    escaped = job_id.replace("%", "%25").replace("/", "%2F")  # '%' first: the escape is not forgeable
    return f"jobs:{escaped}{LEGACY_MARK}{key}"


def default_job_id(
    program_digest: str, inputs: Path, key_field: str | None, identity: tuple[str | None, str | None]
) -> str:
    """The id of a job started without one: the same program, input file (its bytes), key field
    and identity name the same job, so running a killed command again resumes it instead of
    sending every write again; any change to them names a new job."""
    digest = hashlib.sha256()
    head = [program_digest, inputs.suffix.lower(), key_field, *identity]
    digest.update(json.dumps(head).encode("utf-8", "surrogatepass") + b"\x00")
    with inputs.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return "job_" + digest.hexdigest()[:16]
