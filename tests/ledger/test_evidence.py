"""codemode ledger show ID --evidence: each call's evidence chain, built from a real SQLite ledger."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from codemode.calls import RunBinding, ToolResult
from codemode.cli._ledger_cmd import ledger as ledger_group
from codemode.ledger import (
    ApprovalConsumed,
    ApprovalRecord,
    CallIntent,
    Fresh,
    SqliteLedger,
    approval_digest,
    arguments_digest,
    open_ledger,
)
from tests.ledger.conftest import make_intent

Intent = Callable[..., CallIntent]

PASSWORD = "hunter2-Correct-Horse"
WRITE_ARGS = {"customer_id": 42, "text": "hello"}
LINKS = ["trace", "identity", "tool", "schema", "arguments", "approval", "receipt", "filtering", "outcome"]


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "codemode.toml"
    path.write_text("", encoding="utf-8")
    return path


PIN = "sha256:" + "ab" * 32
"""The schema hash of the ``intent`` fixture's calls."""


def _approve(
    store: SqliteLedger,
    call_id: str,
    arguments: dict[str, Any] | None = None,
    *,
    legacy: bool = False,
    server: str = "crm",
) -> str:
    """Grant and consume an approval for ``call_id``, as the broker's approval flow does (or, with
    ``legacy``, as it did before approvals were bound to the pin)."""
    digest = arguments_digest(arguments if arguments is not None else WRITE_ARGS)
    digest = digest if legacy else approval_digest(digest, PIN)
    approval = ApprovalRecord.issue(
        tenant="acme",
        principal="alice",
        server=server,
        tool="add_note",
        args_digest=digest,
        risk="high",
        approver="bob",
        call_id=call_id,
        expires_at=datetime.now(UTC) + timedelta(hours=1),
    )
    store.record_approval(approval)
    used = store.consume_approval(
        approval.approval_id,
        call_id=call_id,
        tenant="acme",
        principal="alice",
        server=server,
        tool="add_note",
        args_digest=digest,
        risk="high",
    )
    assert isinstance(used, ApprovalConsumed)
    return approval.approval_id


FILTERED = {
    "truncated": False,
    "secrets_redacted": 1,
    "pii_tokenized": 2,
    "blocks_dropped": 0,
    "injection_suspected": False,
}
"""A result filter's report, as the broker hands it to the ledger."""


def _run_call(
    store: SqliteLedger,
    intent: CallIntent,
    result: ToolResult,
    receipt: str | None = None,
    filtered: dict[str, int | bool] | None = FILTERED,
) -> None:
    reserved = store.reserve(intent, send=True)
    assert isinstance(reserved, Fresh)
    store.complete(reserved.call_id, result, receipt=receipt, filtered=filtered)


@pytest.fixture
def filled(config: Path, intent: Intent, binding: RunBinding) -> Path:
    """run-1: a clean read, an approved write with a receipt, a denial, a write with links missing
    (recorded as by a codemode that kept neither pins, tool versions nor filter reports)."""
    with open_ledger(config.parent / "codemode.db") as store:
        store.begin_run(binding, "sha256:code")
        read = intent(0, key=None, tool="get_customer", arguments={"customer_id": 42}, tool_version="1.4.0")
        _run_call(store, read, ToolResult(structured={"name": "Ada"}))
        approval_id = _approve(store, "run-1/1")
        write = intent(1, key="note-1", approval_id=approval_id, tool_version="1.4.0")
        _run_call(store, write, ToolResult(structured={"receipt_id": "note-7"}), receipt="note-7")
        denied = intent(2, key=None, tool_version="1.4.0")
        store.mark_denied(denied, gate="consent", reason=f"needs approval; password={PASSWORD}")
        # Made without an approved pin (no schema hash), no tool version, and no receipt came back.
        bare = intent(3, key="note-2", schema_hash="", arguments={"customer_id": 43, "text": "x"})
        _run_call(store, bare, ToolResult(structured={"ok": True}), filtered=None)
        store.finish_run(binding.run_id, "ok", {"calls": 4})
    return config


