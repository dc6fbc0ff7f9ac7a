"""Edge cases of the batch runner: item scopes that must not collide, a default job id that
resumes, results over the cap, a wrong --key, and an --out file that a crash cannot cut."""

from __future__ import annotations

import json
import os
import shlex
import signal
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp.server.mcpserver import MCPServer

from codemode import CodeMode
from codemode.batch import BatchError, BatchOptions, SqliteJobStore, StoredItem, _item, prepare_job
from codemode.batch import _runner as runner
from codemode.batch._inputs import InputDigest, read_items
from codemode.batch._jobs import Runnable
from codemode.batch._naming import item_scope
from codemode.batch._out import ResultsFile
from codemode.config import PolicyConfig
from codemode.engine._run_result import RunErrorInfo, RunResult
from codemode.host import ConnectionState, ServerStatus
from tests.test_engine_in_memory import approved_in_memory_crm

from .conftest import CODEMODE, MakeWorkspace

pytestmark = pytest.mark.anyio

WRITE_SAME_NOTE = """
from servers.crm import add_note
add_note(customer_id="C1", text="the same note")
INPUT["id"]
"""

WRITE_THEN_FAIL = """
from servers.crm import add_note
add_note(customer_id="C1", text="charge " + INPUT["id"])
raise RuntimeError("a later step failed")
"""


def crm(writes: list[str]) -> MCPServer:
    app = MCPServer("crm", version="1.0.0")

    @app.tool()
    def add_note(customer_id: str, text: str) -> dict[str, Any]:
        """Add a note."""
        writes.append(text)
        return {"ok": True, "receipt": f"r{len(writes)}"}

    return app


def old_scope(job_id: str, key: str) -> str:
    """The scope as versions before the fix wrote it."""
    return f"job:{job_id}/item:{key}"


# -- 1. item scopes ------------------------------------------------------------------------


def test_item_scopes_no_longer_collide_and_are_unchanged_where_they_did_not() -> None:
    assert item_scope("j", "x/item:y") != item_scope("j/item:x", "y")
    assert item_scope("a%2Fitem:b", "k") != item_scope("a/item:b", "k")
    # Every job id without "/item:" keeps the scope it had, whatever its key holds (a job begun
    # by an earlier version resumes and replays its completed writes).
    for job_id in ("nightly", "job_0123abcd", "2024/01/nightly", "a%2Fb", "j:x"):
        for key in ("7", "doc/1", "x/item:y", "50%", "a:b", "é"):
            assert item_scope(job_id, key) == old_scope(job_id, key)


def test_an_old_job_whose_id_holds_the_scope_separator_is_not_resumed_under_new_scopes(
    tmp_path: Path,
) -> None:
    store = SqliteJobStore(tmp_path / "jobs.db")
    path = tmp_path / "in.jsonl"
    path.write_text('{"id": 1}\n', encoding="utf-8")
    inputs = InputDigest()
    list(read_items(path, "id", inputs))
    for job_id in ("crm/item:sync", "plain"):  # as the previous version left them: no key recorded
        store.begin_registration(job_id, runner.program_digest("INPUT", None))
        store.register(job_id, [("1", 1, {"id": 1})])
        store.finish_registration(job_id, inputs.hexdigest(), [])
    with pytest.raises(BatchError, match="would send its completed writes again"):
        prepare_job(store, "INPUT", path, BatchOptions(job_id="crm/item:sync", key="id", resume=True))
    assert prepare_job(store, "INPUT", path, BatchOptions(job_id="plain", key="id", resume=True)).resumed


@pytest.mark.integration
async def test_two_jobs_whose_scopes_used_to_collide_both_write(tmp_path: Path) -> None:
    writes: list[str] = []
    config, transports = await approved_in_memory_crm(
        tmp_path, crm(writes), policy={"consent": {"never": ["crm/add_note"]}}
    )
    async with CodeMode(config, transports=transports) as engine:
        first = [
            r
            async for r in engine.batch(
                WRITE_SAME_NOTE, [{"id": "x/item:y"}], BatchOptions(job_id="j", key="id", concurrency=1)
            )
        ]
        second = [
            r
            async for r in engine.batch(
                WRITE_SAME_NOTE, [{"id": "y"}], BatchOptions(job_id="j/item:x", key="id", concurrency=1)
            )
        ]
    assert [r.status for r in first + second] == ["done", "done"]
    assert writes == ["the same note", "the same note"], "the second job's write was not swallowed"


