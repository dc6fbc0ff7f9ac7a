"""Running ``codemode serve`` over stdio or Streamable HTTP."""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import logging
import os
import socket
import sys
from collections.abc import Generator, Mapping
from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskGroup
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from codemode._metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from codemode._metrics import Metrics
from codemode._metrics import enable as enable_metrics
from codemode.broker import Approver
from codemode.config import EVERY_TENANT, OPERATOR, Config, MissingSecretError, TokenGrant, resolve_references
from codemode.engine import CodeMode
from codemode.errors import ConfigError, PolicyError
from codemode.serve._app import CodemodeServer, Identity, TokenMap
from codemode.serve._drain import Drain, RequestsInFlight, serve_until_stopped
from codemode.serve._health import HealthEndpoints, Readiness
from codemode.serve._input_relay import InputRelay
from codemode.serve._sessions import LedgerSessionBindings, SessionGuard, hide_session_ids
from codemode.serve._watch import ConfigWatch
from codemode.serve.console._desk import ApprovalDesk

if TYPE_CHECKING:
    from codemode.ledger import StoreLedger

log = logging.getLogger("codemode.serve")

HOUSEKEEPING_INTERVAL_S = 5.0
PENDING_RUN_TTL_S = 900.0
"""A run whose question the client has not come back to answer for this long is cancelled."""
METRICS_PATH = "/metrics"
CONSOLE_PATH = "/console"
CONSOLE_MAX_BODY = 64 * 1024
SHUTDOWN_GRACE_S = 5
"""How long open HTTP requests may take to finish once the server is told to stop."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def token_map(config: Config, environ: Mapping[str, str]) -> TokenMap:
    grants: dict[str, Identity] = {}
    names: dict[str, str] = {}
    for name, grant in config.serve.tokens.items():
        try:
            token = resolve_references(grant.token, environ)
        except MissingSecretError as exc:
            raise ConfigError(
                config.source,
                [(f"serve.tokens.{name}.token", f"${{{exc.variable}}} is not set in the environment")],
            ) from None
        if len(token) < 16:
            raise ConfigError(config.source, [(f"serve.tokens.{name}.token", "use at least 16 characters")])
        if token in grants:
            # One would silently stand for the other: a CI bot's token could carry the operator role.
            twin = next(other for other, t in names.items() if t == token)
            raise ConfigError(
                config.source,
                [(f"serve.tokens.{name}.token", f"the same token as serve.tokens.{twin}: give each its own")],
            )
        names[name] = token
        scope = console_scope(config, name, grant)
        grants[token] = Identity(grant.principal, grant.tenant, frozenset(grant.roles), scope)
    return TokenMap(grants)


def console_scope(config: Config, name: str, grant: TokenGrant) -> frozenset[str] | None:
    """The tenants whose runs this token's holder sees in the console; None: every tenant.

    Not an operator: none. ``console_tenants`` unset: the one tenant this token's own runs get.
    """
    if OPERATOR not in grant.roles:
        return frozenset()
    if grant.console_tenants is None:
        return frozenset({token_tenant(config, name, grant)})
    if grant.console_tenants == [EVERY_TENANT]:
        return None
    return frozenset(grant.console_tenants)


def token_tenant(config: Config, name: str, grant: TokenGrant) -> str:
    """The tenant this token's runs are bound to. The engine binds every run with
    ``policy.identity(principal, tenant)`` (the token's tenant, or else the principal's default
    tenant by the policy); the same call here, so the console's scope cannot drift from it."""
    try:
        return config.policy.identity(grant.principal, grant.tenant)[1]
    except PolicyError as exc:
        # Deny mode and a principal the policy does not know (an operator who only uses the
        # console, say): the tenant named on the token is still the one its runs would get.
        if grant.tenant:
            return grant.tenant
        # Without one it has no tenant of its own, and a guess could show the wrong tenant.
        raise ConfigError(
            config.source,
            [
                (
                    f"serve.tokens.{name}",
                    f"{exc}, so this operator token has no tenant of its own for the console: set "
                    'tenant = "<tenant>" or console_tenants = ["<tenant>", ...] (["*"] for every '
                    f"tenant), or add [policy.principals.{grant.principal}]",
                )
            ],
        ) from None


