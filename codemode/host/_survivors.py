"""The stdio servers this process has running, on record, so that the next codemode can stop the
ones a dead host left behind.

A server dies with its host: the launcher in front of it watches the host's lifeline (see
:mod:`._launcher`). This is the backstop for when it could not: a launcher that was stopped or
starved when the host died, a lifeline that a fork of the host kept open.

Each launcher a host starts is one file in a private runtime directory (see
:func:`codemode._runtime_dir.runtime_dir`), ``<launcher pid>.json``, holding the pid and start
time of the host and of the launcher; the host removes it once the launcher has exited. The
first stdio server a codemode starts reads them all. Where the host is gone and the launcher is
still the process recorded (same pid, same start time: a reused pid is never signalled) and
still leads its process group, the group - the server and all it started - is killed with
SIGKILL: no one can talk to that server any more. The record goes either way.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from dataclasses import dataclass
from pathlib import Path

import psutil

from codemode._atomic import replace_file
from codemode._private_files import private_folder
from codemode._runtime_dir import runtime_dir, same_process

__all__ = ["DIR_NAME", "ServerRecords"]

DIR_NAME = "codemode-servers"


@dataclass(frozen=True, slots=True)
class _Process:
    pid: int
    started: float

    def alive(self) -> bool:
        return same_process(self.pid, self.started)

    def dump(self) -> list[float]:
        return [self.pid, self.started]


class ServerRecords:
    """One folder of launcher records (by default this user's ``codemode-servers`` runtime folder)."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder or runtime_dir(DIR_NAME)
        me = psutil.Process()
        self._host = _Process(me.pid, me.create_time())

    def add(self, launcher_pid: int) -> None:
        """Record a launcher this process started (nothing if it is gone already, or if the
        folder is not this user's alone: then only the lifeline stands between it and an orphan)."""
        try:
            launcher = _Process(launcher_pid, psutil.Process(launcher_pid).create_time())
        except psutil.Error:
            return
        if not self._ready():
            return
        record = {"host": self._host.dump(), "launcher": launcher.dump()}
        with contextlib.suppress(OSError):
            replace_file(self._path(launcher_pid), lambda out: json.dump(record, out), mode=0o600)

    def remove(self, launcher_pid: int) -> None:
        """Forget a launcher that has exited (only this process's own record of that pid)."""
        path = self._path(launcher_pid)
        found = _read(path)
        if found is not None and found[0] == self._host:
            with contextlib.suppress(OSError):
                path.unlink()

    def reap(self) -> list[int]:
        """Kill the process group of every recorded launcher whose host is gone; their pids."""
        if not self.folder.is_dir() or not private_folder(self.folder):
            return []
        killed: list[int] = []
        for path in self.folder.glob("*.json"):
            found = _read(path)
            if found is not None:
                host, launcher = found
                if host == self._host or host.alive():
                    continue
                if launcher.alive() and _leads_group(launcher.pid):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(launcher.pid, signal.SIGKILL)
                        killed.append(launcher.pid)
            with contextlib.suppress(OSError):
                path.unlink()
        return killed

    def _path(self, launcher_pid: int) -> Path:
        return self.folder / f"{launcher_pid}.json"

    def _ready(self) -> bool:
        try:
            self.folder.mkdir(mode=0o700, exist_ok=True)
        except OSError:
            return False
        return private_folder(self.folder)


def _read(path: Path) -> tuple[_Process, _Process] | None:
    """A record's host and launcher; None if it cannot be read (it is then removed by a sweep)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        (host_pid, host_started), (pid, started) = data["host"], data["launcher"]
        return _Process(int(host_pid), float(host_started)), _Process(int(pid), float(started))
    except (OSError, ValueError, TypeError, KeyError):
        return None


def _leads_group(pid: int) -> bool:
    try:
        return os.getpgid(pid) == pid
    except OSError:
        return False
