"""Requests from a server to the host during a tool call: elicitation, roots and sampling.

Which call a request belongs to decides who may answer it, so the two protocol eras differ:

* **2026-07-28.** The server answers the call itself with an ``InputRequiredResult``. The host
  fulfils its input requests for that very call and sends the call again with the responses and
  the request state echoed byte for byte (:func:`drive_input_rounds`). The attribution is exact.
* **2025-11-25.** The server sends ``elicitation/create`` (or ``sampling/createMessage``) as a
  request of its own while the call is open, and nothing on the wire ties it to the call. It
  goes to the call in flight on this connection when there is exactly one. With none, or
  several (two runs, or one run's parallel calls), it is declined: a guess could let one run's
  person confirm another run's action (or spend another run's sampling budget).

What each request gets:

==================  =====================================================================
request             answer
==================  =====================================================================
elicitation         ``elicitation = "relay"``: the call's :class:`InputHandler` (the broker
                    asks the run's person, never the program); ``"deny"``: declined, and the
                    capability is not even declared
roots               the server's configured ``roots`` (not declared when there are none);
                    :meth:`InputRouter.update_roots` changes them on a live connection
sampling            ``sampling = "relay"``: the call's handler (the broker filters the request,
                    takes it from the run's sampling budget and asks the run's model, never
                    the program); ``"deny"`` (default): refused, and the capability is not
                    declared
==================  =====================================================================
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import anyio
import mcp_types
from mcp.client.session import ClientRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import FileUrl

from codemode.calls import InputHandler, SamplingHandler
from codemode.config import ServerConfig

if TYPE_CHECKING:
    from mcp import Client

__all__ = [
    "MAX_INPUT_ROUNDS",
    "InputHandler",
    "InputRoundsExceeded",
    "InputRouter",
    "RootsUpdate",
    "SamplingHandler",
    "drive_input_rounds",
]

MAX_INPUT_ROUNDS = 8
"""Rounds of ``InputRequiredResult`` one call may take before the host gives up on it."""
_STATE_ONLY_DELAYS_S = (0.05, 0.1, 0.2, 0.25)
"""Pauses before re-sending when the server returned only request state (it is still working)."""

NOBODY_TO_ASK = (
    "the request for input cannot be tied to one tool call (none, or several, are in flight on "
    "this connection), so nobody may answer it"
)
SAMPLING_REFUSED = (
    'this server may not ask for model completions (its sampling setting is "deny"; '
    '"relay" passes them to the run\'s model)'
)
NO_MODEL_TO_ASK = "this tool call has no model to answer the server's sampling request"
NO_ROOTS = "no roots are configured"

RootsUpdate = Literal["unchanged", "notified", "updated", "reconnect needed"]
"""What :meth:`InputRouter.update_roots` did:

