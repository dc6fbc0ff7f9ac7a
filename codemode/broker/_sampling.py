"""A server's request for a model completion during one call: filtered, budgeted, relayed, recorded.

In order:

1. refused outright: a request with tools (the host declares no ``sampling.tools``), or a run
   without a :class:`~codemode.broker._inputs.Sampler` (nobody's model to ask; the program may
   never answer);
2. the request passes the result filter the broker applies to tool results
   (:class:`~codemode.broker._results.ResultFilter`, with the run's PII vault): secrets redacted
   and PII replaced by the run's placeholders in the messages, the system prompt and the
   metadata; images and audio must be of a type the policy allows, as in a tool result. The
   server's ``includeContext`` is dropped: the client's own context is not the server's to read;
3. the run's sampling budget: the prompt's tokens plus the request's ``maxTokens`` are reserved
   under the run's lock (concurrent calls cannot overshoot), or the request is refused before
   anyone is asked;
4. the run's sampler answers;
5. the reply passes the same filter (a model's text is not a program's argument: placeholders
   in it are not mapped back), its tokens are counted and the reservation is released;
6. the ledger gets an entry against the call: who answered, digests of the request as relayed
   and of the reply, token counts and filter counts. Never the text itself.

Tokens are counted with :func:`codemode._tokens.count_tokens` (tiktoken's ``cl100k_base``,
offline), the tokenizer behind the broker's ``result_tokens``. Text and tool blocks count;
images and audio do not (their cost depends on the model). The client's model may count
differently, which is why the whole ``maxTokens`` is reserved up front.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import mcp_types

from codemode._tokens import count_tokens
from codemode.broker._inputs import SamplingAnswer, SamplingRequest
from codemode.broker._media import media_problem
from codemode.broker._results import FilterReport, ResultFilter
from codemode.broker._run import RunState
from codemode.catalog import canonical_json
from codemode.config import PolicyConfig

log = logging.getLogger(__name__)

NO_SAMPLER = (
    "no model is there to answer the server's sampling request: the run has no sampler, "
    "and the program may not answer"
)
TOOLS_REFUSED = "sampling requests with tools are not relayed (the host declares no sampling.tools)"
_MEDIA = ("image", "audio")
_MODEL_NAME_CHARS = 120

Record = Callable[[Mapping[str, Any]], Awaitable[None]]


class SamplingRefused(Exception):
    """The request cannot be relayed (the message says why; the server is told)."""


def _digest(value: Any) -> str:
    return "sha256:" + hashlib.sha256(canonical_json(value)).hexdigest()


def _blocks(content: Any) -> list[Any]:
    return list(content) if isinstance(content, list) else [content]  # pyright: ignore[reportUnknownArgumentType]


def content_tokens(content: Any) -> int:
    """Tokens of a message's content (text and tool blocks; images and audio count nothing)."""
    total = 0
    for block in _blocks(content):
        if isinstance(block, mcp_types.TextContent):
            total += count_tokens(block.text)
        elif not isinstance(block, mcp_types.ImageContent | mcp_types.AudioContent):
            total += count_tokens(json.dumps(block.model_dump(mode="json", by_alias=True, exclude_none=True)))
    return total


def prompt_tokens(params: mcp_types.CreateMessageRequestParams) -> int:
    system = count_tokens(params.system_prompt) if params.system_prompt else 0
    return system + sum(content_tokens(message.content) for message in params.messages)