@pytest.mark.integration
async def test_a_job_begun_with_the_old_scope_resumes_without_sending_a_write_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes: list[str] = []
    config, transports = await approved_in_memory_crm(
        tmp_path, crm(writes), policy={"consent": {"never": ["crm/add_note"]}}
    )
    items = [{"id": "doc/1%"}]
    with monkeypatch.context() as patched:
        patched.setattr(_item, "item_scope", old_scope)  # as an earlier version ran it
        first = BatchOptions(job_id="2024/nightly", key="id", concurrency=1, max_attempts=1)
        async with CodeMode(config, transports=transports) as engine:
            assert [r.status async for r in engine.batch(WRITE_THEN_FAIL, items, first)] == ["failed"]
    assert writes == ["charge doc/1%"]
    resume = BatchOptions(job_id="2024/nightly", key="id", concurrency=1, max_attempts=2, resume=True)
    async with CodeMode(config, transports=transports) as engine:
        again = [r async for r in engine.batch(WRITE_THEN_FAIL, items, resume)]
    assert [(r.status, r.attempts) for r in again] == [("failed", 2)]
    assert writes == ["charge doc/1%"], "the completed write replayed"


# -- 2. the default job id -----------------------------------------------------------------


def test_the_default_job_id_names_the_same_command_again_and_changes_with_it(tmp_path: Path) -> None:
    store = SqliteJobStore(tmp_path / "jobs.db")
    path = tmp_path / "in.jsonl"
    path.write_text('{"id": 1}\n{"id": 2}\n', encoding="utf-8")
    policy = PolicyConfig()
    first = prepare_job(store, "INPUT", path, BatchOptions(key="id"), policy)
    assert not first.resumed and first.job_id.startswith("job_")
    again = prepare_job(store, "INPUT", path, BatchOptions(key="id"), policy)
    assert again.job_id == first.job_id and again.resumed
    other_ids = {
        prepare_job(store, "INPUT['id']", path, BatchOptions(key="id"), policy).job_id,
        prepare_job(store, "INPUT", path, BatchOptions(key="id", verify="True"), policy).job_id,
        prepare_job(store, "INPUT", path, BatchOptions(), policy).job_id,
        prepare_job(store, "INPUT", path, BatchOptions(key="id", principal="bob"), policy).job_id,
    }
    path.write_text('{"id": 1}\n{"id": 3}\n', encoding="utf-8")
    other_ids.add(prepare_job(store, "INPUT", path, BatchOptions(key="id"), policy).job_id)
    assert len(other_ids) == 5 and first.job_id not in other_ids
    named = prepare_job(store, "INPUT", path, BatchOptions(job_id="mine", key="id"), policy)
    assert named.job_id == "mine" and not named.resumed


def wait_for_text(path: Path, text: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
        if text in found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"{text!r} never appeared in {path}")


@pytest.mark.integration
def test_the_cli_prints_the_resume_command_first_and_running_it_sends_no_write_twice(
    make_workspace: MakeWorkspace,
) -> None:
    ws = make_workspace()
    program = ws.program(
        "import time\nfrom servers.crm import add_note\n"
        "add_note(customer_id=INPUT['customer'], text=f\"batch note {INPUT['id']}\")\n"
        "time.sleep(0.5)\nINPUT['id']\n",
        "slow.py",
    )
    items = ws.items(12)
    args = ["batch", str(program), "--inputs", str(items), "--key", "id", "--json"]
    log = ws.root / "stderr.txt"
    with log.open("w", encoding="utf-8") as err:
        process = subprocess.Popen(
            [*CODEMODE, *args, "--config", str(ws.config)],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            cwd=ws.root,
            env={**os.environ, **ws.env},
            start_new_session=True,
        )
        try:
            printed = wait_for_text(log, "to resume it: ", 120)
            deadline = time.monotonic() + 120
            while len(ws.crm_writes()) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
    line = next(text for text in printed.splitlines() if "to resume it: " in text)
    command = shlex.split(line.split("to resume it: ", 1)[1])
    assert command[:2] == ["codemode", "batch"] and "--resume" in command
    job_id = command[command.index("--job-id") + 1]
    assert line.startswith(f"job {job_id} (new)")
    resumed = subprocess.run(
        [*CODEMODE, *command[1:], "--json"], capture_output=True, text=True, cwd=ws.root, timeout=600
    )
    assert resumed.returncode in (0, 1), resumed.stderr
    summary = json.loads(resumed.stdout)  # stdout is still one document
    counts = summary["counts"]
    # An item killed inside its call is unknown (never sent again); every other one is done.
    assert summary["job_id"] == job_id and summary["resumed"] and counts["done"] + counts["unknown"] == 12
    assert counts["done"] >= 8
    # The same command, without --job-id, names the same job: nothing runs, nothing is sent again.
    same = ws.cli(*args)
    assert json.loads(same.stdout)["ran_now"] == 0 and f"job {job_id} (resumed)" in same.stderr
    writes = ws.crm_writes()
    assert len(writes) >= counts["done"] and len(set(writes)) == len(writes), "no write was sent twice"


