"""Batch inputs: items streamed from a JSON Lines or CSV file, one at a time, never loaded whole.

Each item is a JSON object (a CSV row becomes an object of strings). Its key is the value of
``--key FIELD`` (a string or an integer), or its line number without ``--key``. A line that
cannot be read is reported with its line number as a :class:`BadLine` and the stream goes on.
NaN and infinite numbers are bad lines too: the sandbox channel, the ledger and the job store
carry only standard JSON, so such an item could never run. So is text UTF-8 cannot encode (a byte
of another encoding, an escaped lone surrogate), and a key with a control character. A leading
byte order mark is dropped. After a CSV syntax error the rest of the file is not read (see
:func:`_csv_items`).
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from codemode.ledger import escape_part

MAX_KEY_CHARS = 512
"""The longest item key, counted as the ledger sees it inside each derived idempotency key (with
``:`` and ``%`` escaped to three characters): the ledger refuses keys over 1024 characters, and
the job id, principal, tenant, server and tool share the rest."""
SUFFIXES = (".jsonl", ".ndjson", ".csv")
BOM = "\ufeff"

# Text is read with ``surrogateescape``, so a byte that is not UTF-8 arrives as U+DC80..U+DCFF;
# a JSON escape such as "\ud800" makes a lone surrogate too. UTF-8 cannot encode either, and the
# job store writes items as UTF-8: one such item would stop the whole registration.
_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")
# The Unicode control characters (C0, DEL, C1). A key is printed, logged and written into
# idempotency keys and database text; PostgreSQL cannot store U+0000 at all, which left such an
# item ``unknown`` for good.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


@dataclass(frozen=True)
class Item:
    key: str
    line: int
    data: dict[str, Any]


@dataclass(frozen=True)
class BadLine:
    line: int
    reason: str


class InputDigest:
    """A running SHA-256 of the raw input, so a resumed job can tell that its input changed."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()

    def update(self, chunk: str) -> None:
        self._hash.update(chunk.encode("utf-8", "surrogateescape"))

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


def key_too_long(key: str, key_field: str) -> str | None:
    """Why ``key`` cannot be an item key (every write of its item would fail), or None."""
    chars = len(escape_part(key))  # as the ledger writes it inside each idempotency key
    if chars <= MAX_KEY_CHARS:
        return None
    escaped = " (each ':' and '%' counts 3: idempotency keys escape them)" if chars > len(key) else ""
    return f"the {key_field!r} field is {chars} characters long{escaped}, more than {MAX_KEY_CHARS}"


def _first_surrogate(text: str) -> int | None:
    """Where the first character of ``text`` that UTF-8 cannot encode is, or None."""
    if text.isascii():  # the common case, and much faster than encoding
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def _surrogate_problem(text: str) -> str | None:
    """Why ``text`` (some item data as JSON) cannot be encoded as UTF-8, or None."""
    at = _first_surrogate(text)
    if at is None:
        return None
    return (
        f"not valid UTF-8 (it holds the lone surrogate U+{ord(text[at]):04X}, "
        "half of a UTF-16 pair, which UTF-8 cannot encode)"
    )


def _undecodable(text: str, where: str = "") -> str | None:
    """Why raw input ``text`` is not UTF-8 (a byte ``surrogateescape`` kept), or None."""
    at = _first_surrogate(text)
    if at is None:
        return None
    byte = ord(text[at]) - 0xDC00
    return (
        f"not valid UTF-8 (the byte 0x{byte:02X} {where or f'at character {at + 1}'}; "
        "is the file in another encoding, such as Latin-1 or Windows-1252?)"
    )


def json_problem(data: Any) -> str | None:
    """Why ``data`` is not standard JSON (NaN, infinities, objects JSON cannot hold, text UTF-8
    cannot encode), or None."""
    try:
        text = json.dumps(data, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError) as exc:
        return f"not valid JSON ({exc})"
    return _surrogate_problem(text)


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"the number {text} is out of range")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def keyed(data: dict[str, Any], line: int, key_field: str | None) -> Item | BadLine:
    """The item of ``data`` (read at ``line``), keyed by its ``key_field``; or why it cannot be one."""
    if key_field is None:
        return Item(str(line), line, data)
    if key_field not in data:
        return BadLine(line, f"no {key_field!r} field (the --key)")
    value = data[key_field]
    if isinstance(value, bool) or not isinstance(value, str | int) or value == "":
        return BadLine(line, f"the {key_field!r} field must be a non-empty string or an integer")
    key = str(value)
    control = _CONTROL.search(key)
    if control is not None:
        return BadLine(
            line,
            f"the {key_field!r} field holds the control character U+{ord(control.group()):04X} "
            f"at character {control.start() + 1}: an item key must be printable text",
        )
    surrogate = _surrogate_problem(key)
    if surrogate is not None:
        return BadLine(line, f"the {key_field!r} field is {surrogate}")
    too_long = key_too_long(key, key_field)
    if too_long is not None:
        return BadLine(line, too_long)
    return Item(key, line, data)


