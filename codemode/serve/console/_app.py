"""The console's HTTP handlers: checks first (Host/Origin, operator, CSRF), then one page each.

Mounted by ``codemode serve --transport http --console`` under ``/console``, beside (not
behind) the MCP endpoint's bearer middleware: the console authenticates by itself, since a
browser sends a cookie where an MCP client sends a bearer header.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from urllib.parse import quote, urlencode

import anyio
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from codemode.ledger import StoreLedger
from codemode.serve.console._auth import (
    CSRF_FIELD,
    CSRF_HEADER,
    LOGIN_COOKIE,
    SESSION_COOKIE,
    AuthError,
    Session,
    Sessions,
    check_csrf,
    check_login_nonce,
)
from codemode.serve.console._data import EngineView, FilterError, RunFilter, list_runs, run_detail, servers
from codemode.serve.console._data import verify as verify_ledger
from codemode.serve.console._desk import ApprovalDesk, DeskError
from codemode.serve.console._plans import (
    APPROVAL_TTLS,
    PLAN_STATES,
    approve_plan,
    list_plans,
    plan_detail,
    revoke_plan,
)
from codemode.serve.console._render import SECURITY_HEADERS, page, static
from codemode.serve.console._scope import TenantScope
from codemode.serve.console._skills import approve_skill, list_skills, revoke_skill, skill_page

PREFIX = "/console"
POLL_INTERVAL_MS = 1500
"""How often an open page asks for fresh approvals and runs (plain polling: no stream to hold)."""

Handler = Callable[[Request, Session], Awaitable[Response]]


@dataclass
class Console:
    """Everything a console request needs; :meth:`app` is the ASGI application to mount."""

    ledger: StoreLedger
    engine: EngineView
    desk: ApprovalDesk
    sessions: Sessions
    security: TransportSecuritySettings
    location: str
    """Where the ledger is, as ``ledger verify`` names it."""
    prefix: str = PREFIX

    def app(self) -> Starlette:
        p = self.prefix
        routes = [
            Route(p, self._guard(self.index)),
            Route(f"{p}/", self._guard(self.index)),
            Route(f"{p}/live", self._guard(self.live)),
            Route(p + "/runs/{run_id}", self._guard(self.run)),
            Route(p + "/runs/{run_id}/live", self._guard(self.run_live)),
            Route(f"{p}/servers", self._guard(self.servers)),
            Route(f"{p}/verify", self._guard(self.verify)),
            Route(f"{p}/approvals", self._guard(self.approve, post=True), methods=["POST"]),
            Route(f"{p}/plans", self._guard(self.plans)),
            Route(p + "/plans/{plan_id}", self._guard(self.plan)),
            Route(f"{p}/plans/answer", self._guard(self.answer_plan, post=True), methods=["POST"]),
            Route(f"{p}/skills", self._guard(self.skills)),
            Route(f"{p}/skill", self._guard(self.skill)),
            Route(f"{p}/skills/answer", self._guard(self.answer_skill, post=True), methods=["POST"]),
            Route(f"{p}/logout", self._guard(self.logout, post=True), methods=["POST"]),
            Route(f"{p}/login", self._login, methods=["GET", "POST"]),
            Route(p + "/static/{name}", self._static),
        ]
        return Starlette(routes=routes)

    # -- checks ------------------------------------------------------------------------------

    async def _origin_refusal(self, request: Request) -> Response | None:
        # The MCP endpoint's own DNS-rebinding check: Host must name this server, a browser's
        # Origin must be this server's. Forms post urlencoded, so its JSON-only rule stays off.
        refused = await TransportSecurityMiddleware(self.security).validate_request(request, is_post=False)
        if refused is None:
            return None
        reason = "Host" if refused.status_code == 421 else "Origin"
        message = (
            f"refused: the request's {reason} header does not name this codemode server (a page of "
            "another site, or a DNS-rebinding attempt). Open the console at the address codemode serve "
            "printed; add other browser origins to [serve] allowed_origins if you really need them."
        )
        return self._error(message, refused.status_code)

    def _error(self, message: str, status: int) -> Response:
        return page("error.html", {"message": message, "status": status, "prefix": self.prefix}, status)

    def _guard(self, handler: Handler, *, post: bool = False) -> Callable[[Request], Awaitable[Response]]:
        async def guarded(request: Request) -> Response:
            refused = await self._origin_refusal(request)
            if refused is not None:
                return refused
            try:
                session = self.sessions.current(request.headers, request.cookies)
                if session is None:
                    if post:
                        raise AuthError(401, "log in to the console first (/console/login).")
                    return RedirectResponse(f"{self.prefix}/login", 303, headers=SECURITY_HEADERS)
                if post:
                    form = await request.form()
                    field = form.get(CSRF_FIELD)
                    check_csrf(
                        session,
                        request.headers.get(CSRF_HEADER) or (field if isinstance(field, str) else None),
                    )
                return await handler(request, session)
            except AuthError as exc:
                return self._error(str(exc), exc.status)
            except DeskError as exc:
                return self._error(str(exc), exc.status)
            except FilterError as exc:
                return self._error(f"{exc}. Fix the filter and search again.", 400)

        return guarded

    # -- pages -------------------------------------------------------------------------------

    def _base(self, session: Session) -> dict[str, object]:
        return {
            "prefix": self.prefix,
            "operator": session.operator,
            "csrf_field": CSRF_FIELD,
            "csrf": session.csrf,
            "poll_ms": POLL_INTERVAL_MS,
            "tenants": session.scope.label(),
            "every_tenant": session.scope.every,
        }

    async def _index_context(
        self, request: Request, session: Session, *, with_choices: bool = True
    ) -> dict[str, object]:
        run_filter = RunFilter.parse(request.query_params)
        scope = session.scope
        found = await anyio.to_thread.run_sync(
            partial(list_runs, self.ledger, run_filter, scope, with_choices=with_choices)
        )
        query = run_filter.query()
        pending = await anyio.to_thread.run_sync(self.desk.pending, scope)
        return {
            **self._base(session),
            "filter": query,
            "query": urlencode(query),
            "found": found,
            "pending": pending,
            "waiting": {ticket.run_id for ticket in pending},
        }

    async def index(self, request: Request, session: Session) -> Response:
        context = await self._index_context(request, session)
        answered = request.query_params.get("answered")
        decision = request.query_params.get("decision")
        notice = None
        if answered and decision in ("approved", "denied"):
            notice = f"You {decision} call {answered}."
        return page("index.html", {**context, "notice": notice})

    async def live(self, request: Request, session: Session) -> Response:
        # The poll refreshes the runs only: the pickers are on the page it updates.
        return page("_live.html", await self._index_context(request, session, with_choices=False))

    async def _run_context(self, run_id: str, session: Session) -> dict[str, object]:
        scope = session.scope
        evidence = await anyio.to_thread.run_sync(run_detail, self.ledger, run_id, scope)
        if evidence is None:
            # Another tenant's run gets this very answer: the page must not tell that it exists.
            raise AuthError(404, f"the ledger has no run {run_id!r}: pick a run from the list.")
        pending = [t for t in await anyio.to_thread.run_sync(self.desk.pending, scope) if t.run_id == run_id]
        return {**self._base(session), "evidence": evidence, "run_id": run_id, "pending": pending}

    async def run(self, request: Request, session: Session) -> Response:
        return page("run.html", await self._run_context(request.path_params["run_id"], session))

    async def run_live(self, request: Request, session: Session) -> Response:
        return page("_run_live.html", await self._run_context(request.path_params["run_id"], session))

    async def servers(self, request: Request, session: Session) -> Response:
        _require_every_tenant(session.scope, session.operator, "the servers page")
        return page("servers.html", {**self._base(session), "rows": servers(self.engine)})

    async def verify(self, request: Request, session: Session) -> Response:
        _require_every_tenant(session.scope, session.operator, "ledger verify")
        report = await anyio.to_thread.run_sync(verify_ledger, self.ledger)
        return page("verify.html", {**self._base(session), "report": report, "location": self.location})

    async def plans(self, request: Request, session: Session) -> Response:
        state = request.query_params.get("state", "")
        if state and state not in PLAN_STATES:
            raise AuthError(400, f"state: {state!r} is not one of {', '.join(PLAN_STATES)}.")
        found = await anyio.to_thread.run_sync(list_plans, self.ledger, session.scope, state)
        context = {"plans": found, "state": state, "states": PLAN_STATES}
        return page("plans.html", {**self._base(session), **context})

    async def plan(self, request: Request, session: Session) -> Response:
        plan_id = request.path_params["plan_id"]
        view = await anyio.to_thread.run_sync(plan_detail, self.ledger, plan_id, session.scope)
        if view is None:
            # Another tenant's plan gets this very answer: the page must not tell that it exists.
            raise AuthError(404, f"the ledger has no plan {plan_id!r}: pick a plan from the list.")
        context = {"view": view, "ttls": list(APPROVAL_TTLS), "done": _done(request)}
        return page("plan.html", {**self._base(session), **context})

    async def skills(self, request: Request, session: Session) -> Response:
        tree = self.engine.approved_tree()
        found = await anyio.to_thread.run_sync(list_skills, self.ledger.skills, tree, session.scope)
        return page("skills.html", {**self._base(session), "found": found})

    async def skill(self, request: Request, session: Session) -> Response:
        query = request.query_params
        tenant, name = query.get("tenant", ""), query.get("name", "")
        version = _version(query.get("version", ""))
        tree = self.engine.approved_tree()
        shown = await anyio.to_thread.run_sync(
            partial(skill_page, self.ledger.skills, tree, session.scope, tenant, name, version)
        )
        return page("skill.html", {**self._base(session), "shown": shown, "done": _done(request)})

    # -- changes -----------------------------------------------------------------------------

    async def answer_plan(self, request: Request, session: Session) -> Response:
        form = await request.form()
        plan_id, digest, decision, ttl = (
            str(form.get(k) or "") for k in ("plan_id", "digest", "decision", "ttl")
        )
        if not plan_id or decision not in ("approve", "revoke"):
            raise AuthError(400, "a plan's answer needs plan_id and decision=approve|revoke.")
        scope = session.scope
        if decision == "approve":
            if not digest or ttl not in APPROVAL_TTLS:
                raise AuthError(
                    400, f"an approval needs the plan's digest and ttl={'|'.join(APPROVAL_TTLS)}."
                )
            approve = partial(approve_plan, ttl=APPROVAL_TTLS[ttl], operator=session.operator, scope=scope)
            await anyio.to_thread.run_sync(approve, self.ledger, plan_id, digest)
        else:
            await anyio.to_thread.run_sync(partial(revoke_plan, self.ledger, plan_id, scope=scope))
        done = "approved" if decision == "approve" else "revoked"
        return _see_other(f"{self.prefix}/plans/{quote(plan_id, safe='')}?{urlencode({'done': done})}")

    async def answer_skill(self, request: Request, session: Session) -> Response:
        form = await request.form()
        tenant, name, digest, decision = (
            str(form.get(k) or "") for k in ("tenant", "name", "digest", "decision")
        )
        version = _version(str(form.get("version") or ""))
        if not tenant or not name or decision not in ("approve", "revoke"):
            raise AuthError(400, "a skill's answer needs tenant, name and decision=approve|revoke.")
        books = self.ledger.skills
        if decision == "approve":
            if version is None or not digest:
                raise AuthError(400, "an approval needs the version and its source digest from the page.")
            tree, policy = self.engine.approved_tree(), self.engine.config.policy
            approve = partial(
                approve_skill,
                tenant=tenant,
                name=name,
                version=version,
                digest=digest,
                operator=session.operator,
            )
            done = await anyio.to_thread.run_sync(approve, books, tree, policy, session.scope)
            version = done.version
        else:
            revoke = partial(
                revoke_skill, tenant=tenant, name=name, version=version, operator=session.operator
            )
            await anyio.to_thread.run_sync(revoke, books, session.scope)
        query = {"tenant": tenant, "name": name, "done": "approved" if decision == "approve" else "revoked"}
        if version is not None:
            query["version"] = str(version)
        return _see_other(f"{self.prefix}/skill?{urlencode(query)}")

    async def approve(self, request: Request, session: Session) -> Response:
        form = await request.form()
        call_id, digest, decision = (str(form.get(k) or "") for k in ("call_id", "args_digest", "decision"))
        if decision not in ("approve", "deny") or not call_id or not digest:
            raise AuthError(400, "an answer needs call_id, args_digest and decision=approve|deny.")
        answer = partial(
            self.desk.answer,
            call_id,
            digest,
            approve=decision == "approve",
            operator=session.operator,
            scope=session.scope,
        )
        ticket = await anyio.to_thread.run_sync(answer)
        done = {
            "answered": ticket.request.call_id,
            "decision": "approved" if decision == "approve" else "denied",
        }
        back = str(form.get("back") or "")
        # Only a path of this console, never a URL a form could point elsewhere.
        target = back if back.startswith(f"{self.prefix}/runs/") else self.prefix
        separator = "&" if "?" in target else "?"
        return RedirectResponse(f"{target}{separator}{urlencode(done)}", 303, headers=SECURITY_HEADERS)

    async def logout(self, request: Request, session: Session) -> Response:
        self.sessions.logout(session)
        response = RedirectResponse(f"{self.prefix}/login", 303, headers=SECURITY_HEADERS)
        response.delete_cookie(SESSION_COOKIE, path=self.prefix)
        return response

    async def _login(self, request: Request) -> Response:
        refused = await self._origin_refusal(request)
        if refused is not None:
            return refused
        if request.method == "GET":
            nonce = secrets.token_urlsafe(24)
            response = page("login.html", {"prefix": self.prefix, "nonce": nonce})
            response.set_cookie(LOGIN_COOKIE, nonce, path=self.prefix, httponly=True, samesite="strict")
            return response
        form = await request.form()
        token, nonce = (form.get("token"), form.get("nonce"))
        try:
            check_login_nonce(request.cookies.get(LOGIN_COOKIE), nonce if isinstance(nonce, str) else None)
            session = self.sessions.login(token if isinstance(token, str) else "")
        except AuthError as exc:
            return self._error(str(exc), exc.status)
        response = RedirectResponse(self.prefix, 303, headers=SECURITY_HEADERS)
        response.set_cookie(SESSION_COOKIE, session.key, path=self.prefix, httponly=True, samesite="strict")
        response.delete_cookie(LOGIN_COOKIE, path=self.prefix)
        return response

    async def _static(self, request: Request) -> Response:
        return static(request.path_params["name"])


def _see_other(target: str) -> Response:
    return RedirectResponse(target, 303, headers=SECURITY_HEADERS)


def _done(request: Request) -> str:
    # Only the two fixed words: a notice never repeats text a link could carry.
    done = request.query_params.get("done", "")
    return done if done in ("approved", "revoked") else ""


def _version(text: str) -> int | None:
    text = text.strip()
    if not text:
        return None
    if not (text.isascii() and text.isdigit()) or len(text) > 9:
        raise AuthError(400, f"version: {text!r} is not a version number; pick one from the skill's page.")
    return int(text)


def _require_every_tenant(scope: TenantScope, operator: str, what: str) -> None:
    # Host-wide pages: verify reports on every tenant's events (counts, problems, where they
    # are); the servers page shows servers' errors and stderr, which may quote any tenant's data.
    if not scope.every:
        raise AuthError(
            403,
            f"{what} covers every tenant, and {operator} sees only {scope.label()} here. "
            'It needs an operator token with console_tenants = ["*"] in its [serve.tokens.<name>] '
            "table (or, for the ledger, codemode ledger verify where the ledger is).",
        )
