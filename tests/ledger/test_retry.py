"""Retry classes: only what was refused before execution may be retried."""

from __future__ import annotations

import pytest

from codemode.ledger import RetryClass, classify_failure


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"sent": False, "answered": False}, RetryClass.REFUSED_BEFORE_EXECUTION),
        ({"sent": True, "answered": True, "http_status": 429}, RetryClass.REFUSED_BEFORE_EXECUTION),
        ({"sent": True, "answered": True, "http_status": 503}, RetryClass.REFUSED_BEFORE_EXECUTION),
        ({"sent": True, "answered": True, "http_status": 400}, RetryClass.CLIENT_ERROR),
        ({"sent": True, "answered": True, "http_status": 404}, RetryClass.CLIENT_ERROR),
        ({"sent": True, "answered": True, "jsonrpc_code": -32602}, RetryClass.CLIENT_ERROR),
        ({"sent": True, "answered": True, "jsonrpc_code": -32601}, RetryClass.CLIENT_ERROR),
        ({"sent": True, "answered": True, "jsonrpc_code": -32603}, RetryClass.POST_SEND_FAILURE),
        ({"sent": True, "answered": True, "http_status": 500}, RetryClass.POST_SEND_FAILURE),
        ({"sent": True, "answered": True, "http_status": 502}, RetryClass.POST_SEND_FAILURE),
        ({"sent": True, "answered": False}, RetryClass.POST_SEND_FAILURE),
        ({"sent": True, "answered": False, "http_status": 429}, RetryClass.POST_SEND_FAILURE),
    ],
)
def test_failures_are_classified_conservatively(kwargs: dict[str, object], expected: RetryClass) -> None:
    assert classify_failure(**kwargs) is expected  # type: ignore[arg-type]
