"""``codemode serve --transport http`` drains on SIGTERM: ``/readyz`` turns 503, new runs are turned
away with a word to retry, the runs in flight finish (within ``[serve] drain_s``, else they are
cancelled), and no container is left. The drain helper is tested on a small script of its own."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import uuid
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.cli.test_signals import Engine as Engine
from tests.cli.test_signals import as_from_a_terminal, docker_workspace, engine, pool_env, wait_until

__all__ = ["docker_workspace", "engine"]  # fixtures, imported to be shared

CLI = [sys.executable, "-m", "codemode.cli"]

DRAIN_SCRIPT = textwrap.dedent(
    """
    import sys
    import anyio
    from codemode.cli._signals import run_draining

    async def body(stop):
        print("ready", flush=True)
        try:
            await stop.wait()
            print("draining", flush=True)
            if sys.argv[1] == "finishes":
                return
            await anyio.sleep_forever()  # work that outlasts the drain
        finally:
            print("cleaned up", flush=True)

    run_draining(body)
    """
)


def _start_drain_body(tmp_path: Path, how: str) -> subprocess.Popen[str]:
    script = tmp_path / "drain.py"
    script.write_text(DRAIN_SCRIPT)
    proc = subprocess.Popen(
        [sys.executable, str(script), how],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=as_from_a_terminal,  # only sets a signal disposition before exec
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == "ready\n"
    return proc


@pytest.mark.integration
@pytest.mark.parametrize("signo", [signal.SIGTERM, signal.SIGINT], ids=lambda s: signal.Signals(s).name)
def test_the_first_signal_asks_the_body_to_finish_and_it_returns(tmp_path: Path, signo: int) -> None:
    proc = _start_drain_body(tmp_path, "finishes")
    proc.send_signal(signo)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signo, err
    assert out == "draining\ncleaned up\n"
    assert "finishing the runs in flight" in err


@pytest.mark.integration
def test_a_second_signal_during_the_drain_cancels_the_body_and_its_cleanup_runs(tmp_path: Path) -> None:
    proc = _start_drain_body(tmp_path, "outlasts")
    assert proc.stdout is not None and proc.stderr is not None
    proc.send_signal(signal.SIGTERM)
    assert proc.stdout.readline() == "draining\n"
    proc.send_signal(signal.SIGINT)  # (a second Ctrl-C here stops now, with the cleanup)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert out == "cleaned up\n"
    assert "stopping sandboxes and servers now" in err


# -- serve on the Docker backend -------------------------------------------------------------------


def _serve_http(workspace: Path, pool_id: str) -> tuple[subprocess.Popen[str], str]:
    serve = subprocess.Popen(
        [*CLI, "serve", "--transport", "http", "--port", "0", "--config", str(workspace)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=pool_env(pool_id),
    )
    assert serve.stderr is not None
    line = serve.stderr.readline()
    assert line.startswith("READY http://127.0.0.1:"), line
    return serve, line.split()[1]


def _run_code_in_thread(url: str, code: str) -> tuple[threading.Thread, list[object]]:
    """``run_code`` from a client of its own, in a thread; its answer (or what it raised) goes in the list."""
    from mcp import Client

    from tests.serve.test_serve import http, text_of

    got: list[object] = []

    async def call() -> None:
        async with Client(http(url, token=None)) as client:
            got.append(text_of(await client.call_tool("run_code", {"code": code})))

    def main() -> None:
        try:
            anyio.run(call)
        except BaseException as exc:  # what the client saw when the server went away
            got.append(exc)

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    return thread, got


def _runs(workspace: Path) -> list[Any]:
    from codemode.ledger import open_ledger

    location = workspace.with_name("codemode.db")
    if not location.exists():
        return []  # created by serve's first run
    ledger = open_ledger(location, create=False)
    try:
        return list(ledger.list_runs(limit=1000))
    finally:
        ledger.close()


def _stop(serve: subprocess.Popen[str], engine: Engine, pool_id: str) -> None:
    if serve.poll() is None:
        serve.kill()
        serve.wait()
        engine.remove(pool_id)


@pytest.mark.docker
def test_sigterm_drains_new_runs_are_turned_away_and_the_run_in_flight_finishes(
    docker_workspace: Path, engine: Engine
) -> None:
    pool_id = f"serve-drain-{uuid.uuid4().hex}"
    before = {run.run_id for run in _runs(docker_workspace)}
    serve, url = _serve_http(docker_workspace, pool_id)
    base = url.rsplit("/", 1)[0]
    try:
        with httpx.Client() as web:
            wait_until(lambda: web.get(base + "/readyz").status_code == 200, what="the warm pool (/readyz)")
        # Long enough to be in flight through the checks below (well within drain_s = 30 s).
        code = "import time\ntime.sleep(8)\n'finished'"
        thread, got = _run_code_in_thread(url, code)
        wait_until(lambda: any(run.run_id not in before for run in _runs(docker_workspace)), what="the run")
        with httpx.Client() as web:
            assert web.get(base + "/readyz").status_code == 200, "a busy replica stays ready"
            serve.send_signal(signal.SIGTERM)
            wait_until(lambda: web.get(base + "/readyz").status_code == 503, what="/readyz to say draining")
            late_thread, late = _run_code_in_thread(url, "'a new run'")
            late_thread.join(timeout=60)
        _, err = serve.communicate(timeout=120)
        thread.join(timeout=60)
    finally:
        _stop(serve, engine, pool_id)
    assert serve.returncode == 128 + signal.SIGTERM, err
    assert len(late) == 1 and isinstance(late[0], str) and "shutting down and takes no new runs" in late[0]
    assert len(got) == 1 and isinstance(got[0], str) and "finished" in got[0], got
    [run] = [run for run in _runs(docker_workspace) if run.run_id not in before]
    assert run.status == "ok"
    assert engine.containers(pool_id) == []


@pytest.mark.docker
def test_a_run_that_outlasts_drain_s_is_cancelled_and_recorded_so(
    docker_workspace: Path, engine: Engine
) -> None:
    text = docker_workspace.read_text()
    short = docker_workspace.with_name("short-drain.toml")  # beside it: the same ledger and pins
    drain = "[serve]\ndrain_s = 1\n"
    short.write_text(text.replace("[serve]\n", drain) if "[serve]\n" in text else text + "\n" + drain)
    pool_id = f"serve-drain-{uuid.uuid4().hex}"
    before = {run.run_id for run in _runs(short)}
    serve, url = _serve_http(short, pool_id)
    base = url.rsplit("/", 1)[0]
    try:
        with httpx.Client() as web:
            wait_until(lambda: web.get(base + "/readyz").status_code == 200, what="the warm pool (/readyz)")
        thread, got = _run_code_in_thread(url, "import time\ntime.sleep(600)")
        wait_until(lambda: any(run.run_id not in before for run in _runs(short)), what="the run")
        serve.send_signal(signal.SIGTERM)
        _, err = serve.communicate(timeout=120)
        thread.join(timeout=60)
    finally:
        _stop(serve, engine, pool_id)
    assert serve.returncode == 128 + signal.SIGTERM, err
    assert "still running after drain_s = 1 s: cancelling them" in err
    assert len(got) == 1 and not (isinstance(got[0], str) and "status: ok" in got[0]), got
    [run] = [run for run in _runs(short) if run.run_id not in before]
    assert run.status in {"cancelled", "interrupted"} and run.finished_at is not None, run
    assert engine.containers(pool_id) == []
