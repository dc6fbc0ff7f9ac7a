"""Run a command's async body so that SIGTERM and SIGHUP end it as cleanly as Ctrl-C does.

Python's default for SIGTERM and SIGHUP is to die on the spot: no ``finally``, no ``__aexit__``,
so sandbox containers and MCP server processes would outlive the command until the next start's
orphan sweep. Here SIGINT, SIGTERM and SIGHUP cancel the running body instead: every async
context manager on the way out runs (sandboxes destroyed, servers stopped, the ledger closed),
then the process exits with the conventional status 128 + the signal's number.

While the body cleans up the handlers stay installed, so a second SIGTERM or a SIGHUP (a closed
terminal) cannot cut the cleanup short. A second Ctrl-C does: someone at the keyboard who presses
it twice wants out now.

``codemode serve`` over HTTP drains instead (:func:`run_draining`): the first signal lets the runs
in flight finish while new ones are turned away, a second one stops it the way above.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar, TypeVarTuple

if TYPE_CHECKING:
    import anyio
    from anyio.abc import TaskStatus

__all__ = ["SIGNALS", "run_draining", "run_until_signalled"]

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

SIGNALS: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)


def _say(text: str) -> None:
    # After SIGHUP the terminal may be gone: a failed write must not stop the cleanup.
    with contextlib.suppress(OSError, ValueError):
        print(text, file=sys.stderr, flush=True)


def run_until_signalled(fn: Callable[[*Ts], Awaitable[T]], *args: *Ts) -> T:
    """``anyio.run(fn, *args)``, but SIGINT/SIGTERM/SIGHUP cancel ``fn`` and exit 128 + signo.

    ``fn``'s own exceptions propagate unchanged (not wrapped in an exception group). Signal
    handlers can only be installed on the main thread; elsewhere (a test runner's worker thread)
    this is plain ``anyio.run``.
    """
    return _run(lambda _stop: fn(*args), drains=False)


def run_draining(fn: Callable[[anyio.Event], Awaitable[T]]) -> T:
    """Like :func:`run_until_signalled`, for a body that can stop gracefully (``codemode serve``
    over HTTP): the first signal sets the ``stop`` event it was given, and the body finishes its
    work in flight and returns; a second signal cancels it (its cleanup still runs). The exit
    status is 128 + the first signal's number either way."""
    return _run(fn, drains=True)


def _run(fn: Callable[[anyio.Event], Awaitable[T]], *, drains: bool) -> T:
    import anyio  # here, not at module level: the CLI imports this module on every start

    if threading.current_thread() is not threading.main_thread():
        return anyio.run(_with_stop_event, fn)

    received: list[int] = []
    results: list[T] = []
    errors: list[BaseException] = []

    # A signal that was ignored when the command started stays ignored: `nohup codemode serve`
    # must survive a hangup, and a background job of a non-interactive shell ignores SIGINT.
    handled = [signum for signum in SIGNALS if signal.getsignal(signum) is not signal.SIG_IGN]

    async def watch(body: anyio.CancelScope, stop: anyio.Event, *, task_status: TaskStatus[None]) -> None:
        with anyio.open_signal_receiver(*handled) as signals:
            task_status.started()
            async for signum in signals:
                name = signal.Signals(signum).name
                if not received:
                    received.append(signum)
                    if drains:
                        _say(f"codemode: {name} received; finishing the runs in flight (again: stop now)…")
                        stop.set()
                    else:
                        _say(f"codemode: {name} received; stopping sandboxes and servers…")
                        body.cancel()
                elif drains and not body.cancel_called:
                    _say(f"codemode: {name} received again; stopping sandboxes and servers now…")
                    body.cancel()
                elif signum == signal.SIGINT:
                    _say("codemode: interrupted again; exiting without finishing the cleanup")
                    os._exit(128 + signum)
                else:
                    _say(f"codemode: {name} received again; still cleaning up")

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            body = anyio.CancelScope()
            stop = anyio.Event()
            # The handlers are in place before the body starts anything worth cleaning up.
            await tg.start(watch, body, stop)
            try:
                with body:
                    try:
                        results.append(await fn(stop))
                    except anyio.get_cancelled_exc_class():
                        raise
                    except BaseException as exc:  # re-raised below, outside the task group
                        errors.append(exc)
            finally:
                tg.cancel_scope.cancel()

    anyio.run(main)
    if received:
        sys.exit(128 + received[0])
    if errors:
        raise errors[0]
    return results[0]


async def _with_stop_event(fn: Callable[[anyio.Event], Awaitable[T]]) -> T:
    import anyio

    return await fn(anyio.Event())  # never set: without signal handlers nothing stops it gracefully