async def respond(
    send: Send, status: int, body: bytes, content_type: str, *headers: tuple[bytes, bytes]
) -> None:
    """A whole plain HTTP response, for the little this server answers outside MCP."""
    fields = [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": [*fields, *headers]})
    await send({"type": "http.response.body", "body": body})


class BearerAuth:
    """ASGI middleware: every HTTP request must carry a configured bearer token.

    The token authenticates the caller to codemode only; it is never forwarded to the MCP
    servers codemode talks to (those get the headers configured for them, nothing else).
    """

    def __init__(self, app: ASGIApp, tokens: TokenMap) -> None:
        self.app = app
        self.tokens = tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
            if self.tokens.lookup(headers.get("authorization")) is None:
                body = b'{"error": "missing or wrong bearer token"}'
                challenge = (b"www-authenticate", b'Bearer realm="codemode"')
                await respond(send, 401, body, "application/json", challenge)
                return
        await self.app(scope, receive, send)


class MetricsEndpoint:
    """ASGI middleware: ``GET <path>`` answers with the Prometheus metrics; the rest passes. The
    MCP endpoint's Host and Origin checks apply: a DNS-rebinding page must not read them."""

    def __init__(
        self, app: ASGIApp, metrics: Metrics, path: str, security: TransportSecuritySettings
    ) -> None:
        self.app, self.metrics, self.path = app, metrics, path
        self.security = TransportSecurityMiddleware(security)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") != self.path:
            await self.app(scope, receive, send)
            return
        refused = await self.security.validate_request(Request(scope, receive), is_post=False)
        if refused is not None:
            await refused(scope, receive, send)
            return
        allowed = scope.get("method") in ("GET", "HEAD")
        body = self.metrics.render() if allowed else b"use GET\n"
        await respond(send, 200 if allowed else 405, body, METRICS_CONTENT_TYPE)


class PathSplit:
    """ASGI: requests under ``prefix`` go to ``branch``; everything else (lifespan too) to ``app``.

    The console sits beside the bearer middleware, not behind it: it authenticates by itself
    (a browser sends a session cookie, not a bearer header) and only lets operators in.
    """

    def __init__(self, app: ASGIApp, branch: ASGIApp, prefix: str) -> None:
        self.app, self.branch, self.prefix = app, branch, prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = str(scope.get("path", ""))
        if scope["type"] == "http" and (path == self.prefix or path.startswith(self.prefix + "/")):
            await self.branch(scope, receive, send)
        else:
            await self.app(scope, receive, send)


def transport_security(config: Config, host: str, port: int) -> TransportSecuritySettings:
    # DNS-rebinding protection: the Host header must name this server, and browsers may call it
    # only from this server's own origin or configured origins (MCP clients send no Origin at
    # all). A rebinding page always carries its own, foreign origin; this server's own origin
    # (same scheme, loopback name, same port) is same-origin by definition. The console's pages
    # are served from that origin, so its own forms and scripts pass and a foreign page's do not.
    # Bound to every interface, the server has no name of its own: allowed_hosts gives them.
    if is_loopback(host):
        hosts = {host, "127.0.0.1", "localhost", "::1"}
    else:
        hosts = set[str]() if _unspecified(host) else {host}
    named = {_bracketed(h) for h in hosts}
    own_origins = {f"http://{h}:{port}" for h in named}
    extra = [h if _has_port(h) else f"{_bracketed(h)}:*" for h in config.serve.allowed_hosts]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=sorted({f"{h}:*" for h in named} | set(extra)),
        allowed_origins=sorted(own_origins) + list(config.serve.allowed_origins),
    )


def _unspecified(host: str) -> bool:
    """``0.0.0.0`` or ``::``: every interface, a name no client sends."""
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