# -- 3. results over the cap ---------------------------------------------------------------


@pytest.mark.integration
async def test_a_result_over_result_bytes_fails_instead_of_being_stored_cut(tmp_path: Path) -> None:
    config, transports = await approved_in_memory_crm(
        tmp_path, sandbox={"backend": "process", "pool_size": 0, "result_bytes": 1024}
    )
    program = '"z" * 5000 if INPUT["id"] == "big" else INPUT["id"]'
    options = BatchOptions(job_id="cap", key="id", concurrency=1, max_attempts=1)
    async with CodeMode(config, transports=transports) as engine:
        results = {r.key: r async for r in engine.batch(program, [{"id": "big"}, {"id": "ok"}], options)}
    assert (results["ok"].status, results["ok"].result) == ("done", "ok")
    big = results["big"]
    assert (big.status, big.result) == ("failed", None)
    assert big.error == "result over result_bytes (1024 bytes): raise [sandbox] result_bytes or return less"


# -- 4. --out ------------------------------------------------------------------------------


class CrashingStore:
    """A job store whose second item cannot be read: the write of --out stops halfway."""

    def settled(self, job_id: str, *, leaving_out: Runnable | None = None) -> Iterator[StoredItem]:
        yield StoredItem("a", 1, {}, "done", 1, "run_1", {"v": 1})
        raise OSError("the disk went away")


class Store:
    def settled(self, job_id: str, *, leaving_out: Runnable | None = None) -> Iterator[StoredItem]:
        yield StoredItem("a", 1, {}, "done", 1, "run_1", {"v": 2})


def rewrite(store: object, out: Path) -> None:
    ResultsFile(out).end(store, "j")  # type: ignore[arg-type]


def test_out_is_replaced_whole_or_not_at_all(tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    out.write_text("previous complete results\n", encoding="utf-8")
    out.chmod(0o640)
    with pytest.raises(OSError, match="the disk went away"):
        rewrite(CrashingStore(), out)
    with pytest.raises(BatchError, match=r"cannot write the results to .*results.jsonl: the disk went away"):
        ResultsFile(out).begin(CrashingStore(), "j", Runnable(3))  # type: ignore[arg-type]
    assert out.read_text(encoding="utf-8") == "previous complete results\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.jsonl"], "no temporary file left"
    rewrite(Store(), out)
    assert json.loads(out.read_text(encoding="utf-8"))["result"] == {"v": 2}
    assert stat.S_IMODE(out.stat().st_mode) == 0o640, "the file keeps its mode"
    fresh = tmp_path / "new.jsonl"
    rewrite(Store(), fresh)
    assert fresh.exists() and stat.S_IMODE(fresh.stat().st_mode) & 0o600 == 0o600
    # A link is written through (so is a pipe or /dev/stdout), never replaced by a plain file.
    link = tmp_path / "latest.jsonl"
    link.symlink_to(fresh)
    fresh.write_text("stale\n", encoding="utf-8")
    rewrite(Store(), link)
    assert link.is_symlink() and json.loads(fresh.read_text(encoding="utf-8"))["result"] == {"v": 2}


def test_only_a_tool_of_a_server_names_it_in_an_error() -> None:
    named = _item._names_tool_of  # pyright: ignore[reportPrivateUsage]
    assert named("db", "CallDenied: db/query is not listed by the server now")
    assert named("db", "(db/query) failed")
    assert not named("db", "CallDenied: mydb/query failed")
    assert not named("db", "fetching https://x/db/v1 failed")
    assert not named("db", "db/ alone")


# -- 5. a wrong --key ----------------------------------------------------------------------


