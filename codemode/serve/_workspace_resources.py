"""The caller's workspace files as MCP resources: ``resources/list`` and ``resources/read``.

A file of the caller's own workspace is ``workspace:///<path>``; one of a ``run_code`` session's
workspace adds ``?session=<id>``. Whose workspace is decided here, from the caller's identity
(the bearer token over HTTP, the configured principal on stdio) exactly as the engine binds a
run: no URI can name another principal's or tenant's workspace. So the agent, or a person
through the client, fetches a large output without pushing it through the model's context, and
a ``run_code`` result links the files its run wrote (:func:`resource_links`).

A file is a program's output like its final result, so it leaves through the same filter: text
is read through the run's result filter (secrets and personal data per ``[policy.results]``), a
name that the filter would change is not listed, and a binary file that may hold a secret is
refused rather than sent (a filter cannot rewrite bytes it does not understand).
"""

from __future__ import annotations

import base64
import mimetypes
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

import mcp_types
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError

from codemode._redaction import might_hold_secrets
from codemode.broker import FilterReport, PiiVault, ResultFilter
from codemode.config import PolicyConfig
from codemode.engine import shown_names
from codemode.errors import PolicyError
from codemode.workspace import WorkspaceError, WorkspaceKey, WorkspaceStore

__all__ = ["SCHEME", "WorkspaceMCPServer", "resource_links", "resource_uri"]

SCHEME = "workspace"

Caller = Callable[[Context], tuple[str | None, str | None]]
"""The (principal, tenant) of a request, as its token or the server's default names them."""


def resource_uri(name: str, session: str | None = None) -> str:
    """``workspace:///<name>`` (percent-encoded), with ``?session=<id>`` for a session's file."""
    uri = f"{SCHEME}:///{quote(name)}"
    return uri if session is None else f"{uri}?session={quote(session, safe='')}"


def resource_links(names: tuple[str, ...], session: str | None) -> list[mcp_types.ResourceLink]:
    """Links to the workspace files a run wrote, for its ``run_code`` answer."""
    return [
        mcp_types.ResourceLink(
            type="resource_link", uri=resource_uri(name, session), name=name, mime_type=_mime(name)
        )
        for name in names
    ]


def _parse(uri: str) -> tuple[str, str | None]:
    """(file name, session) of a workspace URI; MCPError for anything else."""
    parts = urlsplit(uri)
    if parts.scheme != SCHEME or parts.netloc or not parts.path.startswith("/") or parts.fragment:
        raise _invalid(f"not a workspace resource: {uri!r} (expected workspace:///<path>)", uri)
    query = parse_qs(parts.query, keep_blank_values=True)
    if set(query) - {"session"} or len(query.get("session", [])) > 1:
        raise _invalid(f"a workspace URI takes only ?session=<id>: {uri!r}", uri)
    sessions = query.get("session")
    return unquote(parts.path[1:]), sessions[0] if sessions else None


def _invalid(message: str, uri: str) -> MCPError:
    return MCPError(code=mcp_types.INVALID_PARAMS, message=message, data={"uri": uri})


def _mime(name: str) -> str:
    return mimetypes.guess_type(name)[0] or "application/octet-stream"


class WorkspaceMCPServer(MCPServer):
    """An MCP server whose resources are the calling principal's workspace files.

    ``store()`` is the engine's workspace store (None: runs get no workspace, nothing is listed)
    and ``caller(ctx)`` who asks; ``policy`` binds a caller to a tenant as the engine does."""

    def __init__(
        self,
        *args: Any,
        store: Callable[[], WorkspaceStore | None],
        caller: Caller,
        policy: Callable[[], PolicyConfig],
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._workspace_store = store
        self._caller = caller
        self._policy = policy

    def _filter(self) -> ResultFilter:
        return ResultFilter(self._policy().results, PiiVault())

    def _owner(self, ctx: Any, params: Any) -> tuple[WorkspaceStore, str, str] | None:
        store = self._workspace_store()
        if store is None:
            return None
        context = Context(request_context=ctx, mcp_server=self, input_params=params)
        try:
            principal, tenant = self._caller(context)
            who, where = self._policy().identity(principal, tenant)
        except (PermissionError, PolicyError):
            return None
        return store, who, where

    async def _handle_list_resources(
        self, ctx: Any, params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListResourcesResult:
        listed = await super()._handle_list_resources(ctx, params)
        owner = self._owner(ctx, params)
        if owner is None:
            return listed
        store, who, where = owner
        resources = list(listed.resources)
        for info in store.workspaces(tenant=where, principal=who):
            if (info.key.tenant, info.key.principal) != (where, who) or info.missing:
                continue  # another's, or its files are not on this replica's storage
            listing = store.listing(info.key)
            for name in shown_names(sorted(listing), self._policy().results):
                size = listing[name]
                uri = resource_uri(name, info.key.session)
                resources.append(mcp_types.Resource(uri=uri, name=name, mime_type=_mime(name), size=size))
        return mcp_types.ListResourcesResult(resources=resources)

    async def _handle_read_resource(
        self, ctx: Any, params: mcp_types.ReadResourceRequestParams
    ) -> mcp_types.ReadResourceResult | mcp_types.InputRequiredResult:
        uri = str(params.uri)
        if not uri.startswith(f"{SCHEME}:"):
            return await super()._handle_read_resource(ctx, params)
        name, session = _parse(uri)
        owner = self._owner(ctx, params)
        if owner is None:
            raise _invalid("no workspace is available to this caller", uri)
        store, who, where = owner
        try:
            data = store.read(WorkspaceKey(tenant=where, principal=who, session=session), name)
        except WorkspaceError as exc:
            raise _invalid(str(exc), uri) from None
        mime = _mime(name)
        try:
            text = self._filter().text(data.decode("utf-8"), FilterReport())
        except UnicodeDecodeError:
            if might_hold_secrets(data.decode("latin-1")):
                raise _invalid(
                    "the file may hold a secret, and binary content cannot be filtered", uri
                ) from None
            blob = base64.b64encode(data).decode("ascii")
            return mcp_types.ReadResourceResult(
                contents=[mcp_types.BlobResourceContents(uri=uri, blob=blob, mime_type=mime)]
            )
        return mcp_types.ReadResourceResult(
            contents=[mcp_types.TextResourceContents(uri=uri, text=text, mime_type=mime)]
        )
