"""The bundled model's tokenizer for one short text (a query), in Python, from a cached table.

Loading the model's ``tokenizer.json`` with the ``tokenizers`` library costs about 60 ms (importing
it, parsing 1.8 MB of JSON, building its maps); a ``codemode search`` from the cached index spends
less than that on everything else. A query is a few dozen characters, so it is encoded here instead,
from a precomputed table that loads in about a millisecond: the single-character tokens, the 256
byte-fallback tokens and the merges as two sorted integer arrays. Batches (embedding a catalog) still
go through ``tokenizers``.

This is a port of exactly one pipeline, the SentencePiece-style BPE of the bundled model: added
tokens split out first (leftmost-longest, matched in the raw text), each remaining piece normalised
(a ``▁`` prepended, spaces replaced by ``▁``), no pre-tokenizer, then BPE with byte fallback: the
merge of lowest rank first, leftmost among equals, with the same test for stale queue entries as
``tokenizers``' ``Word::merge_all``. :meth:`BpeTable.from_config` returns None for any configuration
that differs in anything that could change the ids; callers then use ``tokenizers``. The table is
cached next to the search index, sealed with its sha256 and tied to the sha256 of the tokenizer file
it came from, so a damaged or stale table is rebuilt, never used.
"""

from __future__ import annotations

import bisect
import hashlib
import heapq
import json
import marshal
import re
from array import array
from pathlib import Path
from typing import Any, cast

from codemode.search._cache_files import read_sealed, write_sealed

__all__ = ["BpeTable", "cached_table"]

_FORMAT = "codemode-bpe-1"
_SPACE = "\u2581"
_NORMALIZER = {
    "type": "Sequence",
    "normalizers": [
        {"type": "Prepend", "prepend": _SPACE},
        {"type": "Replace", "pattern": {"String": " "}, "content": _SPACE},
    ],
}
_ID_BITS = 16  # a merge is keyed (left << 16 | right) and valued (rank << 16 | merged id)
_ID_MASK = (1 << _ID_BITS) - 1


class BpeTable:
    """What encoding needs of a BPE tokenizer, as compact plain data (see the module docstring)."""

    __slots__ = ("_bytes", "_chars", "_keys", "_specials", "_split", "_values")

    def __init__(
        self,
        chars: dict[str, int],
        byte_ids: tuple[int, ...],
        keys: array[int],
        values: array[int],
        specials: dict[str, int],
    ) -> None:
        if len(byte_ids) != 256 or len(keys) != len(values) or any(not s for s in specials):
            raise ValueError("inconsistent BPE table")
        self._chars = chars
        self._bytes = byte_ids
        self._keys = keys
        self._values = values
        self._specials = specials
        # Longest first: at the leftmost match, the longest token wins (tokenizers' LeftmostLongest).
        alternatives = sorted(specials, key=len, reverse=True)
        self._split = re.compile("|".join(map(re.escape, alternatives))) if alternatives else None

    @classmethod
    def from_config(cls, config: bytes) -> BpeTable | None:
        """The table of a ``tokenizer.json``, or None unless it is the one pipeline ported here."""
        try:
            data = json.loads(config)
        except ValueError:
            return None
        if not isinstance(data, dict):
            return None
        return _table(cast("dict[str, Any]", data))

    def encode(self, text: str) -> list[int]:
        """The ids ``tokenizers`` gives for ``text`` with ``add_special_tokens=False``."""
        ids: list[int] = []
        start = 0
        if self._split is not None:
            for match in self._split.finditer(text):
                if match.start() > start:
                    ids += self._piece(text[start : match.start()])
                ids.append(self._specials[match.group()])
                start = match.end()
        if start < len(text):
            ids += self._piece(text[start:])
        return ids

    def _merge(self, left: int, right: int) -> int:
        """``rank << 16 | merged id`` of the pair, or -1 when it does not merge."""
        key = left << _ID_BITS | right
        keys = self._keys
        i = bisect.bisect_left(keys, key)
        return self._values[i] if i < len(keys) and keys[i] == key else -1

    def _piece(self, piece: str) -> list[int]:
        """BPE over one normalised piece, as ``Word::merge_all`` does it (no dropout)."""
        chars, byte_ids = self._chars, self._bytes
        symbols: list[int] = []
        for char in _SPACE + piece.replace(" ", _SPACE):
            found = chars.get(char)
            if found is not None:
                symbols.append(found)
            else:
                symbols += [byte_ids[b] for b in char.encode("utf-8")]
        n = len(symbols)
        nxt = [*range(1, n), -1]
        prev = list(range(-1, n - 1))
        alive = [True] * n
        queue: list[tuple[int, int, int]] = []
        for pos in range(n - 1):
            merge = self._merge(symbols[pos], symbols[pos + 1])
            if merge >= 0:
                queue.append((merge >> _ID_BITS, pos, merge & _ID_MASK))
        heapq.heapify(queue)
        while queue:
            _, pos, new_id = heapq.heappop(queue)
            right = nxt[pos]
            if not alive[pos] or right == -1:
                continue
            merge = self._merge(symbols[pos], symbols[right])
            if merge < 0 or merge & _ID_MASK != new_id:  # a stale entry: the pair has changed since
                continue
            symbols[pos] = new_id
            alive[right] = False
            after = nxt[right]
            nxt[pos] = after
            if after != -1:
                prev[after] = pos
            before = prev[pos]
            if before >= 0 and (merge := self._merge(symbols[before], new_id)) >= 0:
                heapq.heappush(queue, (merge >> _ID_BITS, before, merge & _ID_MASK))
            if after != -1 and (merge := self._merge(new_id, symbols[after])) >= 0:
                heapq.heappush(queue, (merge >> _ID_BITS, pos, merge & _ID_MASK))
        return [symbol for symbol, live in zip(symbols, alive, strict=True) if live]

    def to_bytes(self, source_digest: str) -> bytes:
        return marshal.dumps(
            (
                _FORMAT,
                source_digest,
                self._chars,
                self._bytes,
                self._keys.tobytes(),
                self._values.tobytes(),
                self._specials,
            )
        )

    @classmethod
    def from_bytes(cls, data: bytes | memoryview, source_digest: str) -> BpeTable | None:
        """The table :meth:`to_bytes` wrote for the tokenizer file of ``source_digest``, else None."""
        try:
            loaded = marshal.loads(data)  # noqa: S302 - a sealed file only this user could write
        except (EOFError, TypeError, ValueError, SystemError):  # marshal's errors for bad data
            return None
        if not isinstance(loaded, tuple) or len(loaded) != 7:  # pyright: ignore[reportUnknownArgumentType]
            return None
        form, digest, chars, byte_ids, keys, values, specials = cast("tuple[object, ...]", loaded)
        if form != _FORMAT or digest != source_digest:
            return None
        if not (isinstance(chars, dict) and isinstance(byte_ids, tuple) and isinstance(specials, dict)):
            return None
        if not (isinstance(keys, bytes) and isinstance(values, bytes)):
            return None
        key_array, value_array = array("q"), array("q")
        try:
            key_array.frombytes(keys)
            value_array.frombytes(values)
            return cls(
                cast("dict[str, int]", chars),
                cast("tuple[int, ...]", byte_ids),
                key_array,
                value_array,
                cast("dict[str, int]", specials),
            )
        except ValueError:
            return None


