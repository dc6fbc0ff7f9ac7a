"""The host directory where sandboxes' channel sockets and bookkeeping live, and orphan detection.

Layout (``base`` is ``/run/codemode`` for root, else ``$XDG_RUNTIME_DIR/codemode`` or
``/tmp/codemode-<uid>``)::

    base/                      0711: traversable, not listable
      runtime-<hash>/          the in-sandbox runtime for the process backend (read-only copy)
      <sandbox-id>/            0711, host-owned: only the host writes here
        meta.json              0600: who owns this sandbox (host pid + start time), its pool, uid, pid
        runtime.log            the process backend's runtime stderr (capped by RLIMIT_FSIZE)
        ch/                    the channel directory, the only part the sandbox sees
          channel.sock, secret removed as soon as the sandbox has authenticated

Sandbox ids are 64 random bits: without root, the unlistable base plus the unguessable name is
what keeps other local users away from a socket before its sandbox connects.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from codemode._runtime_dir import runtime_dir, same_process
from codemode.errors import SandboxError

__all__ = ["HostToken", "StateDir", "default_base", "same_process"]


def default_base() -> Path:
    return runtime_dir("codemode")


@dataclass(frozen=True)
class HostToken:
    """Identifies this host process across pid reuse: hostname, pid and the process start time."""

    hostname: str
    pid: int
    started: float

    @classmethod
    def current(cls) -> HostToken:
        return cls(socket.gethostname(), os.getpid(), psutil.Process().create_time())

    def encode(self) -> str:
        return f"{self.hostname}:{self.pid}:{self.started:.3f}"

    @classmethod
    def decode(cls, text: str) -> HostToken | None:
        try:
            hostname, pid, started = text.rsplit(":", 2)
            return cls(hostname, int(pid), float(started))
        except ValueError:
            return None

    def alive(self) -> bool:
        """Whether the process this token names is still running (always True for another machine)."""
        return self.hostname != socket.gethostname() or same_process(self.pid, self.started)


class StateDir:
    def __init__(self, base: Path | None = None, *, pool_id: str = "") -> None:
        """``pool_id`` (the manager's) goes into each sandbox's meta, as its label does on a
        container, so a caller can tell its own sandboxes from a neighbour's."""
        self.base = base or default_base()
        self.token = HostToken.current()
        self.pool_id = pool_id

    def ensure(self) -> None:
        try:
            self.base.mkdir(mode=0o711, parents=True, exist_ok=True)
            info = self.base.lstat()
        except OSError as exc:
            raise SandboxError(f"cannot create the sandbox state directory {self.base}: {exc}") from exc
        # Refuse a directory someone else prepared for us (e.g. in a shared /tmp).
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
            raise SandboxError(
                f"the sandbox state directory {self.base} is not a private directory owned by this user; "
                "remove it or set XDG_RUNTIME_DIR"
            )
        self.base.chmod(0o711)

    def new_sandbox(self, backend: str) -> tuple[str, Path]:
        sandbox_id = secrets.token_hex(8)
        # Prepared under a hidden name and renamed, so an orphan sweep never sees it without meta.
        staging = self.base / f".new-{sandbox_id}"
        staging.mkdir(mode=0o711)
        staging.chmod(0o711)
        self.write_meta(staging, {"backend": backend, "pool": self.pool_id})
        root = self.base / sandbox_id
        staging.rename(root)
        return sandbox_id, root

    def write_meta(self, root: Path, extra: dict[str, Any]) -> None:
        meta = self.read_meta(root) or {}
        meta.update(extra, owner=self.token.encode())
        tmp = root / "meta.json.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(meta, handle)
        tmp.replace(root / "meta.json")

    @staticmethod
    def read_meta(root: Path) -> dict[str, Any] | None:
        try:
            data = json.loads((root / "meta.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None  # pyright: ignore[reportUnknownVariableType]

    def orphans(self) -> list[tuple[Path, dict[str, Any]]]:
        """Sandbox directories whose owning host process is gone."""
        found: list[tuple[Path, dict[str, Any]]] = []
        if not self.base.is_dir():
            return found
        for entry in self.base.iterdir():
            if entry.name.startswith("runtime-") or not entry.is_dir():
                continue
            if entry.name.startswith(".gone-"):  # its remover died (or is still at it: harmless)
                shutil.rmtree(entry, ignore_errors=True)
                continue
            meta = self.read_meta(entry)
            token = HostToken.decode(str(meta.get("owner", ""))) if meta else None
            # A staging directory without meta may be one a live host is preparing right now; one
            # with meta names its owner, so a host that died before the rename leaves no litter.
            if entry.name.startswith(".") and token is None:
                continue
            if token is None or not token.alive():
                found.append((entry, meta or {}))
        return found

    @staticmethod
    def remove(root: Path) -> None:
        # Renamed out of sight first: rmtree deletes meta.json before the rest, and a directory
        # seen without meta in between would be nobody's (an orphan to a sweep, a stray to a count).
        gone = root.with_name(f".gone-{root.name}")
        try:
            root.rename(gone)
        except FileNotFoundError:
            return
        shutil.rmtree(gone, ignore_errors=True)
