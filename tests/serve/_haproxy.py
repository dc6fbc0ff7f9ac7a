"""Debian's HAProxy in front of serve replicas on 127.0.0.1, configured from ``deploy/haproxy.cfg``.

Without the ``haproxy`` binary the tests that need it skip, or fail when
``CODEMODE_REQUIRE_HAPROXY`` is set (CI, where ``./dev test`` installs Debian's ``haproxy``).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Generator, Mapping
from pathlib import Path
from typing import NoReturn

import pytest

REPO = Path(__file__).resolve().parents[2]
DEPLOYED = REPO / "deploy" / "haproxy.cfg"
REQUIRE_HAPROXY = os.environ.get("CODEMODE_REQUIRE_HAPROXY", "").strip() not in ("", "0", "false", "no")
CHECK_INTERVAL = "inter 500ms"
"""Health checks every half second instead of the deployment's 5 s: a test waits for them."""


def unavailable(reason: str) -> NoReturn:
    """Skip the test, or fail it when CODEMODE_REQUIRE_HAPROXY is set."""
    if REQUIRE_HAPROXY:
        pytest.fail(f"CODEMODE_REQUIRE_HAPROXY is set but {reason}")
    pytest.skip(reason)


def haproxy_binary() -> str:
    # Debian installs it in /usr/sbin, which is not on every user's PATH.
    found = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/usr/local/sbin")
    if found is None:
        unavailable("haproxy is not installed (Debian: apt-get install haproxy; ./dev test does it as root)")
    return found


def balancer_config(port: int, replicas: Mapping[str, int]) -> str:
    """``deploy/haproxy.cfg`` with its frontend bound to ``127.0.0.1:port`` only and its servers
    replaced by ``replicas`` (name → port on 127.0.0.1); balancing, readiness checks and
    stickiness stay as deployed. Fails if the deployed file no longer has the lines replaced."""
    deployed = DEPLOYED.read_text(encoding="utf-8")
    config, binds = re.subn(
        r"^([ \t]*)bind[ \t]+\S+[ \t]*$", rf"\g<1>bind 127.0.0.1:{port}", deployed, flags=re.M
    )
    assert binds == 1, f"{DEPLOYED} should have one bind line"
    servers = re.findall(r"^([ \t]*)server[ \t]+\S+[ \t]+\S+[ \t]+check\b.*$", config, flags=re.M)
    assert servers, f"{DEPLOYED} should list its servers with health checks"
    indent = servers[0]
    ours = "\n".join(
        f"{indent}server {name} 127.0.0.1:{replica_port} check {CHECK_INTERVAL}"
        for name, replica_port in replicas.items()
    )
    # Its log goes to stdout, as deployed: running_haproxy keeps it in a file beside the config.
    return re.sub(r"(^[ \t]*server[ \t]+\S+[ \t]+\S+[ \t]+check\b.*\n?)+", ours + "\n", config, flags=re.M)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def running_haproxy(directory: Path, replicas: Mapping[str, int], timeout: float = 30.0) -> Generator[str]:
    """``haproxy -f cfg -db`` in front of ``replicas``; the balancer's base URL (``http://127.0.0.1:N``)."""
    binary = haproxy_binary()
    port = free_port()
    config = directory / "haproxy.cfg"
    config.write_text(balancer_config(port, replicas), encoding="utf-8")
    checked = subprocess.run([binary, "-c", "-f", str(config)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    log = directory / "haproxy.log"
    with log.open("w") as out:
        process = subprocess.Popen([binary, "-f", str(config), "-db"], stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout
        while True:
            assert process.poll() is None, "haproxy exited:\n" + log.read_text(errors="replace")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            assert time.monotonic() < deadline, "haproxy did not listen:\n" + log.read_text(errors="replace")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