* ``unchanged``: the roots were already these; nothing was sent.
* ``notified``: the server was sent ``notifications/roots/list_changed`` (2025-11-25).
* ``updated``: the server gets the new roots the next time it asks, but was not told: it is not
  connected (the next connection offers them), it speaks 2026-07-28 (no client notifications in
  that revision: it asks for roots in each call's input rounds), or no roots are left on a
  connection that never had the capability.
* ``reconnect needed``: the connection was made without roots, so the capability was not declared
  and cannot be on a live connection; the roots are offered from the next connection on.
"""


def _listed(roots: Sequence[str]) -> mcp_types.ListRootsResult:
    for root in roots:
        if not Path(root).is_absolute():
            raise ValueError(f"root {root!r} is not an absolute path; write it as /full/path")
    return mcp_types.ListRootsResult(
        roots=[
            mcp_types.Root(uri=FileUrl(Path(root).as_uri()), name=Path(root).name or root) for root in roots
        ]
    )


class InputRoundsExceeded(Exception):
    """The server kept asking for input past :data:`MAX_INPUT_ROUNDS` rounds."""


class InputRouter:
    """One connection's answers to its server's requests, and the calls they can belong to."""

    def __init__(self, config: ServerConfig, live: Callable[[], Client | None] = lambda: None) -> None:
        """``live`` gives the connection's client while there is one (for :meth:`update_roots`)."""
        self._config = config
        self._live = live
        self._in_flight: dict[str, InputHandler | None] = {}
        self._paths = tuple(config.roots)
        self._roots = _listed(self._paths)
        self._declared = False
        """Whether the latest client was made with the roots capability (see client_callbacks)."""

    def client_callbacks(self) -> dict[str, Any]:
        """The SDK client's callbacks: only those the config allows, so that only those
        capabilities are declared to the server (roots: with ``listChanged``, by the SDK)."""
        callbacks: dict[str, Any] = {}
        if self._config.elicitation == "relay":
            callbacks["elicitation_callback"] = self._on_elicit
        if self._config.sampling == "relay":
            callbacks["sampling_callback"] = self._on_sample
        self._declared = bool(self._roots.roots)
        if self._declared:
            callbacks["list_roots_callback"] = self._on_list_roots
        return callbacks

    @property
    def roots(self) -> list[str]:
        """The roots offered now (absolute paths)."""
        return list(self._paths)

    async def update_roots(self, roots: Sequence[str]) -> RootsUpdate:
        """Offer ``roots`` (absolute paths) from now on, and tell the server on the live
        connection, if any, when the protocol lets the host. Emptying them keeps the capability
        declared and lists no roots. See :data:`RootsUpdate`.

        Raises:
            ValueError: a root is not an absolute path (nothing changes).
        """
        if tuple(roots) == self._paths:
            return "unchanged"
        listed = _listed(roots)
        self._paths, self._roots = tuple(roots), listed
        client = self._live()
        if client is None:
            return "updated"
        if not self._declared:
            return "reconnect needed" if self._paths else "updated"
        if client.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return "updated"
        await client.session.send_notification(mcp_types.RootsListChangedNotification())
        return "notified"

    def track(self, marker: str, handler: InputHandler | None) -> None:
        """A call is in flight: its server's legacy requests may go to ``handler`` (until
        :meth:`forget`)."""
        self._in_flight[marker] = handler

    def forget(self, marker: str) -> None:
        self._in_flight.pop(marker, None)

    async def _on_elicit(
        self, context: ClientRequestContext, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult | mcp_types.ErrorData:
        handlers = list(self._in_flight.values())
        if len(handlers) != 1 or handlers[0] is None:
            return mcp_types.ErrorData(code=mcp_types.INVALID_REQUEST, message=NOBODY_TO_ASK)
        return await handlers[0].elicit(params)

    async def _on_sample(
        self, context: ClientRequestContext, params: mcp_types.CreateMessageRequestParams
    ) -> mcp_types.CreateMessageResult | mcp_types.ErrorData:
        handlers = list(self._in_flight.values())
        if len(handlers) != 1 or handlers[0] is None:
            return mcp_types.ErrorData(code=mcp_types.INVALID_REQUEST, message=NOBODY_TO_ASK)
        return await self._sample(handlers[0], params)

    @staticmethod
    async def _sample(
        handler: InputHandler, params: mcp_types.CreateMessageRequestParams
    ) -> mcp_types.CreateMessageResult | mcp_types.ErrorData:
        if not isinstance(handler, SamplingHandler):
            return mcp_types.ErrorData(code=mcp_types.INVALID_REQUEST, message=NO_MODEL_TO_ASK)
        return await handler.sample(params)

    async def _on_list_roots(self, context: ClientRequestContext) -> mcp_types.ListRootsResult:
        return self._roots

    async def answer(
        self, handler: InputHandler | None, request: mcp_types.InputRequest
    ) -> mcp_types.InputResponse | mcp_types.ErrorData:
        """One input request embedded in an ``InputRequiredResult`` of the call ``handler`` serves."""
        if isinstance(request, mcp_types.ElicitRequest):
            if self._config.elicitation == "deny":
                return mcp_types.ElicitResult(action="decline")
            if handler is None:
                return mcp_types.ErrorData(code=mcp_types.INVALID_REQUEST, message=NOBODY_TO_ASK)
            return await handler.elicit(request.params)
        if isinstance(request, mcp_types.ListRootsRequest):
            if not self._roots.roots and not self._declared:
                return mcp_types.ErrorData(code=mcp_types.INVALID_REQUEST, message=NO_ROOTS)
            return self._roots
        if self._config.sampling == "deny":
            return mcp_types.ErrorData(code=mcp_types.INVALID_REQUEST, message=SAMPLING_REFUSED)
        if handler is None:
            return mcp_types.ErrorData(code=mcp_types.INVALID_REQUEST, message=NOBODY_TO_ASK)
        return await self._sample(handler, request.params)


Retry = Callable[[mcp_types.InputResponses | None, str | None], Awaitable[Any]]
Answer = Callable[[mcp_types.InputRequest], Awaitable[mcp_types.InputResponse | mcp_types.ErrorData]]


async def drive_input_rounds(first: mcp_types.InputRequiredResult, answer: Answer, retry: Retry) -> Any:
    """Fulfil ``InputRequiredResult`` rounds until the server gives the call's real result.

    Each round's input requests are answered in order (a person answers one at a time); the
    request state goes back exactly as it came, never read. A refused request (``ErrorData``)
    ends the call: the server did not get what it needs to complete it.

    Raises:
        InputRoundsExceeded: more than :data:`MAX_INPUT_ROUNDS` rounds.
        mcp.shared.exceptions.MCPError: an input request was refused.
    """
    current: Any = first
    waits = 0
    for _ in range(MAX_INPUT_ROUNDS):
        responses: mcp_types.InputResponses | None = None
        if current.input_requests:
            responses = {}
            for key, request in current.input_requests.items():
                response = await answer(request)
                if isinstance(response, mcp_types.ErrorData):
                    raise MCPError.from_error_data(response)
                responses[key] = response
        else:
            await anyio.sleep(_STATE_ONLY_DELAYS_S[min(waits, len(_STATE_ONLY_DELAYS_S) - 1)])
            waits += 1
        current = await retry(responses, current.request_state)
        if not isinstance(current, mcp_types.InputRequiredResult):
            return current
    raise InputRoundsExceeded(f"the server still asked for input after {MAX_INPUT_ROUNDS} rounds")
