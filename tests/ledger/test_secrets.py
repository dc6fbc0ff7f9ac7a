"""Secrets never reach the ledger file, its events or ``codemode ledger`` output; digests still bind.

The PEM key below is passed as a tool argument, an AWS-shaped credential comes back as a
result, and a password sits in an error message. None of them may appear in the bytes of the
database (or its WAL), while the argument digest keeps binding the real arguments: two calls
whose secrets differ are different operations even though both are stored as ``[REDACTED…]``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from codemode.calls import RunBinding, ToolResult
from codemode.cli._ledger_cmd import ledger as ledger_group
from codemode.ledger import CallIntent, Conflict, Fresh, Replay, SqliteLedger, arguments_digest

Intent = Callable[..., CallIntent]

PEM_BODY = "MIIEowIBAAKCAQEAq7BFUpkGp3+LQmlQ9fake0nlyForTestsZ3kqXy1Hq2sKbT9w"
PEM = f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\nQ1w2E3r4T5y6U7i8O9p0\n-----END RSA PRIVATE KEY-----\n"
OTHER_PEM = PEM.replace("Q1w2E3r4", "Z9x8C7v6")
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY"
AWS_KEY_ID = "AKIAIOSFODNN7EXAMPLQ"
PASSWORD = "hunter2-Correct-Horse"
SECRETS = (PEM_BODY, "Q1w2E3r4T5y6U7i8O9p0", AWS_SECRET, AWS_KEY_ID, PASSWORD)

ARGUMENTS = {"customer_id": "CUST-0042", "deploy_key": PEM, "comment": "rotate the key"}


def _file_bytes(db: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(db.parent.glob(db.name + "*")) if p.is_file())


def _leaks(data: bytes | str) -> list[str]:
    text = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data
    return [secret for secret in SECRETS if secret in text]


@pytest.fixture
def secret_ledger(ledger: SqliteLedger, intent: Intent, binding: RunBinding) -> SqliteLedger:
    """A run whose call carries a PEM key, returns AWS credentials; a second call times out."""
    ledger.begin_run(binding, "sha256:code")
    first = ledger.reserve(intent(0, key="deploy", arguments=ARGUMENTS), send=True)
    assert isinstance(first, Fresh)
    result = ToolResult(
        structured={"Credentials": {"AccessKeyId": AWS_KEY_ID, "SecretAccessKey": AWS_SECRET}}
    )
    ledger.complete(first.call_id, result)
    lost = ledger.reserve(intent(1, key="again", arguments=ARGUMENTS), send=True)
    assert isinstance(lost, Fresh)
    ledger.mark_unknown(lost.call_id, f"server said: login failed for password={PASSWORD}")
    ledger.finish_run(binding.run_id, "ok", {"calls": 2, "note": f"password={PASSWORD}"})
    return ledger


def test_the_file_and_its_events_hold_no_secret_but_keep_the_rest(
    secret_ledger: SqliteLedger, db_path: Path
) -> None:
    call = secret_ledger.get_call("run-1/0")
    assert call is not None and call.arguments is not None
    assert call.arguments["customer_id"] == "CUST-0042"  # non-secret values are kept
    assert call.arguments["comment"] == "rotate the key"
    assert "[REDACTED" in call.arguments["deploy_key"]
    assert call.args_digest == arguments_digest(ARGUMENTS)  # the digest is of the real arguments
    assert "[REDACTED" in json.dumps(call.result)
    assert _leaks(json.dumps([e.payload for e in secret_ledger.events()])) == []
    assert _leaks(_file_bytes(db_path)) == []  # database, WAL and shared memory, while open
    assert secret_ledger.verify().ok
    secret_ledger.close()
    assert _leaks(_file_bytes(db_path)) == []  # and after the checkpoint on close


def test_the_digest_binds_the_real_secret(secret_ledger: SqliteLedger, intent: Intent) -> None:
    same = secret_ledger.reserve(intent(5, key="deploy", arguments=ARGUMENTS))
    assert isinstance(same, Replay)
    other = secret_ledger.reserve(intent(6, key="deploy", arguments={**ARGUMENTS, "deploy_key": OTHER_PEM}))
    assert isinstance(other, Conflict)  # both are stored redacted alike; the digests differ


def test_store_arguments_false_keeps_only_the_digest(
    open_at: Callable[..., SqliteLedger], intent: Intent, tmp_path: Path
) -> None:
    ledger = open_at(path=tmp_path / "digest-only.db", store_arguments=False)
    answer = ledger.reserve(intent(0, key=None, arguments=ARGUMENTS))
    assert isinstance(answer, Fresh)
    call = ledger.get_call(answer.call_id)
    assert call is not None and call.arguments is None
    assert call.args_digest == arguments_digest(ARGUMENTS)


def _cli(config: Path, *args: str) -> Result:
    result = CliRunner().invoke(ledger_group, [*args, "--config", str(config)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture
def config(secret_ledger: SqliteLedger, db_path: Path) -> Path:
    secret_ledger.close()
    path = db_path.parent / "codemode.toml"
    path.write_text(f'[ledger]\npath = "{db_path.name}"\n', encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "args",
    [
        ("show", "run-1/0"),
        ("show", "run-1/0", "--json"),
        ("show", "run-1/1"),
        ("show", "run-1/1", "--json"),
        ("show", "run-1"),
        ("show", "run-1", "--json"),
        ("reconcile",),
        ("reconcile", "--json"),
    ],
    ids=lambda args: " ".join(args),
)
def test_ledger_show_and_reconcile_print_no_secret(config: Path, args: tuple[str, ...]) -> None:
    output = _cli(config, *args).output
    assert _leaks(output) == []
    if args[1:2] != ("run-1",):
        assert "CUST-0042" in output  # the arguments are shown, only the secret is hidden


def test_ledger_show_hides_a_secret_an_older_codemode_stored_in_clear(
    config: Path, db_path: Path, open_at: Callable[..., SqliteLedger]
) -> None:
    with open_at(path=db_path) as ledger, ledger.store.transaction(write=True) as tx:
        clear = json.dumps(ARGUMENTS, sort_keys=True)
        tx.update("calls", "run-1/0", {"args_json": clear, "reason": f"password={PASSWORD}"})
    assert PEM_BODY.encode() in _file_bytes(db_path)  # the test really plants it
    for args in (("show", "run-1/0"), ("show", "run-1/0", "--json"), ("show", "run-1", "--json")):
        assert _leaks(_cli(config, *args).output) == [], args


def test_settling_an_unknown_call_prints_no_secret(config: Path) -> None:
    settled = _cli(
        config, "reconcile", "run-1/1", "--failed", "--evidence", f"checked; token={PASSWORD}", "--json"
    )
    data: Any = json.loads(settled.stdout)
    assert data["call"]["state"] == "reconciled_failed"
    assert _leaks(settled.output) == []
