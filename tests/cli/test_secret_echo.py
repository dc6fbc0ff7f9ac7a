"""A server that echoes its own ``${VAR}`` credential gets it past codemode nowhere (issue 36, class 4).

The server (``secret_echo_server.py``) is a real stdio process started by ``codemode``, with the
credential resolved from a ``${VAR}`` reference in its ``env``. It repeats the credential, as is
and base64 (at each offset inside longer values), URL- and hex-encoded, in a structured result, a
tool error, a JSON-RPC error and on stderr. Whatever codemode prints or stores must hold none of
those forms: ``codemode run`` (result, program output, errors), the ledger file itself and every
``codemode ledger`` view (read without the variable set, so nothing is redacted on display only),
``codemode servers`` / ``sync``, logs, and the spans exported over OTLP.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import cast

import pytest

pytestmark = pytest.mark.integration

SERVER = Path(__file__).resolve().parent / "secret_echo_server.py"
VARIABLE = "CODEMODE_TEST_ECHO_SECRET"
SECRET = f"Echo+{secrets.token_urlsafe(12)}/{secrets.token_urlsafe(12)}"
"""Random per run, with characters that URL-encoding changes."""
MARKER = "[REDACTED:${" + VARIABLE + "}]"
CLI = [sys.executable, "-m", "codemode.cli"]


def leak_forms(secret: str) -> dict[str, str]:
    """What would give the secret away, built here independently of codemode's own list: the
    value, its halves, URL and hex encodings, and for base64 (both alphabets) at each offset mod 3
    the characters of ``b64(prefix + secret)`` past its first 4 and before its last 4, which only
    the secret's bytes decide and any longer encoding at that offset holds."""
    raw = secret.encode()
    forms = {
        "value": secret,
        "first half": secret[: len(secret) // 2],
        "second half": secret[len(secret) // 2 :],
        "url": urllib.parse.quote(secret, safe=""),
        "hex": raw.hex(),
        "HEX": raw.hex().upper(),
    }
    for alphabet, encode in (("base64", base64.b64encode), ("base64url", base64.urlsafe_b64encode)):
        for prefix in (b"", b"u", b"us"):
            forms[f"{alphabet} at offset {len(prefix)}"] = encode(prefix + raw).decode()[4:-4]
    return forms


LEAKS = leak_forms(SECRET)


def assert_hidden(where: str, text: str | bytes) -> None:
    haystack = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
    found = [name for name, form in LEAKS.items() if form in haystack]
    assert not found, f"{where} holds the secret ({', '.join(found)}):\n{haystack[:3000]}"


def write_config(directory: Path, mode: str) -> Path:
    config = directory / "codemode.toml"
    config.write_text(
        f"""
[servers.echo]
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(SERVER))}, "{mode}"]
env = {{ ECHO_SECRET = "${{{VARIABLE}}}" }}
trusted = true
reconnect = false
connect_timeout = 20

[sandbox]
backend = "process"
pool_size = 0

[policy.consent]
require_at_risk = "high"
""",
        encoding="utf-8",
    )
    return config


def environment(*, with_secret: bool, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    env.pop(VARIABLE, None)
    if with_secret:
        env[VARIABLE] = SECRET
    return {**env, **extra}


def codemode(
    *args: str, stdin: str | None = None, with_secret: bool = True, **extra: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env=environment(with_secret=with_secret, **extra),
    )


def assert_command_hides(where: str, done: subprocess.CompletedProcess[str]) -> None:
    assert_hidden(f"{where} stdout", done.stdout)
    assert_hidden(f"{where} stderr", done.stderr)


class Collector(BaseHTTPRequestHandler):
    """An OTLP/HTTP collector on 127.0.0.1 that keeps the bodies it is sent."""

    bodies: list[bytes] = []

    def do_POST(self) -> None:
        Collector.bodies.append(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture(scope="module")
def collector() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    config = write_config(tmp_path_factory.mktemp("echo"), "serve")
    for args in (["sync"], ["pin", "--approve"]):
        done = codemode(*args, "--config", str(config))
        assert done.returncode == 0, done.stderr
        assert_command_hides(" ".join(args), done)
    return config


PROGRAM = """
from servers.echo import refuse, rotate, whoami
seen = {"who": whoami()}
for name, call in (("refuse", refuse), ("rotate", rotate)):
    try:
        call()
    except Exception as exc:
        seen[name] = f"{type(exc).__name__}: {exc}"
print(seen)
seen
"""


@pytest.fixture(scope="module")
def echoed_run(workspace: Path, collector: str) -> dict[str, object]:
    """One ``codemode run`` of every echo, with spans exported to the collector."""
    done = codemode(
        "run", "-", "--json", "--no-input", "--config", str(workspace),
        stdin=PROGRAM, OTEL_EXPORTER_OTLP_ENDPOINT=collector,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert_command_hides("codemode run --json", done)
    return json.loads(done.stdout)


def test_the_run_result_and_output_hold_markers_not_the_secret(echoed_run: dict[str, object]) -> None:
    result = echoed_run["result"]
    assert isinstance(result, dict)
    who = cast(dict[str, str], result["who"])
    assert who["user"] == "svc", "the rest of the answer is kept"
    for field in ("plain", "base64", "hex", "base64_offset_1", "base64_offset_2", "base64url"):
        assert MARKER in who[field], (field, who[field])
    assert MARKER in result["refuse"] and MARKER in result["rotate"]
    assert MARKER in str(echoed_run["stdout"])


def test_the_ledger_file_and_every_ledger_view_hold_no_secret(
    workspace: Path, echoed_run: dict[str, object]
) -> None:
    for database in workspace.parent.glob("codemode.db*"):
        assert_hidden(f"the ledger file {database.name}", database.read_bytes())
    run_id = str(echoed_run["run_id"])
    config = ("--config", str(workspace))
    # Without the variable set: a view redacting on display only would not hide it here.
    for args in (["--wide"], ["--runs", "--json"]):
        assert_command_hides(
            f"ledger list {args}", codemode("ledger", "list", *args, *config, with_secret=False)
        )
    calls = codemode("ledger", "list", "--json", *config, with_secret=False)
    assert calls.returncode == 0, calls.stderr
    assert_command_hides("ledger list", calls)
    call_ids = [call["call_id"] for call in json.loads(calls.stdout)["calls"]]
    assert len(call_ids) == 3
    for args in (
        [run_id, "--json"],
        [run_id],
        [run_id, "--evidence"],
        *([call_id, "--json"] for call_id in call_ids),
        *([call_id] for call_id in call_ids),
    ):
        shown = codemode("ledger", "show", *args, *config, with_secret=False)
        assert shown.returncode == 0, shown.stderr
        assert_command_hides(f"ledger show {' '.join(args)}", shown)
    for args in (["--json"], []):
        unknown = codemode("ledger", "reconcile", *args, *config, with_secret=False)
        assert "rotate" in unknown.stdout, "the JSON-RPC error left the write's outcome unknown"
        assert_command_hides(f"ledger reconcile {' '.join(args)}", unknown)


def test_an_uncaught_tool_error_is_printed_without_the_secret(workspace: Path) -> None:
    done = codemode(
        "run",
        "-",
        "--no-input",
        "--config",
        str(workspace),
        stdin="from servers.echo import refuse\nrefuse()",
    )
    assert done.returncode == 1
    assert "upstream rejected the credential" in done.stdout + done.stderr
    assert_command_hides("codemode run (uncaught)", done)


def test_servers_shows_the_stderr_of_a_healthy_server_without_the_secret(workspace: Path) -> None:
    for args in (["servers", "--json"], ["servers"]):
        done = codemode(*args, "--config", str(workspace))
        assert done.returncode == 0, done.stderr
        assert_command_hides(" ".join(args), done)
    status = json.loads(codemode("servers", "--json", "--config", str(workspace)).stdout)["servers"][0]
    assert "starting: plain " + MARKER in status["stderr_tail"]


def test_a_refused_handshake_and_its_stderr_are_shown_without_the_secret(tmp_path: Path) -> None:
    config = write_config(tmp_path, "initerr")
    for args in (["servers"], ["servers", "--json"], ["sync"], ["sync", "--json"]):
        done = codemode(*args, "--config", str(config))
        assert done.returncode == 1, done.stderr
        assert "bad credential" in done.stdout + done.stderr, "the error is still shown"
        assert_command_hides(" ".join(args), done)


def test_exported_spans_hold_no_secret(echoed_run: dict[str, object]) -> None:
    assert echoed_run["status"] == "ok"
    assert Collector.bodies, "the run exported its spans"
    assert_hidden("the exported spans", b"".join(Collector.bodies))
    assert b"rotation failed for" in b"".join(Collector.bodies), "the MCP SDK's error status is exported"


def test_the_forms_checked_here_would_find_the_secret() -> None:
    """The checks above can fail: each form is found in what the server writes."""
    text = subprocess.run(
        [sys.executable, str(SERVER), "serve"],
        input="",
        capture_output=True,
        text=True,
        env={**os.environ, "ECHO_SECRET": SECRET},
        timeout=60,
        check=True,
    ).stderr
    for name, form in LEAKS.items():
        if "half" not in name:
            assert form in text, name
