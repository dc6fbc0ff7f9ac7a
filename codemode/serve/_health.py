"""``GET /healthz`` and ``GET /readyz``: what a load balancer or an orchestrator asks a replica.

Both answer without a bearer token and whatever the Host header says: a probe carries no token,
and Kubernetes' sends the pod's address as Host, which ``allowed_hosts`` rightly does not name.
That is safe because they tell nothing: a status word, no server name, no count, no error.

- ``/healthz``: the process serves HTTP (liveness). Always 200 while it does.
- ``/readyz``: send it work. 503 until the engine's servers have had their first connection
  attempt (the engine is entered before the listener opens) and the warm pool first holds its
  configured size; 503 again once the replica is draining. Readiness is latched: a pool emptied
  by a burst of runs does not take a busy replica out of rotation, which would only move the
  burst onto the others.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
from starlette.types import ASGIApp, Receive, Scope, Send

HEALTH_PATH = "/healthz"
READY_PATH = "/readyz"


class Readiness:
    """Whether this replica should get work: from the moment its warm pool first filled until it drains."""

    def __init__(self) -> None:
        self.warm = False
        self.draining = False

    def ready(self) -> bool:
        return self.warm and not self.draining

    def waiting_for(self) -> str:
        return "draining" if self.draining else "warm pool"

    async def watch_warm(self, full: Callable[[], bool], poll_s: float = 0.05) -> None:
        """Latch :attr:`warm` once ``full()`` says the pool holds its configured size. Watched from
        the start, not at each probe: a pool filled and emptied between two probes counts."""
        while not full():  # noqa: ASYNC110 - the pool offers a count to read, not an event to await
            await anyio.sleep(poll_s)
        self.warm = True


class HealthEndpoints:
    """ASGI middleware: answers the two probe paths itself; every other request passes to ``app``."""

    def __init__(self, app: ASGIApp, readiness: Readiness) -> None:
        self.app, self.readiness = app, readiness

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path")
        if scope["type"] != "http" or path not in (HEALTH_PATH, READY_PATH):
            await self.app(scope, receive, send)
            return
        method = scope.get("method")
        if method not in ("GET", "HEAD"):
            status, body = 405, b'{"error": "use GET"}'
        elif path == HEALTH_PATH:
            status, body = 200, b'{"status": "ok"}'
        elif self.readiness.ready():
            status, body = 200, b'{"status": "ready"}'
        else:
            waiting = self.readiness.waiting_for().encode()
            status, body = 503, b'{"status": "not ready", "waiting_for": "' + waiting + b'"}'
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"cache-control", b"no-store"),
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": b"" if method == "HEAD" else body})
