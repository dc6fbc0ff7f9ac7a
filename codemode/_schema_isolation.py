"""Checking an instance against an untrusted schema without ever holding up the event loop.

:func:`check_off_loop` runs :meth:`SchemaCheck.here` in a worker thread, where every regular
expression is searched by RE2 (linear, and the GIL released meanwhile). When a search cannot
run there (:class:`NeedsIsolation`: a look-around, a back reference, a lone surrogate, more RE2
work than a fraction of a second), or the schema says so from the start, the whole check is
repeated in a separate Python process (:mod:`codemode._schema_worker`), which may backtrack
for as long as it likes: it is killed at the time limit, and the instance is refused.

The limit counts from the moment that process is ready (its start-up, a few tenths of a second
on a busy machine, has a limit of its own), so a legitimate check is not refused because the
machine was slow to start Python.
"""

from __future__ import annotations

import json
import subprocess
import sys
from functools import partial
from typing import Any, Final

import anyio
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from codemode._json_schema import Finding, NeedsIsolation, Outcome, SchemaCheck, Unchecked

__all__ = ["CHECK_LIMIT_S", "STARTUP_TIMEOUT_S", "check_off_loop"]

CHECK_LIMIT_S: Final = 2.0
"""How long checking one instance against an untrusted schema may take, for the argument gate
and the output check alike: then the instance is refused."""
STARTUP_TIMEOUT_S: Final = 30.0
"""How long the separate process may take to start (Python and its imports)."""
_MAX_REPLY: Final = 65_536
_READY: Final = b"ready\n"


async def check_off_loop(check: SchemaCheck, instance: Any, limit_s: float) -> Outcome:
    """Check ``instance`` against ``check``'s schema in a worker thread, or in a separate
    process when a regular expression must not run in this one; ``limit_s`` seconds at most
    for the check itself (then an :class:`Unchecked` ``timeout``)."""
    if check.isolated is None:
        try:
            with anyio.move_on_after(limit_s):
                return await anyio.to_thread.run_sync(partial(check.here, instance), abandon_on_cancel=True)
            return Unchecked("timeout", f"{limit_s:g} s")
        except NeedsIsolation:
            pass
    return await _in_separate_process(check.schema, instance, limit_s)


def _command() -> list[str]:
    # -P: the current directory is not put on sys.path (nothing there can stand in for codemode).
    return [sys.executable, "-P", "-m", "codemode._schema_worker"]


async def _in_separate_process(schema: dict[str, Any], instance: Any, limit_s: float) -> Outcome:
    try:
        payload = json.dumps({"schema": schema, "instance": instance}).encode() + b"\n"
    except (TypeError, ValueError) as exc:
        return Unchecked("error", type(exc).__name__)
    try:
        # Its stderr is not read: a pipe that fills up would stall it until the time limit.
        process = await anyio.open_process(_command(), stderr=subprocess.DEVNULL)
    except OSError as exc:
        return Unchecked("error", f"the checking process could not start ({exc})")
    try:
        return await _exchange(process, payload, limit_s)
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.wait()
            await process.aclose()


async def _exchange(process: Process, payload: bytes, limit_s: float) -> Outcome:
    assert process.stdin is not None
    assert process.stdout is not None
    replies = BufferedByteReceiveStream(process.stdout)
    try:
        with anyio.fail_after(STARTUP_TIMEOUT_S):
            ready = await replies.receive_exactly(len(_READY))
        if ready != _READY:
            return Unchecked("error", "the checking process did not start")
        with anyio.move_on_after(limit_s):
            await process.stdin.send(payload)
            await process.stdin.aclose()
            return _outcome(await replies.receive_until(b"\n", _MAX_REPLY))
        return Unchecked("timeout", f"{limit_s:g} s")
    except TimeoutError:
        return Unchecked("error", f"the checking process did not start within {STARTUP_TIMEOUT_S:g} s")
    except (anyio.EndOfStream, anyio.IncompleteRead, anyio.DelimiterNotFound, anyio.BrokenResourceError):
        return Unchecked("error", "the checking process ended without an answer")


def _outcome(line: bytes) -> Outcome:
    try:
        reply = json.loads(line)
        if reply is None:
            return None
        if "message" in reply:
            return Finding(str(reply["message"]), tuple(reply["path"]))
        kind = reply["kind"]
        if kind in ("timeout", "unresolvable", "error"):
            return Unchecked(kind, str(reply["detail"]))
    except (ValueError, TypeError, KeyError):
        pass
    return Unchecked("error", "the checking process gave an answer that is not one")
