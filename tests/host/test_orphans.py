"""A stdio server does not outlive a codemode that was killed.

The server here ignores SIGTERM and the end of its stdin and never answers: only SIGKILL stops
it. codemode is a real ``python -m codemode.cli servers`` process, killed with SIGKILL while it
waits for the server's handshake, so nothing of its own shutdown runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Generator
from pathlib import Path

import psutil
import pytest

from codemode.host._survivors import ServerRecords

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "servers"
STUBBORN = FIXTURES / "stubborn_server.py"


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout:g} s: {what}")
        time.sleep(0.05)


def gone(process: psutil.Process) -> bool:
    try:
        return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def write_config(path: Path, script: Path, *args: str) -> Path:
    path.write_text(
        f"""
[servers.stubborn]
command = {json.dumps(sys.executable)}
args = {json.dumps([str(script), *args])}
connect_timeout = 600
reconnect = false
""",
        encoding="utf-8",
    )
    return path


@contextlib.contextmanager
def codemode_waiting_for_a_stubborn_server(
    tmp_path: Path,
) -> Generator[tuple[subprocess.Popen[bytes], psutil.Process]]:
    """A codemode process waiting for the stubborn server's handshake, and that server."""
    pid_file = tmp_path / "server.pid"
    config = write_config(tmp_path / "codemode.toml", STUBBORN, str(pid_file))
    errors = tmp_path / "codemode.err"
    with errors.open("wb") as stderr:
        codemode = subprocess.Popen(
            [sys.executable, "-m", "codemode.cli", "servers", "--config", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
        )
    server: psutil.Process | None = None
    try:
        wait_for(lambda: pid_file.exists() or codemode.poll() is not None, 120, "the server started")
        assert codemode.poll() is None, errors.read_text(encoding="utf-8", errors="replace")
        server = psutil.Process(int(pid_file.read_text(encoding="utf-8")))
        parent = server.parent()
        assert parent is not None and "_launcher.py" in " ".join(parent.cmdline())
        yield codemode, server
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(codemode.pid, signal.SIGKILL)
        codemode.wait()
        if server is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(os.getpgid(server.pid), signal.SIGKILL)


def test_a_hung_server_dies_with_a_killed_codemode(tmp_path: Path) -> None:
    with codemode_waiting_for_a_stubborn_server(tmp_path) as (codemode, server):
        launcher = server.parent()
        assert launcher is not None
        codemode.kill()
        codemode.wait()
        # Its stdin closed with codemode (ignored), then SIGTERM (ignored), then SIGKILL.
        wait_for(lambda: gone(server), 60, "the server died with its host")
        wait_for(lambda: gone(launcher), 60, "the launcher died with its host")


def test_the_next_codemode_stops_a_server_that_survived_a_killed_one(tmp_path: Path) -> None:
    """The backstop: a launcher that cannot act when its host dies (stopped here) leaves its
    server running, and the next codemode that starts a stdio server kills both."""
    with codemode_waiting_for_a_stubborn_server(tmp_path) as (codemode, server):
        launcher = server.parent()
        assert launcher is not None
        launcher.suspend()
        codemode.kill()
        codemode.wait()
        assert not gone(server), "a stopped launcher cannot stop its server"
        other = tmp_path / "other"
        other.mkdir()
        config = write_config(other / "codemode.toml", FIXTURES / "raw_server.py", "paginated")
        listed = subprocess.run(
            [sys.executable, "-m", "codemode.cli", "servers", "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert listed.returncode == 0, listed.stderr
        wait_for(lambda: gone(server), 60, "the next codemode stopped the survivor")
        assert gone(launcher)


# -- the records, on their own -------------------------------------------------------------------


@contextlib.contextmanager
def a_process(*, new_session: bool = True) -> Generator[psutil.Process]:
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=new_session
    )
    try:
        yield psutil.Process(child.pid)
    finally:
        child.kill()
        child.wait()


def a_dead_process() -> tuple[int, float]:
    with a_process() as process:
        return process.pid, process.create_time()


def record(folder: Path, host: tuple[int, float], launcher: tuple[int, float]) -> Path:
    path = folder / f"{launcher[0]}.json"
    path.write_text(json.dumps({"host": list(host), "launcher": list(launcher)}), encoding="utf-8")
    return path


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    path = tmp_path / "records"
    path.mkdir(mode=0o700)
    return path


def test_a_dead_host_s_launcher_is_killed_with_its_group_and_its_record_removed(folder: Path) -> None:
    with a_process() as launcher:
        path = record(folder, a_dead_process(), (launcher.pid, launcher.create_time()))
        assert ServerRecords(folder).reap() == [launcher.pid]
        wait_for(lambda: gone(launcher), 30, "the launcher was killed")
        assert not path.exists()


def test_a_live_host_s_launcher_and_a_reused_pid_are_left_alone(folder: Path) -> None:
    with a_process() as host, a_process() as launcher, a_process() as reused:
        live = record(folder, (host.pid, host.create_time()), (launcher.pid, launcher.create_time()))
        # A dead host's launcher pid now belongs to another process (it started later).
        stale = record(folder, a_dead_process(), (reused.pid, reused.create_time() - 5.0))
        assert ServerRecords(folder).reap() == []
        assert not gone(launcher) and not gone(reused)
        assert live.exists(), "a live host's record stays"
        assert not stale.exists(), "a dead host's record goes, whatever became of its launcher"


def test_a_process_that_leads_no_group_is_never_signalled(folder: Path) -> None:
    with a_process(new_session=False) as launcher:
        record(folder, a_dead_process(), (launcher.pid, launcher.create_time()))
        assert ServerRecords(folder).reap() == []
        assert not gone(launcher)


def test_unreadable_records_are_removed_and_an_open_folder_is_not_trusted(folder: Path) -> None:
    (folder / "1.json").write_text("{not json", encoding="utf-8")
    (folder / "2.json").write_text(json.dumps({"host": "x"}), encoding="utf-8")
    assert ServerRecords(folder).reap() == []
    assert list(folder.iterdir()) == []
    with a_process() as launcher:
        path = record(folder, a_dead_process(), (launcher.pid, launcher.create_time()))
        folder.chmod(0o777)  # anyone could have planted that record
        assert ServerRecords(folder).reap() == []
        assert not gone(launcher) and path.exists()


def test_a_host_records_its_own_launchers_and_forgets_them(folder: Path) -> None:
    records = ServerRecords(folder)
    with a_process() as launcher:
        records.add(launcher.pid)
        [path] = folder.iterdir()
        data = json.loads(path.read_text(encoding="utf-8"))
        assert data["launcher"] == [launcher.pid, launcher.create_time()]
        assert data["host"][0] == os.getpid()
        assert records.reap() == [], "its own host is alive"
        records.remove(launcher.pid)
        assert list(folder.iterdir()) == []
