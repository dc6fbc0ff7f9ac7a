"""Signing in to a real OAuth-protected MCP server through the public CLI, end to end.

The server (tests/fixtures/servers/oauth_server.py) is the MCP SDK's own server-side OAuth: its
authorization server approves at once, so ``auth login --headless`` follows its redirects. It
writes every token it issues to a file, which is what the leak checks look for everywhere
codemode writes: command output, the lock file, the stub tree, the ledger, the run's result and
the sandbox itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.auth._remote import CLI, Remote, login, write_workspace
from tests.conftest import FIXTURE_SERVERS, HttpServers


def test_login_sync_and_run_work_and_no_token_is_written_anywhere(remote: Remote) -> None:
    signed_in = login(remote)
    assert signed_in["signed_in"] is True and signed_in["tools"] == 2
    outputs = [remote.cli("sync", "--export", str(remote.root / "stubs")), remote.cli("pin", "--approve")]
    # The token lives 2 s: by the time the program runs it has expired and must be refreshed,
    # without a sign-in, by the non-interactive `run`.
    time.sleep(2.5)
    program = "from servers.remote import whoami, echo\n{'who': whoami(), 'echo': echo(text='hi')}"
    run = remote.cli("run", "-", "--json", stdin=program)
    outputs += [run, remote.cli("auth", "status", "--json"), remote.cli("ledger", "list", "--json")]
    assert all(o.returncode == 0 for o in outputs), [o.stderr for o in outputs]
    result = json.loads(run.stdout)
    assert result["status"] == "ok", result
    issued = remote.issued()
    assert len(issued) >= 4, "an access and a refresh token at login, and again at the refresh"
    credentials = (remote.root / "home" / "credentials.json").read_text()
    assert issued[-1] in credentials or issued[-2] in credentials, "the store holds the latest tokens"
    written = "".join(o.stdout + o.stderr for o in outputs)
    for path in sorted(remote.root.rglob("*")):
        if path.is_file() and path.parent.name != "home" and path.name not in ("issued.txt", "headers.txt"):
            written += path.read_bytes().decode("latin-1")
    assert "ledger" in written and "whoami" in written, "the places searched are the ones written"
    leaked = [token for token in issued if token in written]
    assert leaked == [], "a token reached the output, the lock, the stubs or the ledger"


def test_status_never_shows_a_token_and_logout_forgets_the_server(remote: Remote) -> None:
    login(remote)
    status = remote.cli("auth", "status", "--json")
    [row] = json.loads(status.stdout)["servers"]
    assert row["server"] == "remote" and row["signed_in"] is True and row["refreshable"] is True
    assert not any(token in status.stdout for token in remote.issued())
    assert remote.cli("auth", "logout", "remote").returncode == 0
    assert json.loads(remote.cli("auth", "status", "--json").stdout)["servers"][0]["signed_in"] is False
    servers = remote.cli("servers", "--json")
    assert servers.returncode == 1
    error = json.loads(servers.stdout)["servers"][0]["error"]
    assert "run `codemode auth login remote`" in error, error


def test_a_command_other_than_login_never_starts_a_sign_in(remote: Remote) -> None:
    done = remote.cli("sync")
    assert done.returncode == 1
    assert "needs a sign-in: run `codemode auth login remote`" in done.stderr
    assert remote.issued() == [], "no authorization happened"


def test_login_refuses_a_loopback_server_that_is_not_allowed(
    tmp_path: Path, http_servers: HttpServers
) -> None:
    headers = tmp_path / "headers.txt"
    url = http_servers.start_script(
        FIXTURE_SERVERS / "oauth_server.py", "--port", "0", "--header-log", str(headers)
    )
    write_workspace(tmp_path, url)
    config = tmp_path / "codemode.toml"
    config.write_text(config.read_text().replace("allow_loopback = true\n", ""))
    done = subprocess.run(
        [*CLI, "auth", "login", "remote", "--headless", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "CODEMODE_CREDENTIALS": str(tmp_path / "credentials.json")},
        check=False,
    )
    assert done.returncode == 1
    assert "allow_loopback" in done.stderr, done.stderr
    assert not headers.exists(), "nothing reached the server"


def test_login_explains_an_unknown_or_non_oauth_server(remote: Remote) -> None:
    unknown = remote.cli("auth", "login", "nope")
    assert unknown.returncode == 1 and "no server named 'nope'" in unknown.stderr
    remote.config.write_text(remote.config.read_text().replace("[servers.remote.oauth]\n", ""))
    plain = remote.cli("auth", "login", "remote")
    assert plain.returncode == 1 and "add a [servers.remote.oauth] table" in plain.stderr


@pytest.mark.docker
def test_the_sandbox_holds_no_credential_while_its_calls_are_signed(
    tmp_path: Path, http_servers: HttpServers, docker_image: str
) -> None:
    tokens = tmp_path / "issued.txt"
    url = http_servers.start_script(
        FIXTURE_SERVERS / "oauth_server.py", "--port", "0", "--token-file", str(tokens)
    )
    write_workspace(tmp_path, url, backend="docker")
    config = tmp_path / "codemode.toml"
    config.write_text(
        config.read_text().replace("pool_size = 0\n", f'pool_size = 0\nimage = "{docker_image}"\n')
    )
    remote = Remote(tmp_path, url, tokens, tmp_path / "headers.txt")
    login(remote)
    assert remote.cli("sync").returncode == 0 and remote.cli("pin", "--approve").returncode == 0
    store = remote.env()["CODEMODE_CREDENTIALS"]
    program = f"""\
import os
from servers.remote import whoami
seen = []
for path in ({store!r}, os.path.expanduser("~/.local/share/codemode/credentials.json")):
    try:
        seen.append(open(path).read())
    except OSError as exc:
        seen.append(type(exc).__name__)
{{"who": whoami(), "env": dict(os.environ), "files": seen}}
"""
    run = remote.cli("run", "-", "--json", stdin=program)
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)["result"]
    assert result["files"] == ["FileNotFoundError", "FileNotFoundError"]
    assert result["who"], "the call itself was signed, on the host"
    assert not any(token in run.stdout for token in remote.issued())


def test_login_refuses_a_server_that_does_not_advertise_pkce(
    tmp_path: Path, http_servers: HttpServers
) -> None:
    tokens = tmp_path / "issued.txt"
    url = http_servers.start_script(
        FIXTURE_SERVERS / "oauth_server.py",
        "--port",
        "0",
        "--no-pkce-advertised",
        "--token-file",
        str(tokens),
    )
    write_workspace(tmp_path, url)
    remote = Remote(tmp_path, url, tokens, tmp_path / "headers.txt")
    done = remote.cli("auth", "login", "remote", "--headless")
    assert done.returncode == 1
    assert "does not advertise PKCE with S256" in done.stderr, done.stderr
    assert remote.issued() == [], "no code was asked for, no token issued"
