"""The MCP call itself, once the gates allowed it and the ledger holds its record.

Under the run's concurrency cap; the pin is checked again once a slot is free (waiting for one
may have taken a while, and a revoked or changed tool must not be sent); the call carries its
inputs (answers to the server's questions are recorded against ``call_id``), the trace context
and its time limit, and is timed for ``/metrics``. The host's errors pass through unchanged:
the broker records what each means.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import mcp_types

from codemode._metrics import active as active_metrics
from codemode._tracing import downstream_meta
from codemode.broker._backend import ToolBackend
from codemode.broker._call_inputs import CallInputs
from codemode.broker._call_inputs import Record as RecordInput
from codemode.broker._facts import Call
from codemode.broker.gates import ToolGate
from codemode.calls import SendOptions
from codemode.config import PolicyConfig
from codemode.errors import ServerRefusedError


class SentCall(NamedTuple):
    call_id: str
    record_input: RecordInput
    """Where the server's questions and their answers during the call are recorded."""
    time_limit_s: float | None
    """A long-running (task) call's limit; None: the server's ``call_timeout``."""


async def ask_server(
    backend: ToolBackend, pinned: ToolGate, policy: PolicyConfig, call: Call, sent: SentCall
) -> mcp_types.CallToolResult:
    """Send ``call`` to its server and return the answer. Raises the host's errors."""
    run = call.run
    assert run.concurrency is not None
    async with run.concurrency:
        if (changed := await pinned.changed(call)) is not None:  # the slot may have taken a while
            raise ServerRefusedError(call.server, call.name, f"{changed}; nothing was sent")
        with run.lock:
            run.in_flight += 1
            run.peak_in_flight = max(run.peak_in_flight, run.in_flight)
        try:
            sent_at = time.perf_counter()
            inputs = CallInputs(
                call_id=sent.call_id,
                binding=call.binding,
                server=call.server,
                tool=call.name,
                elicitor=run.elicitor,
                record=sent.record_input,
                run=run,
                policy=policy,
            )
            options = SendOptions(
                meta=downstream_meta({"io.codemode/trace": call.binding.trace_id}),
                inputs=inputs,
                time_limit_s=sent.time_limit_s,
                on_progress=run.on_call_progress,
            )
            result = await backend.call_tool(call.server, call.name, dict(call.arguments), options)
            metrics = active_metrics()
            if metrics is not None:
                metrics.mcp_seconds.labels(call.server).observe(time.perf_counter() - sent_at)
            return result
        finally:
            with run.lock:
                run.in_flight -= 1