def _bracketed(host: str) -> str:
    """An IPv6 address as a Host header writes it."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _has_port(host: str) -> bool:
    return host.rsplit("]", 1)[-1].count(":") == 1 if host.startswith("[") else host.count(":") == 1


def require_operator_token(config: Config, tokens: TokenMap) -> None:
    if not any(identity.is_operator for identity in tokens.identities()):
        raise ConfigError(
            config.source,
            [
                (
                    "serve.tokens",
                    "--console needs at least one token whose [serve.tokens.<name>] table has "
                    'roles = ["operator"]: only operators may open the console',
                )
            ],
        )


async def _housekeeping(engine: CodeMode, server: CodemodeServer) -> None:
    while True:
        await anyio.sleep(HOUSEKEEPING_INTERVAL_S)
        await engine.expire_idle_sessions()
        server.pending.expire(PENDING_RUN_TTL_S)


def _watch_config(tg: TaskGroup, engine: CodeMode, config: Config) -> None:
    """Roots edited in the config file apply while serving (see :mod:`codemode.serve._watch`)."""
    watch = ConfigWatch.of(engine, config)
    if watch is not None:
        tg.start_soon(watch.run)


def _default_identity(config: Config) -> Identity:
    return Identity(config.serve.principal, config.serve.tenant)


async def serve_stdio(config: Config, *, approver: Approver | None = None) -> None:
    async with CodeMode(config, approver=approver) as engine, anyio.create_task_group() as tg:
        server = CodemodeServer(engine, default=_default_identity(config))
        server.attach(tg)
        tg.start_soon(_housekeeping, engine, server)
        _watch_config(tg, engine, config)
        await server.mcp.run_stdio_async()
        tg.cancel_scope.cancel()


async def serve_http(
    config: Config,
    *,
    host: str | None = None,
    port: int | None = None,
    environ: Mapping[str, str] | None = None,
    ready: anyio.Event | None = None,
    metrics: bool = False,
    console: bool = False,
    stop: anyio.Event | None = None,
) -> None:
    """Serve until cancelled, or until ``stop`` is set: then it drains (see :func:`serve_until_stopped`)
    and returns. Prints ``READY <url>`` on stderr once listening.

    With ``metrics``, ``GET /metrics`` answers in Prometheus text format (behind the same bearer
    tokens, Host check and loopback default as the MCP endpoint). With ``console``, the operator
    console answers under ``/console`` (operators only; see :mod:`codemode.serve.console`), and
    runs' approval requests wait there for an operator as well as going to the client.
    ``GET /healthz`` and ``GET /readyz`` answer probes (see :mod:`codemode.serve._health`).

    With bearer tokens, each MCP session is bound to the principal and tenant that opened it, in
    the ledger (see :mod:`codemode.serve._sessions`)."""
    import uvicorn

    hide_session_ids()

    host = host or config.serve.host
    port = config.serve.port if port is None else port
    tokens = token_map(config, os.environ if environ is None else environ)
    if not is_loopback(host) and not tokens:
        raise ConfigError(
            config.source,
            [
                (
                    "serve.tokens",
                    f"binding to {host} (not loopback) needs at least one bearer token in [serve.tokens]",
                )
            ],
        )
    if _unspecified(host) and not config.serve.allowed_hosts:
        raise ConfigError(
            config.source,
            [
                (
                    "serve.allowed_hosts",
                    f"binding to {host} (every interface) needs the names clients reach this server "
                    'by, e.g. allowed_hosts = ["mcp.internal:8765"]: requests must name one in Host',
                )
            ],
        )
    if console:
        require_operator_token(config, tokens)
    async with contextlib.AsyncExitStack() as stack:
        engine = await stack.enter_async_context(CodeMode(config))
        tg = await stack.enter_async_context(anyio.create_task_group())
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        bound_port = sock.getsockname()[1]
        # A ledger connection of serve's own: the session bindings, the console's approval desk,
        # and the input rounds stateless clients' retries are relayed through between replicas.
        ledger = await _serve_ledger(stack, config, environ)
        # [serve] replica, else host:port with the port really bound (not --port 0), so replicas
        # on one host differ.
        replica = config.serve.model_copy(update={"port": bound_port}).replica_name
        relay = InputRelay(ledger.input_rounds, replica)
        # The desk's tickets are in the ledger: every replica's console lists and answers them.
        desk = ApprovalDesk(ledger.approval_tickets, replica=replica) if console else None
        server = CodemodeServer(
            engine,
            default=_default_identity(config),
            tokens=tokens,
            desk=desk,
            relay=relay,
            request_state_key=_request_state_key(ledger),
        )
        server.attach(tg)
        tg.start_soon(_housekeeping, engine, server)
        _watch_config(tg, engine, config)
        url = f"http://{_bracketed(host)}:{bound_port}{config.serve.path}"
        security = transport_security(config, host, bound_port)
        app: ASGIApp = server.mcp.streamable_http_app(
            streamable_http_path=config.serve.path, transport_security=security, host=host
        )
        if tokens:  # sessions are bound only to token holders
            app = SessionGuard(app, tokens, LedgerSessionBindings(ledger))
        if metrics:
            exposed = enable_metrics()
            exposed.warm_pool_ready.set_function(lambda: engine.warm_sandboxes)
            app = MetricsEndpoint(app, exposed, METRICS_PATH, security)
        if tokens:
            app = BearerAuth(app, tokens)  # /metrics needs a token like /mcp
        if desk is not None:
            console_app = _console_app(ledger, engine, desk, tokens, security)
            app = PathSplit(app, console_app, CONSOLE_PATH)
        pool_size = config.sandbox.pool_size
        readiness = Readiness()
        tg.start_soon(readiness.watch_warm, lambda: engine.warm_sandboxes >= pool_size)
        requests = RequestsInFlight(app)
        app = HealthEndpoints(requests, readiness)  # outermost: probes carry no token (see _health)
        console_url = url.removesuffix(config.serve.path) + CONSOLE_PATH

        class _Server(uvicorn.Server):
            async def startup(self, sockets: list[socket.socket] | None = None) -> None:
                await super().startup(sockets=sockets)
                print(f"READY {url}", file=sys.stderr, flush=True)
                if desk is not None:
                    print(
                        f"console: {console_url} (log in with an operator token)", file=sys.stderr, flush=True
                    )
                if ready is not None:
                    ready.set()

            @contextlib.contextmanager
            def capture_signals(self) -> Generator[None]:
                # Stopping is the caller's job: cancel serve_http (the CLI does on SIGINT, SIGTERM
                # and SIGHUP). uvicorn's own capture would re-raise the signal after shutting down.
                yield

        uv = _Server(
            uvicorn.Config(
                app, log_level="warning", lifespan="on", timeout_graceful_shutdown=SHUTDOWN_GRACE_S
            )
        )
        drain = Drain(stop or anyio.Event(), readiness, server, requests, config.serve.drain_s)
        await serve_until_stopped(uv, sock, drain)
        tg.cancel_scope.cancel()


async def _serve_ledger(
    stack: contextlib.AsyncExitStack, config: Config, environ: Mapping[str, str] | None
) -> StoreLedger:
    """A ledger connection of serve's own, beside the engine's (which has created the ledger by
    now), for the session bindings and the console. Never ``recover`` on it: that would settle
    the live engine's in-flight calls as if their process had died."""
    from codemode.ledger import open_ledger

    location = config.ledger_location(os.environ if environ is None else environ)
    ledger = await anyio.to_thread.run_sync(lambda: open_ledger(location, create=False, recover=False))
    stack.callback(ledger.close)
    return ledger


