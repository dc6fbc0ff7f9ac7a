"""Red-team findings, reproduced end to end and shown refused or redacted.

The path-scope cases run against the official MCP filesystem server (npm
``@modelcontextprotocol/server-filesystem``), whose own allowed directory is wider than the
scope codemode grants, so only codemode's gate stands between the program and the file. The
others run against ``fixtures/hostile_server.py``, which leaks credentials, lies in its hints
and mislabels media.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest

from codemode.broker import ApprovalAnswer, ApprovalRequest, CallbackApprover

from .conftest import cli_invoke, toml_document

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

Deploy = Any
FS_PACKAGE = "@modelcontextprotocol/server-filesystem@2026.8.31"
FS_HOME = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "codemode-tests" / "fs-server"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
PEM_BODY = "MIIEowIBAAKCAQEAredteam0000000000000000000000000000"
PEM = f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n-----END RSA PRIVATE KEY-----"


def _approve_all(seen: list[ApprovalRequest]) -> CallbackApprover:
    async def answer(request: ApprovalRequest) -> ApprovalAnswer:
        seen.append(request)
        return ApprovalAnswer(True, "test")

    return CallbackApprover(answer)


# -- the official filesystem server ------------------------------------------------------------------


@pytest.fixture(scope="session")
def filesystem_server() -> Path:
    """The official filesystem server's entry point, installed once into a cache directory."""
    entry = FS_HOME / "node_modules" / "@modelcontextprotocol" / "server-filesystem" / "dist" / "index.js"
    if entry.exists():
        return entry
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        if os.environ.get("CODEMODE_REQUIRE_CONFORMANCE") == "1":
            pytest.fail("CODEMODE_REQUIRE_CONFORMANCE=1 but node/npm are missing for the filesystem server")
        pytest.skip("node and npm are needed for the official filesystem server")
    FS_HOME.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--prefix", str(FS_HOME), FS_PACKAGE],
        check=True,
        capture_output=True,
        timeout=600,
    )
    assert entry.exists(), f"npm installed {FS_PACKAGE} but {entry} is missing"
    return entry


async def test_the_official_filesystem_server_cannot_read_or_move_outside_the_scope(
    filesystem_server: Path, tmp_path: Path
) -> None:
    served = tmp_path / "served"  # what the server itself allows: wider than the scope
    allowed = served / "allowed"
    allowed.mkdir(parents=True)
    (allowed / "ok.txt").write_text("fine", encoding="utf-8")
    (served / "secret.txt").write_text("TOP SECRET", encoding="utf-8")
    root = tmp_path / "deployment"
    root.mkdir()
    config = root / "codemode.toml"
    policy = {
        "principals": {
            "local": {
                "scopes": [{"tools": ["fs/*"], "argument": "path", "kind": "path", "allow": [str(allowed)]}]
            }
        }
    }
    config.write_text(
        toml_document(
            {
                "servers.fs": {
                    "command": "node",
                    "args": [str(filesystem_server), str(served)],
                    "trusted": True,
                },
                "sandbox": {"backend": "process"},
                "policy": {"principals": policy["principals"]},
            }
        ),
        encoding="utf-8",
    )
    for command in (("sync",), ("pin", "--approve")):
        done = await anyio.to_thread.run_sync(cli_invoke, *command, "--config", str(config))
        assert done.exit_code == 0, done.output
    ok, secret = str(allowed / "ok.txt"), str(served / "secret.txt")
    moved, inside = str(served / "moved.txt"), str(allowed / "s.txt")
    program = f"""
import codemode_runtime as rt
from servers.fs import read_multiple_files, move_file, read_text_file
outcomes = {{}}
for name, call in [
    ("read_many", lambda: read_multiple_files(paths=[{ok!r}, {secret!r}])),
    ("move_out", lambda: move_file(source={ok!r}, destination={moved!r})),
    ("move_in", lambda: move_file(source={secret!r}, destination={inside!r})),
]:
    try:
        call()
        outcomes[name] = "sent"
    except rt.CallDenied as exc:
        outcomes[name] = exc.gate + ": " + exc.reason
outcomes["inside"] = str(read_text_file(path={str(allowed / "ok.txt")!r}))
outcomes
"""
    from codemode.config import load_config
    from codemode.engine._engine import CodeMode

    seen: list[ApprovalRequest] = []
    async with CodeMode(load_config(config), approver=_approve_all(seen)) as engine:
        result = await engine.run(program)
    assert result.status == "ok", result.error
    outcomes: dict[str, str] = result.result  # type: ignore[assignment]
    assert outcomes["read_many"].startswith("resource: paths"), outcomes
    assert outcomes["move_out"].startswith("resource: destination"), outcomes
    assert outcomes["move_in"].startswith("resource: source"), outcomes
    assert "fine" in outcomes["inside"]
    assert "TOP SECRET" not in json.dumps(result.to_json())
    assert (allowed / "ok.txt").exists() and (served / "secret.txt").exists(), "nothing was moved"
    assert not any(r.tool == "move_file" for r in seen), "the scope refused before anyone was asked"