def run(*args: str) -> Result:
    return CliRunner().invoke(ledger_group, list(args), catch_exceptions=False)


def evidence(config: Path, item: str = "run-1") -> dict[str, Any]:
    result = run("show", item, "--evidence", "--json", "--config", str(config))
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def statuses(call: dict[str, Any]) -> dict[str, str]:
    return {name: link["status"] for name, link in call["links"].items()}


def test_json_gives_every_call_in_order_with_every_link(filled: Path) -> None:
    data = evidence(filled)
    assert data["run"]["run_id"] == "run-1"
    assert data["ledger"].endswith("codemode.db")
    assert [c["call_id"] for c in data["calls"]] == ["run-1/0", "run-1/1", "run-1/2", "run-1/3"]
    for call in data["calls"]:
        assert list(call["links"]) == LINKS, "links come in chain order"
        assert call["events"], "each call names the events that made it"


def test_a_clean_read(filled: Path) -> None:
    read = evidence(filled)["calls"][0]
    assert statuses(read) == {
        "trace": "ok",
        "identity": "ok",
        "tool": "ok",
        "schema": "ok",
        "arguments": "ok",
        "approval": "none",
        "receipt": "none",
        "filtering": "ok",
        "outcome": "ok",
    }
    assert read["gaps"] == []
    assert read["complete"] is True
    assert read["links"]["tool"]["value"] == "crm/get_customer version 1.4.0"
    assert read["links"]["identity"]["record"] == {"principal": "alice", "tenant": "acme"}
    assert read["links"]["arguments"]["value"] == arguments_digest({"customer_id": 42})
    filtering = read["links"]["filtering"]
    assert filtering["record"]["result_digest"].startswith("sha256:")
    assert filtering["record"]["filter_report"] == FILTERED
    assert "1 secrets redacted, 2 PII values tokenised, 0 content blocks dropped" in filtering["value"]


def test_an_approved_write_with_a_receipt(filled: Path) -> None:
    write = evidence(filled)["calls"][1]
    assert statuses(write)["approval"] == "ok"
    assert statuses(write)["receipt"] == "ok"
    approval = write["links"]["approval"]
    assert approval["record"]["approver"] == "bob"
    assert approval["record"]["used_by_call"] == "run-1/1"
    assert approval["record"]["args_digest"] == approval_digest(
        write["links"]["arguments"]["record"]["args_digest"], PIN
    )
    assert write["links"]["receipt"]["value"] == "note-7"
    assert write["links"]["outcome"]["value"] == "succeeded"
    assert write["gaps"] == []


def test_a_denied_call_ends_at_its_gate_and_hides_secrets(filled: Path) -> None:
    denied = evidence(filled)["calls"][2]
    assert statuses(denied) == {
        "trace": "ok",
        "identity": "ok",
        "tool": "ok",
        "schema": "ok",
        "arguments": "ok",
        "approval": "n/a",
        "receipt": "n/a",
        "filtering": "n/a",
        "outcome": "ok",
    }
    assert denied["complete"] is True
    assert denied["links"]["outcome"]["value"] == "denied by the consent gate"
    assert denied["links"]["outcome"]["record"]["gate"] == "consent"
    result = run("show", "run-1", "--evidence", "--config", str(filled))
    assert PASSWORD not in json.dumps(denied)
    assert PASSWORD not in result.stdout


def test_missing_links_are_named(filled: Path) -> None:
    data = evidence(filled)
    bare = data["calls"][3]
    assert bare["gaps"] == ["tool", "schema", "receipt", "filtering"]
    assert bare["complete"] is False
    assert data["complete"] is False
    assert "not made against an approved pin" in bare["links"]["schema"]["note"]
    assert "without a receipt" in bare["links"]["receipt"]["note"]