def test_a_wrong_key_registers_nothing_and_the_corrected_key_starts_the_job(tmp_path: Path) -> None:
    store = SqliteJobStore(tmp_path / "jobs.db")
    path = tmp_path / "in.jsonl"
    path.write_text('{"id": 1}\n{"id": 2}\n', encoding="utf-8")
    with pytest.raises(BatchError, match=r"all 2 were skipped \(line 1: no 'idd' field.*check --key"):
        prepare_job(store, "INPUT", path, BatchOptions(job_id="e2", key="idd"))
    job = prepare_job(store, "INPUT", path, BatchOptions(job_id="e2", key="id"))
    assert store.counts(job.job_id) == {"pending": 2} and job.bad_lines == []


def test_skipped_lines_are_listed_up_to_a_cap_and_counted_beyond_it(tmp_path: Path) -> None:
    store = SqliteJobStore(tmp_path / "jobs.db")
    path = tmp_path / "in.jsonl"
    path.write_text('{"id": 0}\n' + "broken\n" * (runner.MAX_BAD_LINES + 250), encoding="utf-8")
    job = prepare_job(store, "INPUT", path, BatchOptions(job_id="many", key="id"))
    assert len(job.bad_lines) == runner.MAX_BAD_LINES + 1
    assert job.bad_lines[-1]["reason"] == "and 250 more lines skipped, not listed"
    assert store.counts(job.job_id) == {"pending": 1}


def test_a_job_registered_empty_by_an_older_version_starts_over(tmp_path: Path) -> None:
    store = SqliteJobStore(tmp_path / "jobs.db")
    path = tmp_path / "in.jsonl"
    path.write_text('{"id": 1}\n{"id": 2}\n', encoding="utf-8")
    store.begin_registration("e2", runner.program_digest("INPUT", None))  # no key recorded
    store.finish_registration("e2", "", [{"line": 1, "reason": "no 'idd' field"}])
    job = prepare_job(store, "INPUT", path, BatchOptions(job_id="e2", key="id"))
    assert store.counts(job.job_id) == {"pending": 2}


def test_a_resume_with_another_key_or_strict_over_skipped_lines_is_refused(tmp_path: Path) -> None:
    store = SqliteJobStore(tmp_path / "jobs.db")
    path = tmp_path / "in.jsonl"
    path.write_text('{"id": 1, "n": 5}\n{"id": 2, "n": 6}\nbroken\n', encoding="utf-8")
    prepare_job(store, "INPUT", path, BatchOptions(job_id="k", key="id"))
    with pytest.raises(BatchError, match="started with --key id, not --key n"):
        prepare_job(store, "INPUT", path, BatchOptions(job_id="k", key="n", resume=True))
    with pytest.raises(BatchError, match=r"started with --key id, not no --key \(line numbers\)"):
        prepare_job(store, "INPUT", path, BatchOptions(job_id="k"))
    with pytest.raises(BatchError, match=r"input line 3: .*\(--strict"):
        prepare_job(store, "INPUT", path, BatchOptions(job_id="k", key="id", strict=True))
    assert prepare_job(store, "INPUT", path, BatchOptions(job_id="k", key="id", resume=True)).resumed


@pytest.mark.integration
def test_the_cli_fails_when_a_wrong_key_skips_every_line(make_workspace: MakeWorkspace) -> None:
    ws = make_workspace()
    items = ws.items(3)
    done = ws.cli("batch", str(ws.program()), "--inputs", str(items), "--key", "idd", "--json")
    assert done.returncode == 2 and done.stdout == ""
    assert "all 3 were skipped" in " ".join(done.stderr.split())
    fixed = ws.cli("batch", str(ws.program()), "--inputs", str(items), "--key", "id", "--json")
    assert fixed.returncode == 0, fixed.stderr
    assert json.loads(fixed.stdout)["counts"]["done"] == 3


# -- 6. a server that is down --------------------------------------------------------------


class RestartingEngine:
    """An engine whose crm server is down for the first ``down_runs`` runs (restarting), during
    which a call to it is denied as not listed; ``statuses`` says so."""

    def __init__(self, down_runs: int, error: str | None = None) -> None:
        self.down_runs, self.runs = down_runs, 0
        self.error = error or (
            "denied by the tool gate: crm/add_note is not listed by the server now (removed, still "
            "being re-listed after the server announced a change, or the server is down)"
        )
        self.config = load_config_for_tests()

    async def run(self, program: str, **_: Any) -> RunResult:
        self.runs += 1
        if self.runs <= self.down_runs:
            error = RunErrorInfo(kind="exception", type="codemode.CallDenied", message=self.error)
            return RunResult(
                status="error", error=error, run_id=f"run_{self.runs}", principal="p", tenant="t"
            )
        return RunResult(
            status="ok",
            result="fine",
            result_kind="json",
            run_id=f"run_{self.runs}",
            principal="p",
            tenant="t",
        )

    def statuses(self) -> list[ServerStatus]:
        return [
            crm_status(ConnectionState.CONNECTING if self.runs <= self.down_runs else ConnectionState.READY)
        ]


