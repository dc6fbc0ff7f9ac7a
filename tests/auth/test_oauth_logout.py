"""``codemode auth logout`` against the real OAuth fixture: the authorization server revokes the
tokens (RFC 7009), so a refresh token copied before the logout no longer works; ``--local-only``
and a server without revocation leave them valid, and say so."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.auth._remote import Remote, login, write_workspace
from tests.conftest import FIXTURE_SERVERS, HttpServers


def stored(remote: Remote) -> dict[str, Any]:
    """The credential record (a copy someone could have taken before the logout)."""
    [record] = json.loads((remote.root / "home" / "credentials.json").read_text())["servers"].values()
    return record


def refresh_works(remote: Remote, record: dict[str, Any], secret: str | None = None) -> bool:
    """Whether the fixture's /token still accepts the record's refresh token."""
    client: dict[str, Any] = record.get("client") or {}
    form = {"grant_type": "refresh_token", "refresh_token": record["tokens"]["refresh_token"]}
    form["client_id"] = client.get("client_id") or "fixture-client"
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    secret = secret or client.get("client_secret")
    if secret:
        form["client_secret"] = secret  # client_secret_post, as both clients here authenticate
    origin = urllib.parse.urlsplit(remote.url)
    request = urllib.request.Request(
        f"{origin.scheme}://{origin.netloc}/token", urllib.parse.urlencode(form).encode(), headers
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return bool(response.status == 200)
    except urllib.error.HTTPError as refused:
        code, body = refused.code, refused.read()
    assert code == 400 and b"invalid_grant" in body, body  # refused for the token, not the request
    return False


def test_logout_revokes_the_tokens_at_the_authorization_server(remote: Remote) -> None:
    login(remote)
    copied = stored(remote)
    done = remote.cli("auth", "logout", "remote", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "server": "remote",
        "removed": True,
        "revoked": ["refresh_token", "access_token"],
        "problem": None,
    }
    assert not refresh_works(remote, copied)
    assert not any(token in done.stdout + done.stderr for token in remote.issued())


def test_logout_local_only_forgets_here_and_leaves_the_server_alone(remote: Remote) -> None:
    login(remote)
    copied = stored(remote)
    done = remote.cli("auth", "logout", "remote", "--local-only", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["revoked"] == [] and json.loads(done.stdout)["removed"] is True
    assert refresh_works(remote, copied)  # the check above fails for a revoked token, not a wrong request


def test_logout_from_a_server_without_revocation_warns_and_still_forgets(
    tmp_path: Path, http_servers: HttpServers
) -> None:
    url = http_servers.start_script(FIXTURE_SERVERS / "oauth_server.py", "--port", "0", "--no-revocation")
    write_workspace(tmp_path, url)
    remote = Remote(tmp_path, url, tmp_path / "issued.txt", tmp_path / "headers.txt")
    login(remote)
    done = remote.cli("auth", "logout", "remote")
    assert done.returncode == 0, done.stderr
    assert "signed out of remote" in done.stdout
    assert "offers no token revocation" in done.stderr and "stay valid until they expire" in done.stderr
    status = json.loads(remote.cli("auth", "status", "--json").stdout)
    assert status["servers"][0]["signed_in"] is False


def test_a_preregistered_confidential_client_revokes_with_its_secret(
    tmp_path: Path, http_servers: HttpServers, monkeypatch: pytest.MonkeyPatch
) -> None:
    # client_secret_post: the SDK's revocation endpoint refuses HTTP Basic without a client_secret
    # form field (its request model requires one); test_revoke.py checks the Basic header itself.
    url = http_servers.start_script(
        FIXTURE_SERVERS / "oauth_server.py",
        *("--port", "0", "--no-dcr", "--client-id", "fixture-client", "--client-secret", "s3cret"),
        *("--client-auth-method", "client_secret_post"),
    )
    write_workspace(tmp_path, url)
    config = tmp_path / "codemode.toml"
    oauth = (
        '[servers.remote.oauth]\nclient_id = "fixture-client"\nclient_secret = "${FIXTURE_SECRET}"\n'
        'token_endpoint_auth_method = "client_secret_post"\n'
    )
    config.write_text(config.read_text().replace("[servers.remote.oauth]\n", oauth))
    monkeypatch.setenv("FIXTURE_SECRET", "s3cret")
    remote = Remote(tmp_path, url, tmp_path / "issued.txt", tmp_path / "headers.txt")
    login(remote)
    copied = stored(remote)
    # A pre-registered client has no registration naming its issuer: the tokens' issuer is kept,
    # so logout revokes there instead of asking the resource again (which could name another).
    assert copied["issuer"] == url.removesuffix("/mcp")
    done = remote.cli("auth", "logout", "remote", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["revoked"] == ["refresh_token", "access_token"], done.stdout
    assert not refresh_works(remote, copied, secret="s3cret")
    assert "s3cret" not in done.stdout + done.stderr