def test_the_table_marks_gaps_and_keeps_the_call_order(filled: Path) -> None:
    result = run("show", "run-1", "--evidence", "--config", str(filled))
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert text.startswith("run run-1  ok  alice@acme  trace trace-1")
    assert "4 calls; 1 with gaps" in text
    positions = [text.index(f"run-1/{seq}  crm/") for seq in range(4)]
    assert positions == sorted(positions)
    bare = text[positions[3] :]
    assert "✗ MISSING" in bare
    assert "gaps: server and tool version, schema hash, external receipt, result filtering" in bare
    denied = text[positions[2] : positions[3]]
    assert "MISSING" not in denied
    assert "chain complete" in denied
    assert "✓ ok" in text
    assert "note-7" in text


def test_one_call_shows_its_chain_with_its_run(filled: Path) -> None:
    data = evidence(filled, "run-1/1")
    assert data["run"]["run_id"] == "run-1"
    assert [c["call_id"] for c in data["calls"]] == ["run-1/1"]


def test_an_unknown_id_says_so_and_how_to_find_one(filled: Path) -> None:
    result = run("show", "run-9", "--evidence", "--config", str(filled))
    assert result.exit_code == 1
    assert "no call or run 'run-9'" in result.stderr
    assert "codemode ledger list --runs" in result.stderr


def test_an_approval_of_another_call_is_a_mismatch(config: Path, intent: Intent, binding: RunBinding) -> None:
    with open_ledger(config.parent / "codemode.db") as store:
        store.begin_run(binding, "sha256:code")
        other = _approve(store, "run-1/9")
        _run_call(store, intent(0, approval_id=other), ToolResult(structured={"receipt": "r-1"}), "r-1")
        _run_call(store, intent(1, key="k2", approval_id="appr_gone"), ToolResult(structured={}), "r-2")
    first, second = evidence(config)["calls"]
    assert first["links"]["approval"]["status"] == "mismatch"
    assert "used by run-1/9" in first["links"]["approval"]["note"]
    assert second["links"]["approval"]["status"] == "mismatch"
    assert "not in the ledger" in second["links"]["approval"]["note"]
    table = run("show", "run-1", "--evidence", "--config", str(config)).stdout
    assert table.count("✗ MISMATCH") == 2


def test_an_approval_for_other_arguments_is_unverified(
    config: Path, intent: Intent, binding: RunBinding
) -> None:
    with open_ledger(config.parent / "codemode.db") as store:
        store.begin_run(binding, "sha256:code")
        approval_id = _approve(store, "run-1/0", {**WRITE_ARGS, "pinned": True})
        _run_call(store, intent(0, approval_id=approval_id), ToolResult(structured={}), "r-1")
    (call,) = evidence(config)["calls"]
    assert call["links"]["approval"]["status"] == "unverified"
    assert "approval" in call["gaps"]


def test_an_approval_recorded_before_approvals_named_the_pin_still_verifies(
    config: Path, intent: Intent, binding: RunBinding
) -> None:
    with open_ledger(config.parent / "codemode.db") as store:
        store.begin_run(binding, "sha256:code")
        approval_id = _approve(store, "run-1/0", legacy=True)
        _run_call(store, intent(0, approval_id=approval_id), ToolResult(structured={}), "r-1")
    (call,) = evidence(config)["calls"]
    assert call["links"]["approval"]["status"] == "ok"
    assert call["links"]["approval"]["note"] == "bound to this call's argument digest"


@pytest.mark.parametrize("gives_receipts", [True, False])
def test_unknown_and_in_flight_calls(
    config: Path, intent: Intent, binding: RunBinding, gives_receipts: bool
) -> None:
    with open_ledger(config.parent / "codemode.db") as store:
        store.begin_run(binding, "sha256:code")
        if gives_receipts:
            _run_call(store, intent(9, key="z"), ToolResult(structured={"receipt_id": "r-9"}), "r-9")
        lost = store.reserve(intent(0, key="a"), send=True)
        assert isinstance(lost, Fresh)
        store.mark_unknown(lost.call_id, "timed out after 30 s")
        flying = store.reserve(intent(1, key="b"), send=True)
        assert isinstance(flying, Fresh)
        data = evidence(config)
    unknown, in_flight = (c for c in data["calls"] if c["call_id"] in ("run-1/0", "run-1/1"))
    assert unknown["links"]["outcome"]["status"] == "missing"
    assert "codemode ledger reconcile run-1/0" in unknown["links"]["outcome"]["note"]
    # Either way the call is a gap: its outcome is unknown. Its receipt is one only from a
    # server that gives them.
    assert unknown["complete"] is False
    assert unknown["links"]["receipt"]["status"] == ("missing" if gives_receipts else "n/a")
    assert statuses(in_flight)["outcome"] == "pending"
    assert statuses(in_flight)["receipt"] == "pending"
    assert data["run"]["status"] == "running"