def _table(data: dict[str, Any]) -> BpeTable | None:
    """Every setting that could change the ids is checked; anything unexpected means None."""
    model = data.get("model")
    if data.get("normalizer") != _NORMALIZER or data.get("pre_tokenizer") is not None:
        return None
    if not isinstance(model, dict):
        return None
    model = cast("dict[str, Any]", model)
    expected = {"type": "BPE", "dropout": None, "continuing_subword_prefix": None}
    expected |= {"end_of_word_suffix": None, "byte_fallback": True}
    if any(model.get(name, None) != value for name, value in expected.items()):
        return None
    if model.get("ignore_merges", False) is not False:
        return None
    vocab = model.get("vocab")
    merges = model.get("merges")
    added = data.get("added_tokens", [])
    if not (isinstance(vocab, dict) and isinstance(merges, list) and isinstance(added, list)):
        return None
    vocab = cast("dict[str, object]", vocab)
    if not all(isinstance(i, int) and 0 <= i <= _ID_MASK for i in vocab.values()):
        return None
    ids = cast("dict[str, int]", vocab)
    try:
        # With every byte token present a character always encodes, so the unknown token never occurs.
        byte_ids = tuple(ids[f"<0x{b:02X}>"] for b in range(256))
    except KeyError:
        return None
    specials: dict[str, int] = {}
    for token in cast("list[object]", added):
        if not isinstance(token, dict):
            return None
        entry = cast("dict[str, object]", token)
        content, token_id = entry.get("content"), entry.get("id")
        plain = all(entry.get(flag) is False for flag in ("normalized", "lstrip", "rstrip", "single_word"))
        if not (plain and isinstance(content, str) and content and isinstance(token_id, int)):
            return None
        specials[content] = token_id
    table: dict[int, int] = {}
    for rank, merge in enumerate(cast("list[object]", merges)):
        pair = merge.split(" ") if isinstance(merge, str) else merge
        if not isinstance(pair, list) or len(pair) != 2:  # pyright: ignore[reportUnknownArgumentType]
            return None
        left, right = cast("list[object]", pair)
        if not (isinstance(left, str) and isinstance(right, str)):
            return None
        merged = ids.get(left + right)
        if left not in ids or right not in ids or merged is None:
            return None
        table[ids[left] << _ID_BITS | ids[right]] = rank << _ID_BITS | merged  # a repeated pair: last wins
    keys = sorted(table)
    chars = {token: i for token, i in ids.items() if len(token) == 1}
    return BpeTable(chars, byte_ids, array("q", keys), array("q", [table[k] for k in keys]), specials)


def cached_table(tokenizer_file: Path, model_id: str, directory: Path) -> BpeTable | None:
    """The table of ``tokenizer_file``, from ``directory`` when a sound copy of this very file's table
    is there, else built (and stored there); None when the file is not the pipeline ported here."""
    config = tokenizer_file.read_bytes()
    digest = hashlib.sha256(config).hexdigest()
    path = directory / "tokenizer" / f"{hashlib.sha256(model_id.encode()).hexdigest()[:32]}.bin"
    payload = read_sealed(path)
    if payload is not None and (table := BpeTable.from_bytes(payload, digest)) is not None:
        return table
    table = BpeTable.from_config(config)
    if table is not None:
        write_sealed(path, table.to_bytes(digest), keep=4)
    return table