def crm_status(state: ConnectionState, reconnects: int = 0) -> ServerStatus:
    return ServerStatus(
        name="crm", transport="stdio", target="crm", state=state, sdk_version="1", reconnects=reconnects
    )


def load_config_for_tests() -> Any:
    from codemode.config import config_from_mapping

    return config_from_mapping({"servers": {}}, base_dir=Path("."))


async def test_an_item_waits_for_a_restarting_server_without_spending_an_attempt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_item, "PAUSE_S", (0.0, 0.0))
    engine = RestartingEngine(down_runs=3)
    item = StoredItem("a", 1, {"id": "a"}, "pending", 0)
    result = await _item.run_item(engine, "INPUT", "j", item, 1, BatchOptions())  # type: ignore[arg-type]
    assert (result.status, result.attempts, result.result, engine.runs) == ("done", 1, "fine", 4)


async def test_a_failure_that_names_no_server_that_is_down_is_the_items_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_item, "PAUSE_S", (0.0, 0.0))
    engine = RestartingEngine(down_runs=3, error="KeyError: 'customer'")
    item = StoredItem("a", 1, {"id": "a"}, "pending", 0)
    result = await _item.run_item(engine, "INPUT", "j", item, 1, BatchOptions())  # type: ignore[arg-type]
    assert (result.status, engine.runs) == ("failed", 1)


class QuickRestartEngine(RestartingEngine):
    """The server is back (ready) each time a failed run's end is seen; ``reconnected`` says
    whether it reconnected during that run."""

    def __init__(self, down_runs: int, *, reconnected: bool) -> None:
        super().__init__(down_runs)
        self.reconnected = reconnected

    def statuses(self) -> list[ServerStatus]:
        restarts = min(self.runs, self.down_runs) if self.reconnected else 0
        return [crm_status(ConnectionState.READY, restarts)]


@pytest.mark.parametrize(("reconnected", "expected"), [(True, ("done", 4)), (False, ("failed", 1))])
async def test_a_server_that_restarted_during_the_run_counts_as_down_though_it_is_back(
    monkeypatch: pytest.MonkeyPatch, reconnected: bool, expected: tuple[str, int]
) -> None:
    monkeypatch.setattr(_item, "PAUSE_S", (0.0, 0.0))
    engine = QuickRestartEngine(down_runs=3, reconnected=reconnected)
    item = StoredItem("a", 1, {"id": "a"}, "pending", 0)
    result = await _item.run_item(engine, "INPUT", "j", item, 1, BatchOptions())  # type: ignore[arg-type]
    assert (result.status, engine.runs) == expected


async def test_a_server_down_for_too_long_stops_the_job(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_item, "PAUSE_S", (1.0, 1.0))
    monkeypatch.setattr(_item, "SERVER_OUTAGE_LIMIT_S", 2.0)
    monkeypatch.setattr(_item.anyio, "sleep", _no_sleep)
    engine = RestartingEngine(down_runs=100)
    item = StoredItem("a", 1, {"id": "a"}, "pending", 0)
    with pytest.raises(BatchError, match=r"server 'crm' has been down for 2 s.*--resume"):
        await _item.run_item(engine, "INPUT", "j", item, 1, BatchOptions())  # type: ignore[arg-type]
    assert engine.runs == 3


async def _no_sleep(seconds: float) -> None:
    return None


@pytest.mark.integration
def test_items_that_run_while_a_crashed_server_restarts_do_not_fail(make_workspace: MakeWorkspace) -> None:
    ws = make_workspace(crm_fault="crash_after_write")  # every write is committed, then the server exits
    args = ["batch", str(ws.program()), "--inputs", str(ws.items(3)), "--key", "id", "--json"]
    done = ws.cli(*args, "--concurrency", "1", "--max-attempts", "1")
    summary = json.loads(done.stdout)
    # Each item's call was in flight when its server died (unknown, never re-sent); none failed
    # for running while the server restarted.
    assert summary["counts"]["failed"] == 0 and summary["counts"]["unknown"] == 3, (done.stdout, done.stderr)
    writes = ws.crm_writes()
    assert len(writes) == 3 and len(set(writes)) == 3
