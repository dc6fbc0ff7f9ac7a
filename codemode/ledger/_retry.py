"""Retry classes: what a failed call may do next.

===========================  ==========================================  =======================
class                        when                                         then
===========================  ==========================================  =======================
refused_before_execution     nothing was sent (server down, not           ``mark_refused``; the
                             connected), or the server answered 429 or    broker may back off and
                             503 (it refused before executing)            ``reserve`` again (a new
                                                                          attempt row)
client_error                 the server rejected the request itself       ``complete`` with a
                             (HTTP 4xx, JSON-RPC parse/invalid request/   ``CallFailed``: stored,
                             method not found/invalid params)             replayed, never retried
post_send_failure            sent, and then: timeout, lost stream,        ``mark_unknown``: never
                             connection reset, 5xx other than 503,        retried automatically;
                             JSON-RPC internal error, broker crash        reconciled
===========================  ==========================================  =======================

A tool that *ran* and reported an error (``isError: true``) is not a failure class at all:
it is an answer, ``complete`` stores it as ``failed`` and later calls with the key replay it.
"""

from __future__ import annotations

from enum import StrEnum

# Answers that mean "not executed, try later". 502/504 are not here: a gateway may have
# forwarded the request before failing, so the outcome is unknown.
_REFUSED_HTTP = frozenset({429, 503})
# JSON-RPC errors raised before a tool runs: parse error, invalid request, method not found,
# invalid params.
_CLIENT_JSONRPC = frozenset({-32700, -32600, -32601, -32602})


class RetryClass(StrEnum):
    REFUSED_BEFORE_EXECUTION = "refused_before_execution"
    CLIENT_ERROR = "client_error"
    POST_SEND_FAILURE = "post_send_failure"


def classify_failure(
    *, sent: bool, answered: bool, http_status: int | None = None, jsonrpc_code: int | None = None
) -> RetryClass:
    """Classify a call that did not produce a tool answer.

    ``sent``: any byte of the request may have left the broker. ``answered``: an error answer
    to *this* request arrived (an HTTP status or a JSON-RPC error), as opposed to a timeout or
    a dropped connection.
    """
    if not sent:
        return RetryClass.REFUSED_BEFORE_EXECUTION
    if answered and http_status in _REFUSED_HTTP:
        return RetryClass.REFUSED_BEFORE_EXECUTION
    if not answered:
        return RetryClass.POST_SEND_FAILURE
    if http_status is not None and 400 <= http_status < 500:
        return RetryClass.CLIENT_ERROR
    if jsonrpc_code in _CLIENT_JSONRPC and (http_status is None or http_status < 500):
        return RetryClass.CLIENT_ERROR
    return RetryClass.POST_SEND_FAILURE