def _write(store: SqliteLedger, seq: int, server: str, receipt: str | None) -> None:
    """An approved write to ``server``, answered with ``receipt`` (None: the answer had none)."""
    approval_id = _approve(store, f"run-1/{seq}", server=server)
    answer = {"receipt_id": receipt} if receipt else {"ok": True}
    write = make_intent(seq, server=server, key=f"note-{seq}", approval_id=approval_id, tool_version="1")
    _run_call(store, write, ToolResult(structured=answer), receipt=receipt)


@pytest.fixture
def mixed(config: Path, binding: RunBinding) -> Path:
    """run-1: crm gives receipts (one write has one, one has none); memory never gives any."""
    with open_ledger(config.parent / "codemode.db") as store:
        store.begin_run(binding, "sha256:code")
        _write(store, 0, "crm", "note-7")
        _write(store, 1, "crm", None)
        _write(store, 2, "memory", None)
        _write(store, 3, "memory", None)
        store.finish_run(binding.run_id, "ok", {"calls": 4})
    return config


def test_a_write_to_a_server_that_gives_no_receipts_is_not_a_gap(mixed: Path) -> None:
    data = evidence(mixed)
    by_id = {c["call_id"]: c for c in data["calls"]}
    for call_id in ("run-1/2", "run-1/3"):
        receipt = by_id[call_id]["links"]["receipt"]
        assert receipt["status"] == "n/a"
        assert receipt["note"].startswith("this server gives no receipts")
        assert receipt["gap"] is False
        assert receipt["record"]["server_gives_receipts"] is False
        assert by_id[call_id]["complete"] is True, "every link that can exist is there"
    assert statuses(by_id["run-1/0"])["receipt"] == "ok"


def test_a_missing_receipt_from_a_server_that_gives_them_is_still_a_gap(mixed: Path) -> None:
    data = evidence(mixed)
    lacking = next(c for c in data["calls"] if c["call_id"] == "run-1/1")
    assert lacking["links"]["receipt"]["status"] == "missing"
    assert lacking["links"]["receipt"]["record"]["server_gives_receipts"] is True
    assert lacking["gaps"] == ["receipt"]
    assert data["complete"] is False
    # One call alone (`ledger show CALL --evidence`) is judged by the same ledger.
    assert evidence(mixed, "run-1/1")["calls"][0]["links"]["receipt"]["status"] == "missing"
    assert evidence(mixed, "run-1/2")["calls"][0]["links"]["receipt"]["status"] == "n/a"


def test_the_table_shows_n_a_for_a_server_without_receipts_and_counts_only_real_gaps(mixed: Path) -> None:
    result = run("show", "run-1", "--evidence", "--config", str(mixed))
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "4 calls; 1 with gaps" in text
    assert "no receipt expected from memory: no call to it in this ledger recorded one" in text
    starts = [text.index(f"run-1/{seq}  ") for seq in range(4)]
    lacking, silent = text[starts[1] : starts[2]], text[starts[2] : starts[3]]
    assert "✗ MISSING" in lacking
    assert "MISSING" not in silent
    assert "this server gives no receipts" in silent
    assert "chain complete" in silent


