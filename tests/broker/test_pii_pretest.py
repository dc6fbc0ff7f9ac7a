"""The PII detectors' cheap pre-test (``_could_match``) must never hide a match they would find."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codemode.broker import _pii
from codemode.broker._pii import detected_kinds, pii_kinds_in, scrub_text

KINDS = ("email", "phone", "card", "iban", "ssn")
FOUND = {
    "ana@example.com": "email",
    "4111 1111 1111 1111": "card",
    "GB82 WEST 1234 5698 7654 32": "iban",
    "GB82WEST12345698765432": "iban",
    "123-45-6789": "ssn",
    "+1 415 555 0100": "phone",
    "(415) 555-0100": "phone",
    "phone: 030 1234 5678": "phone",
    "+1 (415) 555-0100": "phone",
}
# Unicode digits and spaces too: the detectors' \d and \s match them, so the pre-test must.
NOISE = st.text(alphabet='0123456789\u0663 -.+()@abcXYZGBDE_:,\n\u2003"{}[]', max_size=40)


@pytest.mark.parametrize(("value", "kind"), sorted(FOUND.items()))
def test_each_kind_is_still_found_in_a_json_answer(value: str, kind: str) -> None:
    text = f'{{"id": 7, "value": "{value}"}}'
    assert kind in pii_kinds_in(text, KINDS)
    assert kind in pii_kinds_in(text, {kind})
    scrubbed, count = scrub_text(text, {kind}, lambda k, _v: f"<{k}>")
    assert count == 1 and f"<{kind}>" in scrubbed


@settings(max_examples=400, deadline=None)
@given(
    before=NOISE,
    middle=st.sampled_from([*FOUND, ""]),
    after=NOISE,
    kinds=st.frozensets(st.sampled_from(KINDS)),
)
def test_the_pretest_finds_what_the_detectors_find(
    before: str, middle: str, after: str, kinds: frozenset[str]
) -> None:
    text = before + middle + after
    assert pii_kinds_in(text, kinds) == detected_kinds(text, kinds)


@settings(max_examples=400, deadline=None)
@given(
    digits=st.text(alphabet="0123456789\u0663 -.()+", min_size=9, max_size=24),
    after=NOISE,
    kinds=st.frozensets(st.sampled_from(KINDS)),
)
def test_the_pretest_finds_what_the_detectors_find_in_a_phone_field(
    digits: str, after: str, kinds: frozenset[str]
) -> None:
    """In a phone field a bare run of digits counts: the whole-value scan must still see it."""
    text = f'{{"mobile": "{digits}{after}"}}'
    assert pii_kinds_in(text, kinds, fields=True) == detected_kinds(text, kinds, fields=True)


@pytest.mark.parametrize(
    "answer",
    [
        '{"writes": [], "total": 0}',
        '{"id": "CUST-0042", "updated_at": "2026-12-05T19:55:43Z", "balance": 1234.5}',
        '{"counts": [120, 4511, 90210, 31337], "page": 12}',
    ],
)
def test_an_answer_without_at_signs_or_nine_digit_numbers_skips_the_detectors(answer: str) -> None:
    assert not _pii._could_match(answer, frozenset(KINDS))  # pyright: ignore[reportPrivateUsage]


def test_nine_digits_in_one_number_reach_the_detectors() -> None:
    assert _pii._could_match('{"v": "+1 (415) 555-0100"}', frozenset({"phone"}))  # pyright: ignore[reportPrivateUsage]
