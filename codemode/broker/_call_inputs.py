"""One tool call's answers to its server's requests for input (the host's ``InputHandler``).

The broker makes one per sent call. A request goes to the run's :class:`Elicitor` (a person),
never to the program; without one it is refused as "nobody to ask". A form answer is completed
and checked against the requested schema before the server sees it. Every answer, whoever gave
it, is recorded in the ledger against the call: who answered, the action, and a digest of the
content (the content itself may hold anything the person typed, so it is not stored).

A request for a model completion (sampling) goes to the run's ``Sampler`` through
:class:`~codemode.broker._sampling.SamplingRelay`: filtered, within the run's sampling budget,
and recorded the same way.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import mcp_types

from codemode.broker._inputs import ElicitationRequest, Elicitor, FormError, SamplingRequest, complete_form
from codemode.broker._run import RunState
from codemode.broker._sampling import NO_SAMPLER, SamplingRelay
from codemode.calls import RunBinding
from codemode.catalog import canonical_json
from codemode.config import PolicyConfig

log = logging.getLogger(__name__)

NOBODY = "nobody is there to answer: the run has no elicitor (a person), and the program may not answer"

Record = Callable[[Mapping[str, Any]], Awaitable[None]]


class CallInputs:
    def __init__(
        self,
        *,
        call_id: str,
        binding: RunBinding,
        server: str,
        tool: str,
        elicitor: Elicitor | None,
        record: Record,
        run: RunState | None = None,
        policy: PolicyConfig | None = None,
    ) -> None:
        """``run`` and ``policy`` let the call's server sample the run's model (its sampler, the
        sampling budget and the result filter); without them sampling is refused."""
        self.call_id = call_id
        self._binding = binding
        self._server = server
        self._tool = tool
        self._elicitor = elicitor
        self._record = record
        self._run = run
        self._policy = policy

    async def sample(
        self, params: mcp_types.CreateMessageRequestParams
    ) -> mcp_types.CreateMessageResult | mcp_types.ErrorData:
        # Built only when a server asks: most calls never sample, and this object is per call.
        if self._run is None or self._policy is None:
            await self._record(
                {"kind": "sampling", "action": "refused", "answered_by": "host", "note": NO_SAMPLER}
            )
            return mcp_types.ErrorData(code=mcp_types.INVALID_REQUEST, message=NO_SAMPLER)
        request = SamplingRequest(
            call_id=self.call_id,
            principal=self._binding.principal,
            tenant=self._binding.tenant,
            server=self._server,
            tool=self._tool,
            params=params,
        )
        return await SamplingRelay(self._run, self._policy).relay(request, self._record)

    async def elicit(
        self, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult | mcp_types.ErrorData:
        request = self._request(params)
        if self._elicitor is None:
            await self._note(request, "refused", "host", None, NOBODY)
            return mcp_types.ErrorData(code=mcp_types.INVALID_REQUEST, message=NOBODY)
        answer = await self._elicitor.elicit(request)
        if answer.action != "accept":
            await self._note(request, answer.action, answer.answered_by, None)
            return mcp_types.ElicitResult(action=answer.action)
        if request.mode == "url":
            await self._note(request, "accept", answer.answered_by, None)
            return mcp_types.ElicitResult(action="accept")
        try:
            content = complete_form(request.schema, answer.content)
        except FormError as exc:
            # Only a program-made elicitor (the API's) can get here; the terminal asks again.
            log.warning("elicitation answer for %s did not fit the form: %s", self.call_id, exc)
            await self._note(
                request, "decline", answer.answered_by, None, f"answer did not fit the form: {exc}"
            )
            return mcp_types.ElicitResult(action="decline")
        await self._note(request, "accept", answer.answered_by, content)
        return mcp_types.ElicitResult(action="accept", content=content)

    def _request(self, params: mcp_types.ElicitRequestParams) -> ElicitationRequest:
        common: dict[str, Any] = {
            "call_id": self.call_id,
            "principal": self._binding.principal,
            "tenant": self._binding.tenant,
            "server": self._server,
            "tool": self._tool,
            "message": params.message,
        }
        if isinstance(params, mcp_types.ElicitRequestURLParams):
            return ElicitationRequest(
                **common, mode="url", url=params.url, elicitation_id=params.elicitation_id
            )
        return ElicitationRequest(**common, mode="form", schema=params.requested_schema)

    async def _note(
        self,
        request: ElicitationRequest,
        action: str,
        answered_by: str,
        content: Mapping[str, Any] | None,
        note: str | None = None,
    ) -> None:
        entry: dict[str, Any] = {"kind": "elicitation", "mode": request.mode, "action": action}
        entry["answered_by"] = answered_by
        if content is not None:
            entry["content_digest"] = "sha256:" + hashlib.sha256(canonical_json(dict(content))).hexdigest()
        if note is not None:
            entry["note"] = note
        await self._record(entry)
