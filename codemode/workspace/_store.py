"""Workspaces on disk: one directory per (tenant, principal, session), replaced whole at each commit.

Layout under the root (private to this user)::

    <key>/meta.json        who it belongs to, and when it was last used
    <key>/current          a link to the live version (written by codemode, never by a sandbox)
    <key>/v-<token>/...    the files of one version
    .locks/<key>           serialises commits, removals and pruning of one workspace

``<key>`` is a digest of the tenant, principal and session, so no name the caller chooses reaches
the file system as a path. A commit writes the new files into a fresh ``v-<token>`` (created here,
so nothing in it can be a link or a device), then swaps ``current`` with a rename: a crash, a full
disk or a refused commit leaves the previous version whole. Reading never follows a link or opens
anything but a regular file.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import secrets
import shutil
import stat
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from codemode._atomic import replace_file
from codemode.errors import CodemodeError
from codemode.workspace._paths import entries, path_problem, tree_problems

__all__ = [
    "Quota",
    "WorkspaceError",
    "WorkspaceInfo",
    "WorkspaceKey",
    "WorkspaceQuotaError",
    "WorkspaceStore",
]

_CURRENT = "current"
_META = "meta.json"
_LOCKS = ".locks"
_VERSION_PREFIX = "v-"
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class WorkspaceError(CodemodeError):
    """A workspace operation that cannot be done (a missing file, a bad name)."""


class WorkspaceQuotaError(WorkspaceError):
    """Files that would not fit the workspace's quota: nothing of them was kept."""


@dataclass(frozen=True)
class WorkspaceKey:
    """Whose workspace: one per (tenant, principal, session), or per principal without a session."""

    tenant: str
    principal: str
    session: str | None = None

    @property
    def digest(self) -> str:
        identity = json.dumps([self.tenant, self.principal, self.session])
        return hashlib.sha256(identity.encode()).hexdigest()[:32]

    def label(self) -> str:
        session = f" session {self.session}" if self.session else ""
        return f"tenant {self.tenant} principal {self.principal}{session}"


@dataclass(frozen=True)
class Quota:
    bytes: int
    files: int
    """Files and directories."""

    def describe(self) -> str:
        return f"{self.bytes} bytes and {self.files} files and directories"


@dataclass(frozen=True)
class WorkspaceInfo:
    key: WorkspaceKey
    last_used: float
    """Seconds since the epoch."""
    files: int
    bytes: int