def _request_state_key(ledger: StoreLedger) -> bytes | None:
    """The key that seals input rounds' ``requestState``, the same on every replica of one ledger,
    so a retry may reach any of them. Derived from the ledger's id, which clients never see; the
    seal is a second wall: what answers a run is the run's token inside the state, which only the
    client and the holding process know (the ledger keeps a digest), and only for its caller."""
    with ledger.store.transaction(write=False) as tx:
        ledger_id = tx.ledger_id()
    if not ledger_id:  # a ledger without its id (damaged): a key of this process only
        return None
    return hashlib.sha256(b"codemode/serve/request-state\x00" + ledger_id.encode()).digest()


def _console_app(
    ledger: StoreLedger,
    engine: CodeMode,
    desk: ApprovalDesk,
    tokens: TokenMap,
    security: TransportSecuritySettings,
) -> ASGIApp:
    from mcp.server.transport_security import RequestBodyLimitMiddleware

    from codemode.serve.console._app import Console
    from codemode.serve.console._auth import Sessions

    console = Console(ledger, engine, desk, Sessions(tokens), security, ledger.location, CONSOLE_PATH)
    # Its forms are a few short fields: a large body is never a console request.
    return RequestBodyLimitMiddleware(console.app(), CONSOLE_MAX_BODY)
