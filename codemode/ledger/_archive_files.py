"""Archive segments: a prefix of the event log in files that ``verify --archive`` still checks.

A segment is two files in the archive directory:

* ``events-<first>-<last>.jsonl``: one event a line (canonical JSON of every column the hash
  chain covers: ``seq``, ``at``, ``kind``, ``subject``, ``payload``, ``prev_hash``, ``hash``);
* ``events-<first>-<last>.manifest.json``: ``format``, ``ledger_id``, ``first_seq``, ``last_seq``,
  ``prev_hash`` (what the first event links to), ``last_hash``, ``events``, ``sha256`` (of the
  ``.jsonl`` file's bytes) and ``created_at``.

Both are written whole or not at all (a temporary file, fsync, rename, fsync of the directory),
the events file first: a manifest always describes a complete events file. The manifest's digest
catches an edited or truncated file; the chain inside (every event's hash covers the one before)
catches an edited event even when the digest was recomputed, and the database's archive boundary
(the last archived ``seq`` and hash) ties the last segment to what remains in the database.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO, cast

from codemode._atomic import replace_file
from codemode.catalog import canonical_json
from codemode.errors import LedgerError
from codemode.ledger.stores import EventRow

FORMAT = "codemode-ledger-archive-v1"
_MANIFEST = re.compile(r"^events-(\d{12})-(\d{12})\.manifest\.json$")
_PENDING = "events-pending.jsonl"
_PRIVATE = 0o600


@dataclass(frozen=True, slots=True)
class Segment:
    """One archive segment, as its manifest describes it."""

    path: Path
    """The events file (``.jsonl``)."""
    ledger_id: str
    first_seq: int
    last_seq: int
    prev_hash: str
    last_hash: str
    events: int
    sha256: str
    created_at: str

    @property
    def manifest(self) -> Path:
        return manifest_path(self.path)

    @property
    def name(self) -> str:
        return self.path.name


def segment_stem(first_seq: int, last_seq: int) -> str:
    return f"events-{first_seq:012d}-{last_seq:012d}"


def manifest_path(events_file: Path) -> Path:
    return events_file.with_name(events_file.name.removesuffix(".jsonl") + ".manifest.json")


def _event_line(event: EventRow) -> str:
    fields = {
        "seq": event.seq,
        "at": event.at,
        "kind": event.kind,
        "subject": event.subject,
        "payload": event.payload,
        "prev_hash": event.prev_hash,
        "hash": event.hash,
    }
    return canonical_json(fields).decode("utf-8") + "\n"


def _fsync_directory(directory: Path) -> None:
    folder = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def write_segment(
    directory: Path, ledger_id: str, events: Iterable[EventRow], created_at: str
) -> Segment | None:
    """Write ``events`` (consecutive, oldest first) as one segment; None if there were none.

    Durable when it returns: both files are fsynced and renamed into place."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    digest = hashlib.sha256()
    seen: list[EventRow] = []  # only the first and the last are kept
    count = 0

    def write(handle: TextIO) -> None:
        nonlocal count
        for event in events:
            line = _event_line(event)
            handle.write(line)
            digest.update(line.encode("utf-8"))
            seen[1:] = [event] if seen else []
            if not seen:
                seen.append(event)
            count += 1

    pending = directory / _PENDING
    replace_file(pending, write, mode=_PRIVATE)
    if not seen:
        pending.unlink(missing_ok=True)
        return None
    first, last = seen[0], seen[-1]
    target = directory / f"{segment_stem(first.seq, last.seq)}.jsonl"
    os.replace(pending, target)
    _fsync_directory(directory)
    segment = Segment(
        path=target,
        ledger_id=ledger_id,
        first_seq=first.seq,
        last_seq=last.seq,
        prev_hash=first.prev_hash,
        last_hash=last.hash,
        events=count,
        sha256=digest.hexdigest(),
        created_at=created_at,
    )
    manifest = {
        "format": FORMAT,
        "ledger_id": ledger_id,
        "first_seq": segment.first_seq,
        "last_seq": segment.last_seq,
        "prev_hash": segment.prev_hash,
        "last_hash": segment.last_hash,
        "events": count,
        "sha256": segment.sha256,
        "created_at": created_at,
    }
    replace_file(
        segment.manifest, lambda handle: handle.write(json.dumps(manifest, indent=2) + "\n"), mode=_PRIVATE
    )
    return segment


def _parse_manifest(path: Path) -> Segment:
    try:
        data: object = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LedgerError(f"archive manifest {path.name} cannot be read: {exc}") from exc
    if not isinstance(data, dict) or cast("dict[str, Any]", data).get("format") != FORMAT:
        raise LedgerError(f"archive manifest {path.name} is not a {FORMAT} manifest")
    fields = cast("dict[str, Any]", data)
    try:
        return Segment(
            path=path.with_name(path.name.removesuffix(".manifest.json") + ".jsonl"),
            ledger_id=str(fields["ledger_id"]),
            first_seq=int(fields["first_seq"]),
            last_seq=int(fields["last_seq"]),
            prev_hash=str(fields["prev_hash"]),
            last_hash=str(fields["last_hash"]),
            events=int(fields["events"]),
            sha256=str(fields["sha256"]),
            created_at=str(fields["created_at"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise LedgerError(f"archive manifest {path.name} lacks or garbles {exc}") from exc


def list_segments(directory: Path) -> tuple[list[Segment], list[str]]:
    """The segments of ``directory`` by their first event, and what is wrong with any manifest."""
    segments: list[Segment] = []
    problems: list[str] = []
    if not directory.is_dir():
        return segments, problems
    for path in sorted(directory.iterdir()):
        match = _MANIFEST.match(path.name)
        if match is None:
            continue
        try:
            segment = _parse_manifest(path)
        except LedgerError as exc:
            problems.append(str(exc))
            continue
        if (segment.first_seq, segment.last_seq) != (int(match[1]), int(match[2])):
            problems.append(
                f"archive manifest {path.name} describes events {segment.first_seq}..{segment.last_seq}"
            )
            continue
        segments.append(segment)
    segments.sort(key=lambda s: (s.first_seq, s.last_seq))
    return segments, problems


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_events(segment: Segment) -> Iterator[EventRow]:
    """The events of a segment's file in order (raises :class:`LedgerError` on a bad line)."""
    with segment.path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            try:
                data = cast("dict[str, Any]", json.loads(line))
                yield EventRow(
                    seq=int(data["seq"]),
                    at=str(data["at"]),
                    kind=str(data["kind"]),
                    subject=str(data["subject"]),
                    payload=str(data["payload"]),
                    prev_hash=str(data["prev_hash"]),
                    hash=str(data["hash"]),
                )
            except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
                raise LedgerError(f"{segment.name} line {number} is not an archived event: {exc}") from exc