class WorkspaceStore:
    """The workspaces under ``root``; see the module doc for the layout."""

    def __init__(
        self, root: Path, *, quota: Quota, ttl_s: float, clock: Callable[[], float] = time.time
    ) -> None:
        self.root = root
        self.quota = quota
        self.ttl_s = ttl_s
        self._clock = clock

    # -- reading ------------------------------------------------------------------------------

    def load(self, key: WorkspaceKey, *, touch: bool = True) -> dict[str, bytes]:
        """The files of ``key``'s workspace (empty when it has none); ``touch`` marks it used."""
        version = self._current(key)
        files = dict(_read_tree(version)) if version is not None else {}
        if touch and version is not None:
            with self._locked(key):
                self._write_meta(key)
        return files

    def listing(self, key: WorkspaceKey) -> dict[str, int]:
        """Each file of ``key``'s workspace and its size in bytes, by name."""
        version = self._current(key)
        if version is None:
            return {}
        return {name: len(data) for name, data in _read_tree(version)}

    def read(self, key: WorkspaceKey, name: str) -> bytes:
        """One file of ``key``'s workspace; :class:`WorkspaceError` when it has no such file."""
        problem = path_problem(name)
        if problem is not None:
            raise WorkspaceError(f"{name!r} cannot name a workspace file: {problem}")
        version = self._current(key)
        data = _read_file(version, name) if version is not None else None
        if data is None:
            raise WorkspaceError(
                f"the workspace of {key.label()} has no file {name!r} (see `codemode workspace ls`)"
            )
        return data

    def workspaces(self, *, tenant: str | None = None, principal: str | None = None) -> list[WorkspaceInfo]:
        """Every workspace under the root (optionally of one tenant and/or principal), oldest use first."""
        found: list[WorkspaceInfo] = []
        for key, last_used in self._metas():
            if tenant is not None and key.tenant != tenant:
                continue
            if principal is not None and key.principal != principal:
                continue
            sizes = self.listing(key)
            found.append(WorkspaceInfo(key, last_used, len(sizes), sum(sizes.values())))
        return sorted(found, key=lambda info: info.last_used)

    # -- writing ------------------------------------------------------------------------------

    def check(self, files: Mapping[str, bytes]) -> dict[str, str]:
        """Names that cannot be kept, each with why (see :mod:`codemode.workspace._paths`)."""
        refused = {name: why for name in files if (why := path_problem(name)) is not None}
        refused.update(tree_problems(name for name in files if name not in refused))
        return refused

    def commit(self, key: WorkspaceKey, files: Mapping[str, bytes]) -> None:
        """Make ``files`` the whole content of ``key``'s workspace, or change nothing.

        Raises :class:`WorkspaceError` for a name :meth:`check` refuses and
        :class:`WorkspaceQuotaError` past the quota; an ``OSError`` (a full disk) leaves the
        previous version too.
        """
        refused = self.check(files)
        if refused:
            name, why = sorted(refused.items())[0]
            raise WorkspaceError(f"the workspace cannot hold {name!r}: {why}")
        total = sum(len(data) for data in files.values())
        count = entries(files)
        if total > self.quota.bytes or count > self.quota.files:
            raise WorkspaceQuotaError(
                f"the workspace would hold {total} bytes in {count} files and directories; "
                f"its quota is {self.quota.describe()} ([workspace] quota_bytes, quota_files)"
            )
        with self._locked(key):
            folder = self._folder(key)
            if not files and self._current(key) is None:
                return  # nothing before, nothing now: no directory for it
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            version = f"{_VERSION_PREFIX}{secrets.token_hex(8)}"
            target = folder / version
            try:
                target.mkdir(mode=0o700)
                for name, data in files.items():
                    _write_file(target, name, data)
                link = folder / f".{_CURRENT}.{secrets.token_hex(4)}"
                os.symlink(version, link)
                os.replace(link, folder / _CURRENT)
            except BaseException:
                shutil.rmtree(target, ignore_errors=True)
                raise
            self._write_meta(key)
            for stale in folder.iterdir():
                if stale.name.startswith(_VERSION_PREFIX) and stale.name != version:
                    shutil.rmtree(stale, ignore_errors=True)

    def remove(self, key: WorkspaceKey, name: str | None = None) -> bool:
        """Remove one file (``name``) or the whole workspace; False when there was nothing to remove."""
        if name is None:
            with self._locked(key):
                folder = self._folder(key)
                if not folder.is_dir():
                    return False
                shutil.rmtree(folder)
                return True
        files = self.load(key, touch=False)
        if name not in files:
            return False
        del files[name]
        self.commit(key, files)
        return True

    def prune(self) -> list[WorkspaceInfo]:
        """Remove every workspace unused for longer than the time to live; return what went."""
        cutoff = self._clock() - self.ttl_s
        gone: list[WorkspaceInfo] = []
        for key, last_used in self._metas():
            if last_used >= cutoff:
                continue
            sizes = self.listing(key)
            with self._locked(key):
                # Used again between the listing and the lock? Then it stays.
                meta = _read_meta(self._folder(key) / _META)
                if meta is None or meta[1] >= cutoff:
                    continue
                shutil.rmtree(self._folder(key), ignore_errors=True)
            gone.append(WorkspaceInfo(key, last_used, len(sizes), sum(sizes.values())))
        return gone

    # -- internals ----------------------------------------------------------------------------

    def _folder(self, key: WorkspaceKey) -> Path:
        return self.root / key.digest

    def _current(self, key: WorkspaceKey) -> Path | None:
        folder = self._folder(key)
        try:
            version = os.readlink(folder / _CURRENT)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise WorkspaceError(f"the workspace of {key.label()} is damaged: {exc}") from exc
        if not version.startswith(_VERSION_PREFIX) or "/" in version:
            raise WorkspaceError(f"the workspace of {key.label()} is damaged: 'current' names {version!r}")
        return folder / version

    def _write_meta(self, key: WorkspaceKey) -> None:
        meta = {
            "tenant": key.tenant,
            "principal": key.principal,
            "session": key.session,
            "last_used": self._clock(),
        }
        replace_file(self._folder(key) / _META, lambda handle: json.dump(meta, handle), mode=0o600)

    def _metas(self) -> Iterator[tuple[WorkspaceKey, float]]:
        if not self.root.is_dir():
            return
        for folder in sorted(self.root.iterdir()):
            if folder.name.startswith(".") or folder.is_symlink() or not folder.is_dir():
                continue
            meta = _read_meta(folder / _META)
            if meta is not None and meta[0].digest == folder.name:
                yield meta

    @contextlib.contextmanager
    def _locked(self, key: WorkspaceKey) -> Generator[None]:
        locks = self.root / _LOCKS
        locks.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.root.chmod(0o700)
        fd = os.open(locks / key.digest, os.O_RDWR | os.O_CREAT | _NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)


def _read_meta(path: Path) -> tuple[WorkspaceKey, float] | None:
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
        with os.fdopen(fd, encoding="utf-8") as handle:
            raw = json.load(handle)
        session = raw.get("session")
        key = WorkspaceKey(
            str(raw["tenant"]), str(raw["principal"]), None if session is None else str(session)
        )
        return key, float(raw["last_used"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _read_tree(version: Path) -> Iterator[tuple[str, bytes]]:
    """Every regular file under ``version`` (links and anything else skipped, never followed)."""
    pending = [""]
    while pending:
        prefix = pending.pop()
        with os.scandir(version / prefix if prefix else version) as listing:
            for entry in sorted(listing, key=lambda e: e.name):
                name = f"{prefix}/{entry.name}" if prefix else entry.name
                if entry.is_dir(follow_symlinks=False):
                    pending.append(name)
                elif entry.is_file(follow_symlinks=False):
                    data = _read_file(version, name)
                    if data is not None:
                        yield name, data


def _read_file(version: Path, name: str) -> bytes | None:
    """A regular file's bytes, opened without following a link at any step; None if it is not one."""
    fd = -1
    try:
        fd = os.open(version, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW)
        for part in name.split("/")[:-1]:
            child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = child
        file_fd = os.open(name.split("/")[-1], os.O_RDONLY | _NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
    except OSError:
        return None
    finally:
        if fd >= 0:
            os.close(fd)
    with os.fdopen(file_fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return None
        return handle.read()


def _write_file(version: Path, name: str, data: bytes) -> None:
    """Create ``name`` in the fresh ``version`` directory (its folders too), refusing to reuse anything."""
    folder = version
    for part in name.split("/")[:-1]:
        folder = folder / part
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=0o700)
    fd = os.open(folder / name.split("/")[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