def test_a_reconciled_call_shows_who_settled_it_and_on_what(
    config: Path, intent: Intent, binding: RunBinding
) -> None:
    with open_ledger(config.parent / "codemode.db") as store:
        store.begin_run(binding, "sha256:code")
        lost = store.reserve(intent(0, key="a"), send=True)
        assert isinstance(lost, Fresh)
        store.mark_unknown(lost.call_id, "timed out")
        store.resolve(lost.call_id, "succeeded", "note 8 is in the CRM", receipt="note-8", resolved_by="cli")
    (call,) = evidence(config)["calls"]
    assert statuses(call)["outcome"] == "ok"
    assert call["links"]["outcome"]["value"] == "reconciled succeeded"
    assert call["links"]["outcome"]["note"] == "by cli: note 8 is in the CRM"
    assert call["links"]["receipt"]["value"] == "note-8"
    assert statuses(call)["filtering"] == "n/a", "no server answer went through the filter"


def test_a_run_without_calls(config: Path, binding: RunBinding) -> None:
    with open_ledger(config.parent / "codemode.db") as store:
        store.begin_run(binding, "sha256:code")
    assert evidence(config)["calls"] == []
    result = run("show", "run-1", "--evidence", "--config", str(config))
    assert result.exit_code == 0
    assert "no calls" in result.stdout


def test_help_describes_the_evidence_option() -> None:
    text = run("show", "--help").stdout
    assert "--evidence" in text
    assert "MISSING" in text


def test_a_replay_points_to_the_call_that_ran(config: Path, intent: Intent, binding: RunBinding) -> None:
    with open_ledger(config.parent / "codemode.db") as store:
        store.begin_run(binding, "sha256:code")
        _run_call(store, intent(0, key="a"), ToolResult(structured={"receipt": "r-1"}), "r-1")
        assert store.reserve(intent(1, key="a")).kind == "replay"
    first, replay = evidence(config)["calls"]
    assert statuses(first)["receipt"] == "ok"
    assert {name: statuses(replay)[name] for name in ("approval", "receipt", "filtering", "outcome")} == {
        "approval": "n/a",
        "receipt": "n/a",
        "filtering": "n/a",
        "outcome": "ok",
    }
    assert replay["links"]["outcome"]["value"] == "replayed run-1/0"


def test_a_call_recorded_for_another_actor_or_trace_than_its_run_is_a_mismatch(
    config: Path, intent: Intent, binding: RunBinding
) -> None:
    with open_ledger(config.parent / "codemode.db") as store:
        store.begin_run(binding, "sha256:code")
        store.mark_denied(intent(0, key=None, principal="mallory"), gate="principal", reason="no")
        store.mark_denied(intent(1, key=None, trace_id="trace-other"), gate="principal", reason="no")
    other_actor, other_trace = evidence(config)["calls"]
    assert statuses(other_actor)["identity"] == "mismatch"
    assert other_actor["links"]["identity"]["note"] == "the run acts for alice@acme"
    assert statuses(other_actor)["trace"] == "ok"
    assert statuses(other_trace)["trace"] == "mismatch"
    assert statuses(other_trace)["identity"] == "ok"
    assert other_trace["links"]["approval"]["note"] == "not reached: the principal gate denied the call"


@pytest.mark.parametrize("flags", [["--evidence"], []])
def test_an_id_with_brackets_is_quoted_as_typed(filled: Path, flags: list[str]) -> None:
    result = run("show", "run[/]-9", *flags, "--config", str(filled))
    assert result.exit_code == 1
    assert "no call or run 'run[/]-9'" in result.stderr


def test_a_receipt_given_when_reconciling_does_not_make_a_server_one_that_gives_them(
    config: Path, binding: RunBinding
) -> None:
    """A person's read-back settles one call; the server's own answers still never had a receipt."""
    with open_ledger(config.parent / "codemode.db") as store:
        store.begin_run(binding, "sha256:code")
        lost = store.reserve(make_intent(0, server="memory", key="a"), send=True)
        assert isinstance(lost, Fresh)
        store.mark_unknown(lost.call_id, "timed out")
        store.resolve(lost.call_id, "succeeded", "entity is there", receipt="seen-1", resolved_by="cli")
        _write(store, 1, "memory", None)
    settled, write = evidence(config)["calls"]
    assert statuses(settled)["receipt"] == "ok"
    assert write["links"]["receipt"]["status"] == "n/a"
    assert write["complete"] is True
