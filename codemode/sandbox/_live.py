"""A started, authenticated sandbox and how one program runs in it.

:func:`start_sandbox` prepares the channel, lets the backend start the sandbox, and waits until
its runtime has connected and said hello: the state a warm-pool entry is kept in. :meth:`execute`
binds a run (binding, module provider, call handler) to the channel, sends ``run`` and turns
whatever happens (a reply, a wall-time expiry, a watchdog kill, a dead sandbox, a protocol
violation) into a :class:`RunOutcome`.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import time
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskGroup

from codemode._metrics import active as active_metrics
from codemode._run_usage import CapHit, RunUsage
from codemode.calls import CallHandler, ModuleProvider, RunBinding
from codemode.config import SandboxConfig
from codemode.errors import ChannelError
from codemode.sandbox import _wire as wire
from codemode.sandbox._backend import Backend, SandboxInstance, Termination
from codemode.sandbox._channel import HostChannel, RemoteError, RunContext
from codemode.sandbox._memory_limit import MiB
from codemode.sandbox._outcome import (
    BackendName,
    RunError,
    RunOutcome,
    RuntimeReply,
    WorkspaceReturn,
    cap_text,
    decode_result,
    parse_reply,
    parse_snapshot,
)
from codemode.sandbox._program import Program, WorkspaceFiles
from codemode.sandbox._state import StateDir
from codemode.sandbox._usage_meter import Measured

__all__ = ["LiveSandbox", "start_sandbox"]

log = logging.getLogger("codemode.sandbox")

SNAPSHOT_TIMEOUT_S = 0.5


class LiveSandbox:
    def __init__(
        self,
        backend: BackendName,
        instance: SandboxInstance,
        channel: HostChannel,
        config: SandboxConfig,
        root_dir: Path,
    ) -> None:
        self.backend: BackendName = backend
        self.instance = instance
        self.channel = channel
        self._config = config
        self._root_dir = root_dir
        self._destroyed = False
        self.dead_reason: str | None = None
        """Set once a run ended the sandbox (timeout, oom …): it must not be used again."""

    @property
    def sandbox_id(self) -> str:
        return self.instance.sandbox_id

    @property
    def usable(self) -> bool:
        return not self._destroyed and self.dead_reason is None and not self.channel.closed

    async def destroy(self) -> None:
        if self._destroyed:
            return
        self._destroyed = True
        with anyio.CancelScope(shield=True):
            await self.channel.aclose()
            await self.instance.destroy()
            await anyio.to_thread.run_sync(StateDir.remove, self._root_dir)

    async def execute(
        self, program: Program, *, binding: RunBinding, modules: ModuleProvider, handler: CallHandler
    ) -> RunOutcome:
        """Run ``program`` for ``binding``: its imports go to ``modules``, its calls to ``handler``."""
        config = self._config
        wall = program.wall_time_s if program.wall_time_s is not None else config.wall_time_s
        context = RunContext(binding=binding, modules=modules, handler=handler)
        traffic_before = self.channel.traffic
        self.instance.meter.begin()
        started = time.perf_counter()
        reply: Any = None
        failure: ChannelError | None = None
        verdict: Termination | None = None
        timed_out = False
        self.channel.bind(context)
        try:
            async with anyio.create_task_group() as tg:

                async def watchdog() -> None:
                    nonlocal verdict
                    verdict = await self.instance.watch()
                    tg.cancel_scope.cancel()

                tg.start_soon(watchdog)
                with anyio.move_on_after(wall) as deadline:
                    try:
                        params: wire.RunParams = {
                            "run_id": binding.run_id,
                            "code": program.code,
                            "output_bytes": config.output_bytes,
                            "result_bytes": config.result_bytes,
                            "bindings": dict(program.bindings),
                            "fresh": program.fresh,
                        }
                        if program.workspace is not None:
                            params["workspace"] = workspace_params(program.workspace)
                        reply = await self.channel.request(wire.RUN, dict(params))
                    except ChannelError as exc:
                        failure = exc
                timed_out = deadline.cancelled_caught
                tg.cancel_scope.cancel()
        finally:
            self.channel.unbind()
        # The run's duration; killing a sandbox afterwards is not the program's time.
        elapsed_ms = round((time.perf_counter() - started) * 1000, 3)
        # Read now, while the sandbox and its cgroup still exist (a limit kills it below).
        measured = self.instance.meter.end()

        def outcome(cap: CapHit | None = None, **fields: Any) -> RunOutcome:
            error: RunError | None = fields.get("error")
            if cap is None and error is not None and error.kind == "oom":
                cap = "memory"  # the program's own MemoryError at the address-space limit
            return RunOutcome(
                run_id=binding.run_id,
                backend=self.backend,
                sandbox_id=self.sandbox_id,
                calls=context.calls,
                duration_ms=elapsed_ms,
                usage=self._usage(measured, traffic_before, cap or measured.cap),
                **fields,
            )

        if timed_out or verdict is not None:
            partial = await self._snapshot() if timed_out else {}
            await self._kill(verdict.message if verdict else "wall-time limit")
            if verdict is None:
                verdict = Termination(
                    "timeout",
                    "Timeout",
                    f"the program exceeded the wall-time limit of {wall:g} s and was killed",
                    "wall_time",
                )
            return outcome(verdict.cap, status="error", error=_error(verdict), **partial)
        if failure is not None or reply is None:
            error, cap = await self._failure_error(failure)
            return outcome(cap, status="error", error=error)
        try:
            parsed = parse_reply(reply)
            workspace = None if parsed.workspace is None else parsed.workspace.decoded()
        except ChannelError as exc:
            await self._kill(str(exc))
            return outcome(
                status="error", error=RunError(kind="channel", type="ChannelError", message=str(exc))
            )
        fields = self._fields(parsed)
        if program.workspace is not None:
            # Absent from the reply of a sandbox that should have sent it: nothing may be kept.
            fields["workspace"] = workspace or WorkspaceReturn(
                error="the sandbox did not return the workspace"
            )
        if parsed.leftover:
            # They would go on acting - calls, results - during the next run of this sandbox
            # (a session's, a batch worker's), under that run's identity and budget.
            left = f"the program left {parsed.leftover} thread(s) or process(es) running"
            await self._kill(left)
            fields["stderr"] += (
                f"codemode: {left} after it ended; its sandbox was discarded (a session starts afresh). "
                "Join threads before the end.\n"
            )
        return outcome(**fields)

    def _usage(self, measured: Measured, traffic_before: tuple[int, int], cap: CapHit | None) -> RunUsage:
        sent, received = self.channel.traffic
        peak = measured.peak_bytes
        if peak is None and cap == "memory" and measured.source == "cgroup":
            # The kernel kills at the limit, and the dead sandbox's cgroup may be gone already.
            peak = self._config.memory_mb * MiB
        return RunUsage(
            cpu_s=None if measured.cpu_s is None else round(measured.cpu_s, 4),
            peak_mb=None if peak is None else round(peak / MiB, 2),
            channel_in_bytes=sent - traffic_before[0],
            channel_out_bytes=received - traffic_before[1],
            cap_hit=cap,
            source=measured.source,
        )

    def _fields(self, reply: RuntimeReply) -> dict[str, Any]:
        config = self._config
        fields: dict[str, Any] = {
            "status": reply.status,
            "result_kind": reply.result_kind,
            **reply.capped(config.output_bytes),
        }
        if reply.error is not None:
            error = reply.error
            kind = "exception"
            message = error.message
            if error.type == "MemoryError":
                kind = "oom"
                limit = config.memory_mb
                message = f"the program ran out of memory (limit {limit} MiB): MemoryError {message}".rstrip()
            fields["error"] = RunError(kind=kind, type=error.type, message=message, traceback=error.traceback)
            fields["result_kind"] = "stdout"
            return fields
        if reply.result_kind == "json" and reply.result_json is not None:
            value, shown, truncated = decode_result(reply.result_json, config.result_bytes)
            fields.update(result=value, result_repr=shown, result_truncated=truncated)
            if shown is not None and not truncated:
                fields["result_kind"] = "repr"
        elif reply.result_kind in ("json", "repr") and reply.result_repr is not None:
            shown, cut = cap_text(reply.result_repr, config.result_bytes)
            fields.update(result_repr=shown, result_truncated=reply.result_truncated or cut)
        else:
            fields["result_kind"] = "stdout"
        return fields

    async def _snapshot(self) -> dict[str, Any]:
        """Partial output of a program that is still running (answered by whichever runtime thread
        reads the channel: the background reader while the program computes)."""
        with anyio.move_on_after(SNAPSHOT_TIMEOUT_S), contextlib.suppress(ChannelError):
            snap = parse_snapshot(await self.channel.request(wire.SNAPSHOT, {}))
            return snap.capped(self._config.output_bytes)
        return {}

    async def _kill(self, reason: str) -> None:
        self.dead_reason = reason
        await self.destroy()

    async def _failure_error(self, failure: ChannelError | None) -> tuple[RunError, CapHit | None]:
        """Why the run failed, and the cap that ended it if one did."""
        if isinstance(failure, RemoteError):
            await self._kill(str(failure))
            message = f"the sandbox runtime failed: {failure}"
            return RunError(kind="sandbox", type="SandboxError", message=message), None
        if self.channel.violated:
            reason = self.channel.close_reason or "protocol violation"
            await self._kill(reason)
            message = f"the sandbox broke the channel protocol: {reason}"
            return RunError(kind="channel", type="ChannelError", message=message), None
        # The connection ended: the sandbox died (or closed it). Ask the backend why.
        self.dead_reason = str(failure) if failure else "channel closed"
        termination = await self.instance.termination()
        await self.destroy()
        return _error(termination), termination.cap


def workspace_params(workspace: WorkspaceFiles) -> wire.WorkspaceParams:
    return {
        "files": {name: base64.b64encode(data).decode("ascii") for name, data in workspace.files.items()},
        "quota_bytes": workspace.quota_bytes,
        "quota_files": workspace.quota_files,
    }


def _error(termination: Termination) -> RunError:
    return RunError(kind=termination.kind, type=termination.type, message=termination.message)


async def start_sandbox(backend: Backend, config: SandboxConfig, tg: TaskGroup) -> LiveSandbox:
    """Start one sandbox and wait until its runtime is connected and authenticated.

    The channel's serve loop runs in ``tg`` (the manager's task group) for the sandbox's lifetime.
    """
    started = time.perf_counter()
    launch = backend.new_launch()
    channel = HostChannel(
        launch.channel_dir,
        max_frame_bytes=config.max_frame_bytes,
        max_inflight=config.max_inflight_calls,
        owner=launch.owner,
    )
    instance: SandboxInstance | None = None
    try:
        await channel.listen()
        instance = await backend.spawn(launch)
        await channel.accept(config.start_timeout_s, gave_up=instance.exit_reason)
    except BaseException:
        with anyio.CancelScope(shield=True):
            await channel.aclose()
            if instance is not None:
                await instance.destroy()
            await anyio.to_thread.run_sync(StateDir.remove, launch.root)
        raise
    tg.start_soon(channel.serve)
    metrics = active_metrics()
    if metrics is not None:
        metrics.sandbox_start_seconds.labels(backend.name).observe(time.perf_counter() - started)
    return LiveSandbox(backend.name, instance, channel, config, launch.root)
