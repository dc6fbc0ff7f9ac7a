"""The runtime's main loop: connect to the host, then answer its ``run`` requests one at a time."""

from __future__ import annotations

import os
import sys
from typing import Any, cast

from . import _client
from . import _wire as wire
from ._capture import Session, snapshot
from ._fresh import Baseline, scratch_dirs
from ._imports import ServersFinder
from ._program import run, without_output
from ._workspace import configure as configure_workspace


def serve() -> None:
    """Connect (the channel directory is ``$CODEMODE_CHANNEL_DIR``, else ``/run/codemode``) and serve."""
    channel = _client.connect(os.environ.get(wire.CHANNEL_DIR_ENV, wire.CHANNEL_DIR))
    _client.install(channel)
    workspace = os.environ.get(wire.WORKSPACE_DIR_ENV)
    scratch = scratch_dirs()
    # Nothing of the launch configuration is left for the program to find.
    for name in [key for key in os.environ if key.startswith("CODEMODE_")]:
        del os.environ[name]
    configure_workspace(workspace)  # after the clean-up: the one CODEMODE_ name programs see
    # Programs import this package as ``codemode`` too (the name the docs and tracebacks use).
    sys.modules["codemode"] = sys.modules[__package__ or "codemode_runtime"]
    sys.meta_path.insert(0, ServersFinder())
    # Taken last: what a fresh run goes back to is the runtime ready to run its first program.
    answer(channel, Session(Baseline(scratch)))


def answer(channel: _client.Channel, session: Session) -> None:
    """Answer the host's ``run`` requests on ``channel`` until it ends (a ``None`` in the inbox).

    Shared by :func:`serve` and the in-process test runtime (``_embedded``).
    """
    channel.snapshot = lambda: snapshot(session)
    runtime_pid = os.getpid()
    while True:
        channel.between_runs()  # the host's next request is read at once, not after the reader's grace
        message = channel.inbox.get()
        if message is None:
            return
        request_id = message.get("id")
        if message.get("method") != wire.RUN:
            channel.send(wire.error_response(request_id, wire.METHOD_NOT_FOUND, "unknown method"))
            continue
        params = message.get("params")
        try:
            reply = run(
                session, cast(dict[str, Any], params) if isinstance(params, dict) else {}, runtime_pid
            )
        except Exception as exc:
            channel.send(wire.error_response(request_id, wire.INTERNAL_ERROR, str(exc)))
            continue
        try:
            channel.send(wire.response(request_id, reply))
        except ValueError:
            channel.send(wire.response(request_id, without_output(reply)))
