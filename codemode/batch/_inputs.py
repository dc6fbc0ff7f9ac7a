"""Batch inputs: items streamed from a JSON Lines or CSV file, one at a time, never loaded whole.

Each item is a JSON object (a CSV row becomes an object of strings). Its key is the value of
``--key FIELD`` (a string or an integer), or its line number without ``--key``. A line that
cannot be read is reported with its line number as a :class:`BadLine` and the stream goes on.
NaN and infinite numbers are bad lines too: the sandbox channel, the ledger and the job store
carry only standard JSON, so such an item could never run.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from codemode.ledger._digest import escape_part

MAX_KEY_CHARS = 512
"""The longest item key, counted as the ledger sees it inside each derived idempotency key (with
``:`` and ``%`` escaped to three characters): the ledger refuses keys over 1024 characters, and
the job id, principal, tenant, server and tool share the rest."""
SUFFIXES = (".jsonl", ".ndjson", ".csv")


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


def json_problem(data: Any) -> str | None:
    """Why ``data`` is not standard JSON (NaN, infinities, objects JSON cannot hold), or None."""
    try:
        json.dumps(data, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        return f"not valid JSON ({exc})"
    return None


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
    with path.open(encoding="utf-8", errors="surrogateescape", newline="") as handle:
        if suffix == ".csv":
            yield from _csv_items(handle, key_field, digest)
        else:
            yield from _jsonl_items(handle, key_field, digest)


def _jsonl_items(handle: Any, key_field: str | None, digest: InputDigest | None) -> Iterator[Item | BadLine]:
    for line, raw in enumerate(handle, start=1):
        raw = cast(str, raw)
        if digest is not None:
            digest.update(raw)
        if not raw.strip():
            continue
        try:
            data = json.loads(raw, parse_constant=_no_constant, parse_float=_finite)
        except (ValueError, RecursionError) as exc:
            yield BadLine(line, f"not valid JSON ({exc})")
            continue
        if not isinstance(data, dict):
            yield BadLine(line, f"an item must be a JSON object, not {type(data).__name__}")
            continue
        yield keyed(cast(dict[str, Any], data), line, key_field)


class _Tee:
    """Feeds the raw CSV text to the digest as the csv module reads it."""

    def __init__(self, handle: Any, digest: InputDigest | None) -> None:
        self._handle = handle
        self._digest = digest

    def __iter__(self) -> Iterator[str]:
        for raw in self._handle:
            if self._digest is not None:
                self._digest.update(raw)
            yield raw


def _csv_items(handle: Any, key_field: str | None, digest: InputDigest | None) -> Iterator[Item | BadLine]:
    reader = csv.DictReader(_Tee(handle, digest), strict=True)
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            yield BadLine(reader.line_num, f"not valid CSV ({exc})")
            continue
        if None in row or any(value is None for value in row.values()):
            yield BadLine(reader.line_num, "the row does not have as many fields as the header")
            continue
        yield keyed(dict(row), reader.line_num, key_field)