# -- the hostile server ----------------------------------------------------------------------------------


async def test_structured_credentials_are_redacted_in_the_result_and_the_ledger(deploy: Deploy) -> None:
    deployment = deploy(servers=("hostile",), policy={"consent": {"read_only": ["hostile/assume_role"]}})
    program = """
from servers.hostile import assume_role
creds = assume_role(role="admin")
print(creds)
creds
"""
    async with deployment.engine() as engine:
        result = await engine.run(program)
    assert result.status == "ok", result.error
    dumped = json.dumps(result.to_json())
    for secret in (AWS_SECRET, "ASIAIOSFODNN7EXAMPLE", "FwoGZXIvYXdzEJr", "hunter2-but-longer"):
        assert secret not in dumped, secret
    returned: dict[str, Any] = result.result  # type: ignore[assignment]
    assert returned["Credentials"]["Expiration"] == "2026-12-04T12:00:00Z"
    assert returned["role"] == "admin"
    raw = b"".join(p.read_bytes() for p in deployment.root.glob("codemode.db*"))
    assert AWS_SECRET.encode() not in raw and b"hunter2-but-longer" not in raw
    shown = await deployment.acli("ledger", "show", result.run_id, "--json")
    assert shown.exit_code == 0, shown.output
    assert AWS_SECRET not in shown.output


async def test_untrusted_and_contradictory_hints_never_skip_consent(deploy: Deploy) -> None:
    deployment = deploy(servers=("hostile",))
    program = """
import codemode_runtime as rt
from servers.hostile import wipe, peek
outcomes = []
for call in (lambda: wipe(target="prod"), lambda: peek(target="prod")):
    try:
        call()
        outcomes.append("sent")
    except rt.CallDenied as exc:
        outcomes.append(exc.gate)
outcomes
"""
    async with deployment.engine() as engine:
        result = await engine.run(program)
    assert result.status == "ok", result.error
    assert result.result == ["consent", "consent"]
    assert not (deployment.root / "hostile.log").exists(), "nothing reached the server"


async def test_a_read_only_scope_refuses_a_tool_whose_read_only_claim_is_untrusted(deploy: Deploy) -> None:
    policy = {
        "principals": {
            "local": {
                "scopes": [{"tools": ["hostile/*"], "argument": "target", "allow": ["*"], "access": "read"}]
            }
        },
        "consent": {"never": ["hostile/*"]},
    }
    deployment = deploy(servers=("hostile",), policy=policy)
    program = """
import codemode_runtime as rt
from servers.hostile import peek
try:
    peek(target="x")
    outcome = "sent"
except rt.CallDenied as exc:
    outcome = exc.gate + ": " + exc.reason
outcome
"""
    async with deployment.engine() as engine:
        result = await engine.run(program)
    assert result.status == "ok", result.error
    assert str(result.result).startswith("resource: only read access"), result.result


async def test_an_executable_labelled_as_an_image_never_reaches_the_program(deploy: Deploy) -> None:
    deployment = deploy(servers=("hostile",), policy={"consent": {"read_only": ["hostile/screenshot"]}})
    program = """
from servers.hostile import screenshot
screenshot()
"""
    async with deployment.engine() as engine:
        result = await engine.run(program)
    assert result.status == "ok", result.error
    dumped = json.dumps(result.to_json())
    assert "TVqQAAMAAAAE" not in dumped, "the executable's bytes were delivered"
    assert "removed by policy" in dumped


async def test_a_private_key_passed_as_an_argument_is_never_stored_or_shown(deploy: Deploy) -> None:
    seen: list[ApprovalRequest] = []
    deployment = deploy(servers=("hostile",), approver=_approve_all(seen))
    program = f"""
from servers.hostile import store_key
store_key(name="deploy", key={PEM!r})
"""
    async with deployment.engine() as engine:
        result = await engine.run(program)
    assert result.status == "ok", result.error
    assert seen and PEM_BODY not in seen[0].arguments_summary, "the approver's screen hides it"
    for path in deployment.root.glob("codemode.db*"):
        assert PEM_BODY.encode() not in path.read_bytes(), path
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    for args in (["ledger", "show", result.run_id], ["ledger", "show", result.run_id, "--json"]):
        shown = await deployment.acli(*args)
        assert shown.exit_code == 0, shown.output
        assert PEM_BODY not in shown.output
    calls = deployment.calls(result.run_id)
    assert calls and calls[0].args_digest, "the digest still binds the real arguments"
