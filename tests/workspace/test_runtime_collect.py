"""What the sandbox runtime sends back of ``/workspace`` after a program: regular files only.
A symbolic link, a FIFO, a unix socket and a device node left by the program are each refused
with what it is, never followed, opened or read (a device could block or leak the host's data)."""

from __future__ import annotations

import base64
import json
import os
import socket
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from codemode.sandbox._files import stage_runtime

pytestmark = pytest.mark.integration  # the runtime runs in a process of its own, as in a sandbox


def _collect(runtime: Path, workspace: Path) -> dict[str, Any]:
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.path.insert(0, {str(runtime)!r})
        from codemode_runtime import _workspace
        _workspace.configure({str(workspace)!r})
        _workspace._quota = (1 << 20, 100)
        print(json.dumps(_workspace.collect(False)))
        """
    )
    done = subprocess.run([sys.executable, "-I", "-c", script], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_links_fifos_sockets_and_devices_are_refused_and_only_files_come_back(tmp_path: Path) -> None:
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    stage_runtime(runtime)
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    (ws / "sub" / "kept.txt").write_bytes(b"kept")
    (ws / "passwd").symlink_to("/etc/passwd")
    os.mkfifo(ws / "pipe")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(ws / "sock"))
    try:
        try:  # the numbers of /dev/zero: reading it would never end
            os.mknod(ws / "zero", stat.S_IFCHR | 0o600, os.makedev(1, 5))
        except PermissionError:
            pytest.skip("making a device node needs root (CAP_MKNOD); ./dev test runs as root")
        shown = _collect(runtime, ws)
    finally:
        listener.close()
    assert shown["error"] is None
    assert shown["files"] == {"sub/kept.txt": base64.b64encode(b"kept").decode("ascii")}
    assert {name: why.split(" (")[0] for name, why in shown["refused"].items()} == {
        "passwd": "a symbolic link",
        "pipe": "a FIFO",
        "sock": "a socket",
        "zero": "a device",
    }
