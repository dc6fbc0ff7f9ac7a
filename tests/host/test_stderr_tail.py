"""A server's stderr tail is shown without secrets, and a cut line keeps no half of one."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import pytest

from codemode._redaction import forget_secrets, remember_secret
from codemode.host._stderr import StderrTail

SECRET = "tail-secret-0123456789"
MAX_LINE = 2_000


@pytest.fixture(autouse=True)
def remembered() -> Iterator[None]:
    forget_secrets()
    remember_secret(SECRET, "TAIL_SECRET")
    yield
    forget_secrets()


def tail_of(*writes: str) -> str:
    """What the tail holds after a real pipe carried ``writes`` (each one write) and closed."""
    tail = StderrTail()
    for text in writes:
        tail.writer.write(text)
        tail.writer.flush()
    tail.close()
    return tail.tail()


@pytest.mark.parametrize(
    "line",
    [
        f"starting with {SECRET}",
        f"auth header Basic {base64.b64encode(b'svc:' + SECRET.encode()).decode()}",
        f"config: DB_PASSWORD={'x9' * 8}",
        "connecting to postgres://app:pg-pw-777@db/app",
    ],
)
def test_the_tail_hides_secrets(line: str) -> None:
    shown = tail_of(f"{line}\nnext line\n")
    assert "[REDACTED:" in shown and "next line" in shown
    for secret in (SECRET, "x9" * 8, "pg-pw-777", "svc:"):
        assert secret not in shown


@pytest.mark.parametrize("offset", [1, 7, len(SECRET) - 1])
def test_a_line_cut_through_a_secret_keeps_no_part_of_it(offset: int) -> None:
    line = "a" * (MAX_LINE - offset) + " " + SECRET + " after"
    shown = tail_of(line[: MAX_LINE // 2], line[MAX_LINE // 2 :] + "\n")
    assert shown.endswith("…") and len(shown) <= MAX_LINE + 1
    assert not any(SECRET[:size] in shown for size in range(3, len(SECRET) + 1))


def test_an_unfinished_line_cut_at_its_start_keeps_no_end_of_a_word() -> None:
    word = "k" * 3 * MAX_LINE  # longer than the kept tail: all of it is dropped, in every chunk
    shown = tail_of("first\n", word[:MAX_LINE], word[MAX_LINE:], "Z" * 10 + " the end")
    assert shown.splitlines() == ["first", "… the end"]