def read_items(
    path: Path, key_field: str | None, digest: InputDigest | None = None
) -> Iterator[Item | BadLine]:
    """Stream the items of ``path`` (``.jsonl``/``.ndjson`` or ``.csv``), in file order."""
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise ValueError(f"{path}: inputs must be a .jsonl or .csv file (got {suffix or 'no suffix'!r})")
    # Not "utf-8-sig": the readers drop a leading BOM themselves, after the digest has seen it,
    # so the digest stays that of the raw bytes and a job started before keeps its inputs digest.
    with path.open(encoding="utf-8", errors="surrogateescape", newline="") as handle:
        lines = _Lines(handle, digest)
        if suffix == ".csv":
            yield from _csv_items(lines, key_field)
        else:
            yield from _jsonl_items(lines, key_field)


class _Lines:
    """The raw lines of the input, each fed to the digest as read, a leading BOM dropped; counts
    them, so the line after the last one read is known even when a parser stops early."""

    def __init__(self, handle: Any, digest: InputDigest | None) -> None:
        self._handle = handle
        self._digest = digest
        self.count = 0

    def __iter__(self) -> Iterator[str]:
        # A generator, not __next__: it is called once a line. A second iteration (to read the
        # rest of the file after a parser stopped) goes on where the first one stopped.
        for raw in self._handle:
            raw = cast(str, raw)
            if self._digest is not None:
                self._digest.update(raw)
            self.count += 1
            yield raw[1:] if self.count == 1 and raw.startswith(BOM) else raw


def _jsonl_items(lines: _Lines, key_field: str | None) -> Iterator[Item | BadLine]:
    for raw in lines:
        line = lines.count
        if not raw.strip():
            continue
        undecodable = _undecodable(raw)
        if undecodable is not None:
            yield BadLine(line, undecodable)
            continue
        try:
            data = json.loads(raw, parse_constant=_no_constant, parse_float=_finite)
        except (ValueError, RecursionError) as exc:
            yield BadLine(line, f"not valid JSON ({exc})")
            continue
        if not isinstance(data, dict):
            yield BadLine(line, f"an item must be a JSON object, not {type(data).__name__}")
            continue
        # Only a \uD800-\uDFFF escape can put a lone surrogate in the parsed data: dump it only then.
        if "\\u" in raw and _ESCAPED_SURROGATE.search(raw) is not None:
            problem = _surrogate_problem(json.dumps(data, ensure_ascii=False))
            if problem is not None:
                yield BadLine(line, problem)
                continue
        yield keyed(cast(dict[str, Any], data), line, key_field)


def _csv_items(lines: _Lines, key_field: str | None) -> Iterator[Item | BadLine]:
    """The rows of a CSV file, after its header, as items of strings.

    After a :class:`csv.Error` the rest of the file is not parsed, only reported as not read: the
    parser has thrown away the rest of the failing record and starts afresh at the next physical
    line, which may lie inside a quoted field (a field over the size limit, or a stray quote that
    opened one). Reading on would turn that field's text into rows, and run them as items, with
    their writes; there is no sound way to find the next record, so stopping is the only choice
    that can lose items (reported, and refused under --strict) but never invent one.
    """
    reader = csv.reader(lines, strict=True)
    header: list[str] | None = None
    while True:
        start = lines.count + 1  # the csv module reads whole lines: the record starts on the next
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            # The line the parser stopped on (csv.DictReader.line_num stays at the last good row).
            within = f", in the record that starts at line {start}" if lines.count > start else ""
            yield BadLine(lines.count, f"not valid CSV ({exc}){within}")
            yield from _not_read(lines, f"after the CSV error at line {lines.count}")
            return
        if not row:
            continue  # a blank line, skipped as csv.DictReader skips it
        line = lines.count
        if header is None:
            undecodable = _row_undecodable(row, None)
            if undecodable is not None:
                # Every row would carry the bad column name: one report, not one per row.
                yield BadLine(line, f"the header is {undecodable}")
                yield from _not_read(lines, "after a header that is not UTF-8")
                return
            header = row
            continue
        if len(row) != len(header):
            yield BadLine(line, "the row does not have as many fields as the header")
            continue
        undecodable = _row_undecodable(row, header)
        if undecodable is not None:
            yield BadLine(line, undecodable)
            continue
        yield keyed(dict(zip(header, row, strict=True)), line, key_field)


def _row_undecodable(row: list[str], header: list[str] | None) -> str | None:
    for index, value in enumerate(row):
        problem = _undecodable(
            value, f"in the {header[index]!r} field" if header else f"in column {index + 1}"
        )
        if problem is not None:
            return problem
    return None


def _not_read(lines: _Lines, why: str) -> Iterator[BadLine]:
    """Read the rest of ``lines`` for the digest only (a resume compares all of it); one bad line
    for all of it, so a long tail cannot flood the report."""
    first = lines.count + 1
    for _ in lines:
        pass
    if lines.count >= first:
        span = f"line {first} was" if lines.count == first else f"lines {first} to {lines.count} were"
        yield BadLine(
            first,
            f"{span} not read {why}: where the next row starts cannot be told, "
            "and a guess could run part of a quoted field as an item",
        )
