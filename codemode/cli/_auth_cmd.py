"""``codemode auth login|status|logout``: sign in to remote servers that use OAuth."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import click
from mcp.shared.auth import OAuthClientInformationFull
from rich.table import Table

from codemode.auth import (
    BrowserSignIn,
    FileCredentialStore,
    HeadlessSignIn,
    HostAuth,
    Revocation,
    SignIn,
    StoredCredentials,
    preregistered_client,
    revoke_tokens,
)
from codemode.cli._common import (
    config_option,
    fail,
    handle_errors,
    json_option,
    load,
    print_json,
    progress,
    warn,
)
from codemode.cli._common import stdout as out
from codemode.cli._signals import run_until_signalled
from codemode.config import Config, HttpServerConfig, resolve_references
from codemode.host import ConnectionState, McpHost, ServerStatus, network_policy


@click.group()
def auth() -> None:
    """Sign in to remote servers that use OAuth, and manage the stored credentials.

    \b
    A server signs in with OAuth when its table has an [servers.NAME.oauth] section:
      [servers.tracker]
      url = "https://mcp.tracker.example/mcp"
      [servers.tracker.oauth]          # every key optional
    A machine client (grant = "client_credentials" with a secret or a private key,
    grant = "jwt_bearer" with the platform's workload token, or grant = "identity_assertion"
    with the person's single sign-on) needs no login: every command signs in by itself.
    Credentials are kept on this machine only ($CODEMODE_CREDENTIALS, by default
    ~/.local/share/codemode/credentials.json, mode 0600) and never reach the sandbox.
    """


def _oauth_server(config: Config, name: str) -> HttpServerConfig:
    server = config.servers.get(name)
    if server is None:
        known = ", ".join(sorted(config.servers)) or "none"
        fail(f"no server named {name!r} in {config.source}", hint=f"configured servers: {known}")
    if not isinstance(server, HttpServerConfig) or server.oauth is None:
        fail(
            f"server {name!r} does not sign in with OAuth",
            hint=f"add a [servers.{name}.oauth] table (an http server only) to {config.source}",
        )
    return server


def _resource(server: HttpServerConfig) -> str:
    """The store's key for ``server``: its URL as the host resolves it."""
    return resolve_references(server.url, os.environ)


async def _sign_in(config: Config, name: str, auth: HostAuth) -> ServerStatus:
    async with McpHost(config, auth=auth) as host:
        return next(s for s in host.statuses() if s.name == name)


@auth.command()
@click.argument("server")
@click.option(
    "--headless",
    is_flag=True,
    help="Follow the authorization server's redirects here instead of opening a browser. Works only "
    "where the server approves without a person (CI, test servers).",
)
@config_option
@json_option
@handle_errors
def login(server: str, headless: bool, config_path: Path | None, as_json: bool) -> None:
    """Sign in to SERVER and keep its tokens in the credential store.

    Opens the authorization page in your browser and waits for it to send you back to
    http://127.0.0.1:PORT/callback (PORT: [servers.SERVER.oauth] redirect_port). Then connects
    once with the new token and lists the server's tools, to prove that it works.
    """
    config = load(config_path)
    settings = _oauth_server(config, server).model_copy(update={"reconnect": False})
    only = config.model_copy(update={"servers": {server: settings}}).with_origin(
        config.source, config.base_dir
    )
    sign_in: SignIn = HeadlessSignIn(network_policy(settings)) if headless else BrowserSignIn()
    store = FileCredentialStore()
    resource = _resource(settings)
    previous = store.get(resource)
    if previous is not None and previous.tokens is not None:
        # A login signs in afresh (for example to grant a scope a call was refused for); the old
        # tokens come back if it fails.
        store.put(resource, previous.model_copy(update={"tokens": None, "obtained_at": None}))
    host_auth = HostAuth(store=store, sign_in=lambda _name, _config: sign_in)
    with progress(f"signing in to {server}…", not as_json and not headless and sys.stderr.isatty()):
        status = run_until_signalled(_sign_in, only, server, host_auth)
    if status.state is not ConnectionState.READY:
        if previous is not None:
            store.put(resource, previous)
        fail(f"signing in to {server} failed: {status.error}", hint="check the URL, then retry")
    record = store.get(resource)
    summary = _describe(server, settings, record)
    if as_json:
        print_json({"signed_in": True, "tools": status.tool_count, **summary})
    else:
        out.print(
            f"signed in to {server} ({summary['issuer'] or 'issuer unknown'}); "
            f"{status.tool_count} tools; credentials in {store.path}",
            highlight=False,
        )


def _describe(name: str, server: HttpServerConfig, record: StoredCredentials | None) -> dict[str, Any]:
    """What ``status`` shows of a record: never a token, a code or a secret."""
    record = record or StoredCredentials(server=name)
    tokens: dict[str, Any] = record.tokens or {}
    expires_at = record.expires_at()
    return {
        "server": name,
        "url": server.url,
        "signed_in": bool(tokens.get("access_token")),
        "issuer": record.issuer,
        "client_id": (record.client or {}).get("client_id") or (server.oauth and server.oauth.client_id),
        "scope": tokens.get("scope"),
        "refreshable": bool(tokens.get("refresh_token")),
        "expires_in_s": None if expires_at is None else round(expires_at - time.time()),
    }


@auth.command()
@config_option
@json_option
@handle_errors
def status(config_path: Path | None, as_json: bool) -> None:
    """Show which OAuth servers are signed in, with issuer, scope and expiry (never tokens)."""
    config = load(config_path)
    store = FileCredentialStore()
    records = store.records()
    rows = [
        _describe(name, server, records.get(_resource(server)))
        for name, server in sorted(config.servers.items())
        if isinstance(server, HttpServerConfig) and server.oauth is not None
    ]
    if as_json:
        print_json({"store": str(store.path), "servers": rows})
        return
    if not rows:
        out.print(f"no server in {config.source} signs in with OAuth", highlight=False)
        return
    table = Table(show_edge=False, header_style="bold")
    for column in ("server", "signed in", "issuer", "scope", "expires", "refresh"):
        table.add_column(column)
    for row in rows:
        expires = row["expires_in_s"]
        table.add_row(
            row["server"],
            "[green]yes[/]" if row["signed_in"] else "[red]no[/]",
            row["issuer"] or "-",
            row["scope"] or "-",
            "-" if expires is None else ("expired" if expires <= 0 else f"in {expires // 60} min"),
            "yes" if row["refreshable"] else "no",
        )
    out.print(table)
    out.print(f"credentials: {store.path}", highlight=False)


@auth.command()
@click.argument("server")
@click.option(
    "--local-only",
    is_flag=True,
    help="Only forget the tokens on this machine; do not ask the authorization server to revoke them.",
)
@config_option
@json_option
@handle_errors
def logout(server: str, local_only: bool, config_path: Path | None, as_json: bool) -> None:
    """Sign out of SERVER: revoke its tokens at the authorization server, then forget them here.

    Revocation (RFC 7009) is asked for the refresh token, then the access token. Where the server
    offers none or cannot be reached, the tokens are still forgotten here and the warning says that
    they stay valid until they expire.
    """
    config = load(config_path)
    settings = _oauth_server(config, server)
    assert settings.oauth is not None  # _oauth_server checked it
    store = FileCredentialStore()
    resource = _resource(settings)
    record = store.get(resource)
    revocation = Revocation(())
    if record is not None and not local_only:
        client = preregistered_client(settings.oauth, os.environ)
        with progress(f"revoking {server}'s tokens…", not as_json and sys.stderr.isatty()):
            revocation = run_until_signalled(_revoke, record, client, settings, resource)
    removed = store.delete(resource)
    if as_json:
        print_json(
            {
                "server": server,
                "removed": removed,
                "revoked": list(revocation.revoked),
                "problem": revocation.problem,
            }
        )
        return
    done = f"signed out of {server}" if removed else f"{server} had no stored credentials"
    if revocation.revoked:
        done += f"; {revocation.revoked_words()} revoked"
    out.print(done, highlight=False)
    if revocation.problem is not None:
        warn(
            f"{revocation.problem}; its tokens were forgotten here but stay valid until they expire",
            hint="revoke them in the authorization server's own console if they may have been copied",
        )


async def _revoke(
    record: StoredCredentials,
    client: OAuthClientInformationFull | None,
    settings: HttpServerConfig,
    resource: str,
) -> Revocation:
    return await revoke_tokens(record, client, network_policy(settings), resource=resource)
