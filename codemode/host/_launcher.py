"""Run an MCP server, take its whole process group down when it exits, and stop it when the host
is gone.

Usage (internal): ``python -I _launcher.py [--lifeline FD] -- COMMAND [ARGS...]``

The host starts a stdio server as the leader of a new session and, on shutdown, closes its
stdin and waits. A server that exits cleanly there can still leave children behind (``npx``
starting ``node``, a server spawning workers): nobody kills them, and they become orphans.

This launcher sits between: it runs the real server as its child in the same process group,
passing stdin, stdout and stderr straight through (no relaying, no added latency), waits for
it, and then kills every process left in the group. When the host escalates to killing the group
itself, the launcher goes with it.

A host that is killed (SIGKILL, the OOM killer) cannot do any of that, and a server that ignores
its closed stdin would run on for ever. So the host hands each launcher the read end of a pipe
whose write end only the host holds and never writes (``--lifeline``): when the host is gone,
however it died, the read returns end-of-file. The launcher then stops the server as the host
would have: time to exit by itself, SIGTERM to the group, then SIGKILL. A pipe, not
``PR_SET_PDEATHSIG``: that fires when the *thread* that started the process ends, not the host.

Standard library only: it runs before anything else.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time

CLOSE_GRACE_S = 2.0
"""Time a server has to exit by itself once its stdin is closed (the spec's first step)."""
TERM_GRACE_S = 2.0
"""Time between SIGTERM and SIGKILL to the server's process group."""

USAGE = "usage: _launcher.py [--lifeline FD] -- COMMAND [ARGS...]"


def main(argv: list[str]) -> int:
    lifeline: int | None = None
    if argv[:1] == ["--lifeline"] and len(argv) >= 2 and argv[1].isdigit():
        lifeline, argv = int(argv[1]), argv[2:]
    if not argv or argv[0] != "--" or len(argv) < 2:
        print(USAGE, file=sys.stderr)
        return 2
    command = argv[1:]
    try:
        child = subprocess.Popen(command)  # inherits fds 0-2 and our process group, not the lifeline
    except FileNotFoundError:
        print(f"codemode: command {command[0]!r} was not found", file=sys.stderr)
        return 127
    except PermissionError:
        print(f"codemode: command {command[0]!r} is not executable", file=sys.stderr)
        return 126

    _let_go_of_the_pipes()

    def forward(signum: int, _frame: object) -> None:
        child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    if lifeline is not None:
        threading.Thread(target=_stop_when_host_is_gone, args=(lifeline, child), daemon=True).start()
    code = child.wait()
    # The server is gone: whatever it left in our group goes too (we are the group leader only
    # when started with a new session, which the host does; otherwise leave the group alone).
    if _leads_group():
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        os.killpg(os.getpgrp(), signal.SIGKILL)
    return code if code >= 0 else 128 - code


def _let_go_of_the_pipes() -> None:
    """Leave the server the only holder of its stdin and stdout: the host must see it close
    either (a broken pipe, an end of file) as it would without a launcher in between."""
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)


def _stop_when_host_is_gone(lifeline: int, child: subprocess.Popen[bytes]) -> None:
    """Wait for the lifeline's end-of-file, then stop the server (the main thread, back from
    waiting for it, ends the rest as soon as it exits)."""
    try:
        while os.read(lifeline, 1):
            pass  # nothing is ever written; only the end matters
    except OSError:
        return  # no lifeline to watch: a host that dies leaves this to the next one's sweep
    time.sleep(CLOSE_GRACE_S)  # its stdin closed with the host: a well-behaved server exits now
    _signal_all(child, signal.SIGTERM)
    time.sleep(TERM_GRACE_S)
    _signal_all(child, signal.SIGKILL)


def _signal_all(child: subprocess.Popen[bytes], signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if _leads_group():
            os.killpg(os.getpgrp(), signum)
        else:
            os.kill(child.pid, signum)


def _leads_group() -> bool:
    return os.getpgrp() == os.getpid()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
