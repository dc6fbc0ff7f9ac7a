"""SIGTERM and SIGHUP end a command as cleanly as Ctrl-C: cleanup runs, exit status 128 + signo.

The helper is tested on a small script of its own; `codemode run` and `codemode serve` are tested
as real subprocesses on the Docker backend: after the signal (or, for serve over stdio, the end of
its input) no container with the run's pool label and no MCP server process is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from click.testing import CliRunner

from codemode.cli._main import cli
from codemode.cli._signals import run_until_signalled

CLI = [sys.executable, "-m", "codemode.cli"]
SIGNALS = [signal.SIGTERM, signal.SIGHUP, signal.SIGINT]


def wait_until(predicate: Callable[[], bool], *, within_s: float = 60.0, what: str) -> None:
    deadline = time.monotonic() + within_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within_s:g} s waiting for: {what}")
        time.sleep(0.05)


# -- the helper ----------------------------------------------------------------------------------


def test_it_returns_the_result_and_raises_the_body_s_own_exception() -> None:
    async def answer(value: int) -> int:
        await anyio.sleep(0.001)
        return value * 2

    async def broken() -> None:
        raise ValueError("the body's own error")

    assert threading.current_thread() is threading.main_thread()
    assert run_until_signalled(answer, 21) == 42
    with pytest.raises(ValueError, match="the body's own error"):  # not wrapped in an ExceptionGroup
        run_until_signalled(broken)
    # The handlers are gone afterwards: SIGTERM has its default action again.
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_off_the_main_thread_it_is_plain_anyio_run() -> None:
    async def answer() -> str:
        return "from a worker thread"

    results: list[str] = []
    worker = threading.Thread(target=lambda: results.append(run_until_signalled(answer)))
    worker.start()
    worker.join()
    assert results == ["from a worker thread"]


SCRIPT = textwrap.dedent(
    """
    import contextlib, os, sys
    import anyio
    from codemode.cli._signals import run_until_signalled

    @contextlib.asynccontextmanager
    async def resource():
        try:
            yield
        finally:
            with anyio.CancelScope(shield=True):
                # A cleanup that lasts until the test says so (it must not be cut short).
                while not os.path.exists(sys.argv[1]):
                    await anyio.sleep(0.01)
            print("cleaned up", flush=True)

    async def body():
        async with resource():
            print("ready", flush=True)
            await anyio.sleep_forever()

    run_until_signalled(body)
    print("not reached", flush=True)
    """
)


def as_from_a_terminal() -> None:
    # A command typed at a terminal starts with SIGINT handled by default; the test runner itself
    # may have been started as a background job, which ignores SIGINT and hands that on.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start_body(
    tmp_path: Path, preexec: Callable[[], object] = as_from_a_terminal
) -> tuple[subprocess.Popen[str], Path]:
    script = tmp_path / "body.py"
    script.write_text(SCRIPT)
    release = tmp_path / "cleanup-may-finish"
    proc = subprocess.Popen(
        [sys.executable, str(script), str(release)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=preexec,  # only sets a signal disposition before exec
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == "ready\n"
    return proc, release


@pytest.mark.integration
@pytest.mark.parametrize("signo", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_a_signal_cancels_the_body_runs_its_cleanup_and_exits_128_plus_signo(
    tmp_path: Path, signo: int
) -> None:
    proc, release = _start_body(tmp_path)
    assert proc.stderr is not None
    proc.send_signal(signo)
    assert f"{signal.Signals(signo).name} received" in proc.stderr.readline()
    if signo != signal.SIGINT:
        # Another SIGTERM or SIGHUP during the cleanup (a closed terminal, an impatient supervisor)
        # does not cut it short.
        other = signal.SIGHUP if signo == signal.SIGTERM else signal.SIGTERM
        proc.send_signal(other)
        assert f"{signal.Signals(other).name} received again" in proc.stderr.readline()
    release.touch()
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signo, err
    assert out == "cleaned up\n"


@pytest.mark.integration
def test_a_signal_ignored_at_start_stays_ignored_like_under_nohup(tmp_path: Path) -> None:
    proc, release = _start_body(tmp_path, lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    assert proc.stderr is not None
    proc.send_signal(signal.SIGHUP)
    proc.send_signal(signal.SIGTERM)
    # Had SIGHUP been handled, it would have been reported first (and ended the body).
    assert "SIGTERM received" in proc.stderr.readline()
    release.touch()
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert out == "cleaned up\n"


@pytest.mark.integration
def test_a_second_ctrl_c_exits_at_once(tmp_path: Path) -> None:
    proc, _ = _start_body(tmp_path)
    assert proc.stderr is not None
    proc.send_signal(signal.SIGINT)
    assert "SIGINT received" in proc.stderr.readline()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGINT, err
    assert "exiting without finishing the cleanup" in err
    assert out == ""


# -- codemode run and serve on the Docker backend --------------------------------------------


@pytest.fixture(scope="module")
def docker_workspace(tmp_path_factory: pytest.TempPathFactory, docker_image: str) -> Path:
    """The demo servers, synced and approved, with the Docker backend and the default warm pool."""
    image = docker_image
    config = tmp_path_factory.mktemp("signals") / "codemode.toml"
    runner = CliRunner()
    assert runner.invoke(cli, ["init", "--demo", "--config", str(config)]).exit_code == 0
    text = config.read_text()
    assert "[sandbox]\n" in text
    config.write_text(text.replace("[sandbox]\n", f'[sandbox]\nbackend = "docker"\nimage = "{image}"\n'))
    for args in (["sync"], ["pin", "--approve"]):
        result = runner.invoke(cli, [*args, "--config", str(config)])
        assert result.exit_code == 0, result.output
    return config


class Engine:
    """The Docker engine as the tests see it: containers and creations of one pool label."""

    def __init__(self) -> None:
        import docker

        self.client: Any = docker.from_env(timeout=30)

    def containers(self, pool_id: str, *, running: bool = False) -> list[str]:
        """Ids of the containers with this pool label (one listing call: no inspect races)."""
        listed = self.client.api.containers(all=True, filters={"label": f"codemode.pool={pool_id}"})
        return [str(item["Id"]) for item in listed if not running or item.get("State") == "running"]

    def remove(self, pool_id: str) -> None:
        """After a failed test only: what a killed command left behind."""
        for container in self.containers(pool_id):
            with contextlib.suppress(Exception):
                self.client.api.remove_container(container, force=True)

    def created(self, pool_id: str, since: datetime) -> int:
        """How many containers with this pool label the engine created since ``since``."""
        # The pool label is unique to the test, so a window wider than the run costs nothing and
        # absorbs the engine's whole-second event timestamps and a busy machine's event delivery.
        events = self.client.events(
            since=since - timedelta(seconds=2),
            until=datetime.now(UTC) + timedelta(seconds=2),
            filters={"event": "create", "label": f"codemode.pool={pool_id}"},
            decode=True,
        )
        return sum(1 for _ in events)


@pytest.fixture
def engine() -> Iterator[Engine]:
    engine = Engine()
    yield engine
    engine.client.close()


def pool_env(pool_id: str) -> dict[str, str]:
    return {**os.environ, "CODEMODE_POOL_ID": pool_id}


def _alive(processes: list[psutil.Process]) -> list[psutil.Process]:
    out: list[psutil.Process] = []
    for proc in processes:
        with contextlib.suppress(psutil.Error):
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc)
    return out


def _children_of(proc: subprocess.Popen[str]) -> tuple[list[psutil.Process], int]:
    """Every process the command started (MCP servers and their launchers), and how many servers."""
    children = psutil.Process(proc.pid).children(recursive=True)
    servers = [
        child for child in children if child.cmdline()[1:2] and child.cmdline()[1].endswith("_server.py")
    ]
    return children, len(servers)


@pytest.mark.docker
@pytest.mark.parametrize("signo", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: signal.Signals(s).name)
def test_a_signalled_run_removes_its_container_and_servers_and_exits_128_plus_signo(
    docker_workspace: Path, engine: Engine, tmp_path: Path, signo: int
) -> None:
    pool_id = f"signal-{uuid.uuid4().hex}"
    program = tmp_path / "sleeps.py"
    program.write_text("import time\ntime.sleep(600)\n")
    started = datetime.now(UTC)
    proc = subprocess.Popen(
        [*CLI, "run", str(program), "--config", str(docker_workspace)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=pool_env(pool_id),
    )
    try:
        # Without a warm pool the container starts only when the run needs it: the program runs.
        wait_until(lambda: bool(engine.containers(pool_id)), what="the run's sandbox container")
        servers, count = _children_of(proc)
        assert count == 3, "the demo's three MCP servers run"
        proc.send_signal(signo)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            engine.remove(pool_id)
    assert proc.returncode == 128 + signo, err
    # Removed before the process exited: no polling here.
    assert engine.containers(pool_id) == []
    assert _alive(servers) == []
    assert engine.created(pool_id, started) == 1, "a one-shot run starts one sandbox, not the pool"


@pytest.mark.docker
def test_a_finished_run_started_one_sandbox_and_serve_keeps_the_pool_until_stdin_ends(
    docker_workspace: Path, engine: Engine
) -> None:
    run_pool = f"oneshot-{uuid.uuid4().hex}"
    started = datetime.now(UTC)
    completed = subprocess.run(
        [*CLI, "run", "-", "--json", "--config", str(docker_workspace)],
        input="from servers.crm import get_customer\nget_customer(customer_id='CUST-0001')['company']",
        capture_output=True,
        text=True,
        timeout=180,
        env=pool_env(run_pool),
    )
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout)["status"] == "ok"
    assert engine.created(run_pool, started) == 1
    assert engine.containers(run_pool) == []

    serve_pool = f"serve-{uuid.uuid4().hex}"
    serve = subprocess.Popen(
        [*CLI, "serve", "--config", str(docker_workspace)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=pool_env(serve_pool),
    )
    try:
        # serve keeps the configured warm pool (default 2) ready.
        wait_until(
            lambda: len(engine.containers(serve_pool, running=True)) == 2 or serve.poll() is not None,
            what="serve's warm pool",
        )
        assert serve.poll() is None, serve.stderr.read() if serve.stderr else ""
        servers, count = _children_of(serve)
        assert count == 3
        _, err = serve.communicate(input="", timeout=120)  # stdin ends: the MCP host went away
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()
            engine.remove(serve_pool)
    assert serve.returncode == 0, err
    assert engine.containers(serve_pool) == []
    assert _alive(servers) == []


@pytest.mark.docker
@pytest.mark.parametrize(
    ("transport", "signo"), [("stdio", signal.SIGTERM), ("http", signal.SIGTERM), ("http", signal.SIGHUP)]
)
def test_a_signalled_serve_removes_its_pool_and_servers(
    docker_workspace: Path, engine: Engine, transport: str, signo: int
) -> None:
    pool_id = f"serve-signal-{uuid.uuid4().hex}"
    serve = subprocess.Popen(
        [*CLI, "serve", "--transport", transport, "--port", "0", "--config", str(docker_workspace)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=pool_env(pool_id),
    )
    try:
        if transport == "http":
            assert serve.stderr is not None
            assert serve.stderr.readline().startswith("READY http://127.0.0.1:")
        wait_until(
            lambda: len(engine.containers(pool_id, running=True)) == 2 or serve.poll() is not None,
            what="serve's warm pool",
        )
        servers, count = _children_of(serve)
        assert count == 3
        serve.send_signal(signo)
        _, err = serve.communicate(timeout=120)
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()
            engine.remove(pool_id)
    assert serve.returncode == 128 + signo, err
    assert "Traceback" not in err, "the HTTP server shuts down its own way, not torn down mid-task"
    assert engine.containers(pool_id) == []
    assert _alive(servers) == []
