"""The workspace part of a run's reply: the host checks what the sandbox says, and the runtime
never sends what it must not (a link's target, an overrun's bytes, a reply too big to send)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from codemode.errors import ChannelError
from codemode.sandbox._outcome import parse_reply

REPLY: dict[str, Any] = {
    "status": "ok",
    "result_kind": "stdout",
    "stdout": "",
    "stdout_truncated": False,
    "stderr": "",
    "stderr_truncated": False,
    "error": None,
}


def test_a_workspace_reply_is_decoded_from_base64() -> None:
    workspace = {"files": {"a.txt": "aGk="}, "refused": {"l": "a symbolic link"}, "error": None}
    parsed = parse_reply({**REPLY, "workspace": workspace})
    assert parsed.workspace is not None
    decoded = parsed.workspace.decoded()
    assert (decoded.files, decoded.refused, decoded.error) == (
        {"a.txt": b"hi"},
        {"l": "a symbolic link"},
        None,
    )


@pytest.mark.parametrize(
    "workspace",
    [
        {"files": {"a": 1}, "refused": {}, "error": None},
        {"files": {}, "refused": {}},
        {"files": {}, "refused": {}, "error": None, "extra": 1},
        {"files": [], "refused": {}, "error": None},
    ],
)
def test_a_malformed_workspace_reply_is_a_protocol_violation(workspace: dict[str, Any]) -> None:
    with pytest.raises(ChannelError, match="malformed run reply"):
        parse_reply({**REPLY, "workspace": workspace})


def test_a_workspace_file_that_is_not_base64_is_a_protocol_violation() -> None:
    parsed = parse_reply(
        {**REPLY, "workspace": {"files": {"a": "not base64!"}, "refused": {}, "error": None}}
    )
    assert parsed.workspace is not None
    with pytest.raises(ChannelError, match="not base64"):
        parsed.workspace.decoded()


def _in_runtime(staged: Path, body: str) -> Any:
    script = f"import json, sys\nsys.path.insert(0, {str(staged)!r})\n" + textwrap.dedent(body)
    done = subprocess.run([sys.executable, "-I", "-c", script], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.integration
def test_a_reply_too_big_to_send_drops_the_workspace_with_a_reason(staged: Path) -> None:
    shown = _in_runtime(
        staged,
        """
        from codemode_runtime._program import without_output
        reply = {"status": "ok", "result_kind": "stdout", "stdout": "x", "stdout_truncated": False,
                 "stderr": "", "stderr_truncated": False, "error": None,
                 "workspace": {"files": {"a": "eA=="}, "refused": {"l": "a link"}, "error": None}}
        print(json.dumps(without_output(reply)["workspace"]))
        """,
    )
    assert shown["files"] == {} and shown["refused"] == {"l": "a link"}
    assert "max_frame_bytes" in shown["error"]


@pytest.mark.integration
def test_the_runtime_refuses_names_that_leave_the_workspace(staged: Path, tmp_path: Path) -> None:
    shown = _in_runtime(
        staged,
        f"""
        from codemode_runtime import _workspace
        _workspace.configure({str(tmp_path / "ws")!r})
        import os
        os.mkdir({str(tmp_path / "ws")!r})
        try:
            _workspace.prepare({{"files": {{"../escape": ""}}, "quota_bytes": 10, "quota_files": 10}})
        except ValueError as exc:
            print(json.dumps(str(exc)))
        """,
    )
    assert "bad workspace file name '../escape'" in shown
    assert not (tmp_path / "escape").exists()


@pytest.mark.integration
def test_an_overrun_is_found_from_sizes_without_reading_it(staged: Path, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    with (ws / "huge.bin").open("wb") as handle:
        handle.truncate(1 << 40)  # sparse: a terabyte that reading would never finish
    shown = _in_runtime(
        staged,
        f"""
        from codemode_runtime import _workspace
        _workspace.configure({str(ws)!r})
        _workspace._quota = (1024, 10)
        print(json.dumps(_workspace.collect(False)))
        """,
    )
    assert shown["files"] == {}
    assert "the program left 1099511627776 bytes in 1 files and directories" in shown["error"]