@dataclass(frozen=True)
class SamplingRelay:
    """The sampling part of one call's input handling (the broker makes one per sent call)."""

    run: RunState
    policy: PolicyConfig

    def limit(self) -> int:
        caps = [self.policy.budget.sampling_tokens_per_run, self.run.limits.sampling_tokens]
        return min(cap for cap in caps if cap is not None)

    async def relay(
        self, request: SamplingRequest, record: Record
    ) -> mcp_types.CreateMessageResult | mcp_types.ErrorData:
        params = request.params
        if params.tools or params.tool_choice is not None:
            return await self._refuse(record, params, TOOLS_REFUSED)
        sampler = self.run.sampler
        if sampler is None:
            return await self._refuse(record, params, NO_SAMPLER)
        report = FilterReport()
        result_filter = ResultFilter(self.policy.results, self.run.vault)
        try:
            filtered = self._filtered_request(params, result_filter, report)
        except SamplingRefused as exc:
            return await self._refuse(record, params, str(exc))
        prompt = prompt_tokens(filtered)
        reserve = prompt + filtered.max_tokens
        run = self.run
        with run.lock:
            used, limit = run.sampling_tokens + run.sampling_reserved, self.limit()
            fits = used + reserve <= limit
            if fits:
                run.sampling_reserved += reserve
            if report.injection_suspected:
                run.flags.add(
                    f"instruction-like text in a sampling request of {request.server}/{request.tool}"
                )
        if not fits:
            why = (
                f"sampling budget: this request may take {reserve:,} tokens ({prompt:,} of prompt and "
                f"maxTokens {filtered.max_tokens:,}), and {used:,} of the run's {limit:,} are used or "
                "reserved ([policy.budget] sampling_tokens_per_run)"
            )
            return await self._refuse(record, filtered, why, prompt_tokens=prompt)
        try:
            answer = await sampler.sample(dataclasses.replace(request, params=filtered))
        except Exception as exc:  # a sampler's failure is no completion, not a lost call
            log.warning("the sampler failed on a request of %s", request.call_id, exc_info=True)
            answer = SamplingAnswer(answered_by="host", refusal=f"the sampler failed: {type(exc).__name__}")
        finally:
            with run.lock:
                run.sampling_reserved -= reserve
        if answer.result is None:
            why = answer.refusal or "the sampler gave no completion"
            return await self._refuse(record, filtered, why, answer.answered_by, prompt_tokens=prompt)
        return await self._reply(request, filtered, answer, result_filter, report, prompt, record)

    async def _reply(
        self,
        request: SamplingRequest,
        filtered: mcp_types.CreateMessageRequestParams,
        answer: SamplingAnswer,
        result_filter: ResultFilter,
        report: FilterReport,
        prompt: int,
        record: Record,
    ) -> mcp_types.CreateMessageResult:
        result = answer.result
        assert result is not None
        reply_tokens = content_tokens(result.content)
        reply_report = FilterReport()
        reply = self._filtered_reply(result, result_filter, reply_report)
        run = self.run
        with run.lock:
            run.sampling_tokens += prompt + reply_tokens
            if reply_report.injection_suspected:
                run.flags.add(
                    f"instruction-like text in a sampling reply for {request.server}/{request.tool}"
                )
        entry: dict[str, Any] = {
            "kind": "sampling",
            "action": "accept",
            "answered_by": answer.answered_by,
            "model": result.model[:_MODEL_NAME_CHARS],
            "request_digest": _digest(filtered.model_dump(mode="json", by_alias=True, exclude_none=True)),
            "content_digest": _digest(reply.model_dump(mode="json", by_alias=True, exclude_none=True)),
            "max_tokens": filtered.max_tokens,
            "prompt_tokens": prompt,
            "reply_tokens": reply_tokens,
            "filtered": {
                "secrets_redacted": report.secrets_redacted + reply_report.secrets_redacted,
                "pii_tokenized": report.pii_tokenized + reply_report.pii_tokenized,
            },
        }
        await record(entry)
        return reply

    async def _refuse(
        self,
        record: Record,
        params: mcp_types.CreateMessageRequestParams,
        why: str,
        answered_by: str = "host",
        *,
        prompt_tokens: int | None = None,
    ) -> mcp_types.ErrorData:
        entry: dict[str, Any] = {
            "kind": "sampling",
            "action": "refused",
            "answered_by": answered_by,
            "max_tokens": params.max_tokens,
            "note": why,
        }
        if prompt_tokens is not None:
            entry["prompt_tokens"] = prompt_tokens
        await record(entry)
        return mcp_types.ErrorData(code=mcp_types.INVALID_REQUEST, message=why)

    # -- the result filter, both ways ------------------------------------------------------------

    def _content(self, content: Any, result_filter: ResultFilter, report: FilterReport) -> Any:
        """One message's content through the filter: text and tool blocks have their strings
        filtered; images and audio must be allowed by the policy, and only their data and type
        pass unfiltered, as in a tool result."""
        results = result_filter.policy
        out: list[Any] = []
        for block in _blocks(content):
            data: dict[str, Any] = block.model_dump(mode="json", by_alias=True, exclude_none=True)
            kind = str(data.get("type", "unknown"))
            if kind in _MEDIA:
                problem = media_problem(data, results.mime_types)
                if kind not in results.content_types or problem is not None:
                    raise SamplingRefused(
                        f"the request carries {problem or f'content of type {kind!r}'}, which the policy "
                        "does not allow"
                    )
            out.append(result_filter.block(data, report))
        return out if isinstance(content, list) else out[0]

    def _filtered_request(
        self, params: mcp_types.CreateMessageRequestParams, result_filter: ResultFilter, report: FilterReport
    ) -> mcp_types.CreateMessageRequestParams:
        messages = [
            mcp_types.SamplingMessage.model_validate(
                {"role": message.role, "content": self._content(message.content, result_filter, report)}
            )
            for message in params.messages
        ]
        system = result_filter.text(params.system_prompt, report) if params.system_prompt else None
        metadata = result_filter.value(params.metadata, report) if params.metadata is not None else None
        return params.model_copy(
            update={
                "messages": messages,
                "system_prompt": system,
                "metadata": metadata,
                "include_context": None,
                "meta": None,  # the server's _meta was for its hop to the host, not the next one
            }
        )

    def _filtered_reply(
        self, result: mcp_types.CreateMessageResult, result_filter: ResultFilter, report: FilterReport
    ) -> mcp_types.CreateMessageResult:
        try:
            content = self._content(result.content, result_filter, report)
        except SamplingRefused:
            note = {"type": "text", "text": "[content of the reply removed by policy]"}
            content = note
        return mcp_types.CreateMessageResult.model_validate(
            {
                **result.model_dump(mode="json", by_alias=True, exclude_none=True, exclude={"meta"}),
                "content": content,
            }
        )
