"""Media checks: an image block must be an allowed image type, and its bytes must say so too.

A server may label an executable ``image/png`` or send ``application/x-msdownload`` as an image
block. The declared MIME type must be on the policy's allowlist for the block's content type,
and for the types codemode knows, the first bytes of the data must match the declared type
(a magic-number check; the data is never decoded further or rendered).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from typing import Any

_SIGNATURES: dict[str, tuple[bytes, ...]] = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/webp": (b"RIFF",),
    "audio/wav": (b"RIFF",),
    "audio/x-wav": (b"RIFF",),
    "audio/mpeg": (b"ID3", b"\xff\xfb", b"\xff\xf3", b"\xff\xf2"),
    "audio/ogg": (b"OggS",),
    "audio/flac": (b"fLaC",),
    "audio/webm": (b"\x1a\x45\xdf\xa3",),
}
"""Leading bytes of each known type (WebP and WAV share RIFF; the subtype is checked below)."""

_RIFF_KIND = {"image/webp": b"WEBP", "audio/wav": b"WAVE", "audio/x-wav": b"WAVE"}
_HEAD_CHARS = 64
"""Base64 characters decoded to read the signature: 48 bytes, enough for every type above."""


def _head(data: str) -> bytes | None:
    chunk = data[:_HEAD_CHARS]
    chunk = chunk[: len(chunk) - len(chunk) % 4]
    try:
        return base64.b64decode(chunk, validate=True)
    except (binascii.Error, ValueError):
        return None


def media_problem(block: Mapping[str, Any], allowed: Mapping[Any, Sequence[str]]) -> str | None:
    """Why an image or audio block may not pass (None when it may). Other blocks always pass."""
    kind = block.get("type")
    if kind not in ("image", "audio"):
        return None
    mime = str(block.get("mimeType", "")).lower().split(";", 1)[0].strip()
    if mime not in {m.lower() for m in allowed.get(kind, ())}:
        return f"{kind} of MIME type {mime or 'none'!r} is not allowed"
    data = block.get("data")
    if not isinstance(data, str):
        return f"{kind} block has no base64 data"
    signatures = _SIGNATURES.get(mime)
    if signatures is None:
        return None  # a type the policy allows but codemode has no signature for
    head = _head(data)
    if head is None:
        return f"{kind} data is not valid base64"
    if not head.startswith(signatures):
        return f"{kind} data does not look like {mime}"
    riff = _RIFF_KIND.get(mime)
    if riff is not None and head[8:12] != riff:
        return f"{kind} data does not look like {mime}"
    return None
