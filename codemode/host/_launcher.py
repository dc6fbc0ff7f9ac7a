"""Run an MCP server and take its whole process group down when it exits.

Usage (internal): ``python -I _launcher.py -- COMMAND [ARGS...]``

The SDK starts a stdio server as the leader of a new session and, on shutdown, closes its
stdin and waits. A server that exits cleanly there can still leave children behind (``npx``
starting ``node``, a server spawning workers): nobody kills them, and they become orphans.

This launcher sits between: it runs the real server as its child in the same process group,
passing stdin, stdout and stderr straight through (no relaying, no added latency), waits for
it, and then kills every process left in the group. When the SDK escalates to killing the group
itself, the launcher goes with it. Standard library only: it runs before anything else.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "--" or len(argv) < 2:
        print("usage: _launcher.py -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    command = argv[1:]
    try:
        child = subprocess.Popen(command)  # inherits fds 0-2 and our process group
    except FileNotFoundError:
        print(f"codemode: command {command[0]!r} was not found", file=sys.stderr)
        return 127
    except PermissionError:
        print(f"codemode: command {command[0]!r} is not executable", file=sys.stderr)
        return 126

    def forward(signum: int, _frame: object) -> None:
        child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    code = child.wait()
    # The server is gone: whatever it left in our group goes too (we are the group leader only
    # when started with a new session, which the SDK does; otherwise leave the group alone).
    if os.getpgrp() == os.getpid():
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        os.killpg(os.getpgrp(), signal.SIGKILL)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
