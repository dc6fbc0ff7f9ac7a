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
}
NOISE = st.text(alphabet='0123456789 -.+()@abcXYZGBDE_:,\n"{}[]', max_size=40)


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


def test_a_small_answer_without_at_signs_or_digit_runs_skips_the_detectors() -> None:
    assert not _pii._could_match('{"writes": [], "total": 0}', frozenset(KINDS))  # pyright: ignore[reportPrivateUsage]
