"""Workspaces: their files in a directory, their metadata in an index (the ledger's table).

Layout under the root (private to this user)::

    <key>/v-<token>/...    the files of one version; the index names the live one
    .locks/<key>           serialises commits, removals and pruning of one workspace

``<key>`` is a digest of the tenant, principal and session, so no name the caller chooses reaches
the file system as a path. Whose each folder is, which version is live, its size and when it was
last used are in the :class:`~codemode.workspace.WorkspaceIndex` (the ledger's ``workspaces``
table), shared by every replica: listing and pruning read the index, never the folders. A commit
writes the new files into a fresh ``v-<token>`` (created here, so nothing in it can be a link or a
device), then records it in the index, which is the moment it becomes live: a crash, a full disk
or a refused commit leaves the previous version whole. Reading never follows a link or opens
anything but a regular file. Folders of an earlier codemode (``meta.json`` and a ``current`` link)
are recorded in the index the first time they are met (:mod:`codemode.workspace._legacy`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import secrets
import shutil
import stat
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from codemode.errors import CodemodeError
from codemode.workspace._index import WorkspaceEntry, WorkspaceIndex
from codemode.workspace._legacy import forget_legacy, read_legacy
from codemode.workspace._paths import entries, path_problem, tree_problems

__all__ = [
    "Quota",
    "WorkspaceError",
    "WorkspaceInfo",
    "WorkspaceKey",
    "WorkspaceQuotaError",
    "WorkspaceStore",
]

_LOCKS = ".locks"
_VERSION_PREFIX = "v-"
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


log = logging.getLogger("codemode.workspace")

_LEFTOVER_AGE_S = 3600.0
"""A version folder that no entry names and is older than this is a killed commit's leftover."""


def _older_than(path: Path, seconds: float) -> bool:
    try:
        return time.time() - path.lstat().st_mtime > seconds
    except OSError:
        return False


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
    missing: bool = False
    """The index lists it, but its files are not under this store's root (see
    :meth:`WorkspaceStore.load`)."""


def _key(entry: WorkspaceEntry) -> WorkspaceKey:
    return WorkspaceKey(entry.tenant, entry.principal, entry.session_id)


class WorkspaceStore:
    """The workspaces under ``root``, recorded in ``index``; see the module doc for the layout."""

    def __init__(
        self,
        root: Path,
        *,
        index: WorkspaceIndex,
        quota: Quota,
        ttl_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.root = root
        self.index = index
        self.quota = quota
        self.ttl_s = ttl_s
        self._clock = clock

    # -- reading ------------------------------------------------------------------------------

    def load(self, key: WorkspaceKey, *, touch: bool = True) -> dict[str, bytes]:
        """The files of ``key``'s workspace (empty when it has none); ``touch`` marks it used.

        Raises :class:`WorkspaceError` when the index lists the workspace but its files are not
        under the root (a root that is not the storage every replica shares): an empty workspace
        in its place would replace them at the next commit."""
        entry = self._entry(key)
        if entry is None:
            return {}
        files = dict(_read_tree(self._live_folder(key, entry)))
        if touch:
            try:
                self.index.used(key.digest, self._now())
            except CodemodeError as exc:  # a lost last use only makes the workspace look older
                log.warning("workspace of %s: its last use was not recorded: %s", key.label(), exc)
        return files

    def listing(self, key: WorkspaceKey) -> dict[str, int]:
        """Each file of ``key``'s workspace and its size in bytes, by name."""
        entry = self._entry(key)
        if entry is None:
            return {}
        return {name: len(data) for name, data in _read_tree(self._live_folder(key, entry))}

    def read(self, key: WorkspaceKey, name: str) -> bytes:
        """One file of ``key``'s workspace; :class:`WorkspaceError` when it has no such file."""
        problem = path_problem(name)
        if problem is not None:
            raise WorkspaceError(f"{name!r} cannot name a workspace file: {problem}")
        entry = self._entry(key)
        data = _read_file(self._live_folder(key, entry), name) if entry is not None else None
        if data is None:
            raise WorkspaceError(
                f"the workspace of {key.label()} has no file {name!r} (see `codemode workspace ls`)"
            )
        return data

    def workspaces(self, *, tenant: str | None = None, principal: str | None = None) -> list[WorkspaceInfo]:
        """Every workspace the index lists (optionally of one tenant and/or principal), oldest use
        first; one whose files are not under the root is marked ``missing``."""
        self._adopt_earlier_folders()
        return [self._info(entry) for entry in self.index.listed(tenant=tenant, principal=principal)]

    def unrecorded(self) -> list[Path]:
        """Folders under the root that the index does not list: left by a commit that crashed
        before it was recorded, or by a ledger that is not this one. Never removed here."""
        return self._adopt_earlier_folders()

    # -- writing ------------------------------------------------------------------------------

    def check(self, files: Mapping[str, bytes]) -> dict[str, str]:
        """Names that cannot be kept, each with why (see :mod:`codemode.workspace._paths`)."""
        refused = {name: why for name in files if (why := path_problem(name)) is not None}
        refused.update(tree_problems(name for name in files if name not in refused))
        return refused

    def commit(self, key: WorkspaceKey, files: Mapping[str, bytes]) -> None:
        """Make ``files`` the whole content of ``key``'s workspace, or change nothing.

        Raises :class:`WorkspaceError` for a name :meth:`check` refuses, for an index that cannot
        record it, or when the live files are missing (see :meth:`load`);
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
            entry = self._entry_locked(key)
            if entry is None and not files:
                return  # nothing before, nothing now: no directory for it
            if entry is not None:
                self._live_folder(key, entry)  # its files must be here, or they would be lost
            folder = self._folder(key)
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            version = f"{_VERSION_PREFIX}{secrets.token_hex(8)}"
            target = folder / version
            try:
                target.mkdir(mode=0o700)
                for name, data in files.items():
                    _write_file(target, name, data)
                with _index_errors(key, "record"):
                    self.index.committed(
                        key.digest,
                        tenant=key.tenant,
                        principal=key.principal,
                        session_id=key.session,
                        version=version,
                        files=len(files),
                        bytes=total,
                        at=self._now(),
                    )
            except BaseException:
                if not self._recorded(key, version):
                    shutil.rmtree(target, ignore_errors=True)
                raise
            replaced = entry.version if entry is not None else None
            # The version this one replaced, and leftovers of a commit killed long ago; never
            # another replica's commit in progress.
            for stale in folder.iterdir():
                other = stale.name.startswith(_VERSION_PREFIX) and stale.name != version
                if other and (stale.name == replaced or _older_than(stale, _LEFTOVER_AGE_S)):
                    shutil.rmtree(stale, ignore_errors=True)

    def remove(self, key: WorkspaceKey, name: str | None = None) -> bool:
        """Remove one file (``name``) or the whole workspace; False when there was nothing to remove.

        The whole workspace goes from the index first, then from the disk: removing one whose
        files are missing forgets it."""
        if name is None:
            with self._locked(key):
                entry = self._entry_locked(key)
                folder = self._folder(key)
                on_disk = folder.is_dir() and not folder.is_symlink()
                if entry is not None:
                    with _index_errors(key, "remove"):
                        self.index.removed(key.digest, at=self._now())
                if on_disk:
                    shutil.rmtree(folder)
                return entry is not None or on_disk
        files = self.load(key, touch=False)
        if name not in files:
            return False
        del files[name]
        self.commit(key, files)
        return True

    def prune(self) -> list[WorkspaceInfo]:
        """Remove every workspace the index says is unused for longer than the time to live;
        return what went. Each removal is decided again inside the index's write, so replicas
        pruning at once remove each workspace once and never one used meanwhile."""
        self._adopt_earlier_folders()
        cutoff = datetime.fromtimestamp(self._clock() - self.ttl_s, UTC)
        gone: list[WorkspaceInfo] = []
        for entry in self.index.listed():
            if entry.last_used >= cutoff:
                continue
            key = _key(entry)
            with self._locked(key):
                with _index_errors(key, "remove"):
                    was = self.index.removed(key.digest, at=self._now(), unused_before=cutoff)
                if was is None:
                    continue  # used again (or removed) since it was listed: it stays
                shutil.rmtree(self._folder(key), ignore_errors=True)
            gone.append(WorkspaceInfo(key, was.last_used.timestamp(), was.files, was.bytes))
        return gone

    # -- internals ----------------------------------------------------------------------------

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self._clock(), UTC)

    def _folder(self, key: WorkspaceKey) -> Path:
        return self.root / key.digest

    def _info(self, entry: WorkspaceEntry) -> WorkspaceInfo:
        key = _key(entry)
        version = entry.version
        missing = version is None or not _is_folder(self._folder(key) / version)
        return WorkspaceInfo(key, entry.last_used.timestamp(), entry.files, entry.bytes, missing)

    def _live_folder(self, key: WorkspaceKey, entry: WorkspaceEntry) -> Path:
        version = entry.version or ""
        if not version.startswith(_VERSION_PREFIX) or "/" in version:
            raise WorkspaceError(f"the workspace of {key.label()} is damaged: its version is {version!r}")
        folder = self._folder(key) / version
        if not _is_folder(folder):
            raise WorkspaceError(
                f"the ledger lists the workspace of {key.label()} (version {version}), but its files "
                f"are not in {self.root}: is [workspace] root the storage every replica shares? "
                f"Nothing was changed; `codemode workspace rm --all {_who(key)}` forgets the workspace"
            )
        return folder

    def _recorded(self, key: WorkspaceKey, version: str) -> bool:
        """Whether the index names ``version`` live, after an error that may have come after the
        index recorded it (a connection lost after COMMIT); when that cannot be told, say so, and
        the folder is kept: a stray folder costs disk, a removed live one the workspace."""
        try:
            found = self.index.find(key.digest)
        except CodemodeError:
            return True
        return found is not None and found.version == version

    def _entry(self, key: WorkspaceKey) -> WorkspaceEntry | None:
        entry = self.index.find(key.digest)
        if entry is None and read_legacy(self._folder(key)) is not None:
            with self._locked(key):
                return self._entry_locked(key)
        return entry

    def _entry_locked(self, key: WorkspaceKey) -> WorkspaceEntry | None:
        """The index's entry, after recording a folder of an earlier codemode (under the lock)."""
        entry = self.index.find(key.digest)
        folder = self._folder(key)
        legacy = read_legacy(folder) if entry is None else None
        if legacy is None or WorkspaceKey(legacy.tenant, legacy.principal, legacy.session) != key:
            return entry
        version = folder / legacy.version
        if not _is_folder(version):
            return None
        sizes = [len(data) for _, data in _read_tree(version)]
        with _index_errors(key, "record"):
            entry = self.index.committed(
                key.digest,
                tenant=key.tenant,
                principal=key.principal,
                session_id=key.session,
                version=legacy.version,
                files=len(sizes),
                bytes=sum(sizes),
                at=datetime.fromtimestamp(legacy.last_used, UTC),
            )
        forget_legacy(folder)
        return entry

    def _adopt_earlier_folders(self) -> list[Path]:
        """Record every folder of an earlier codemode in the index; return the folders it still
        does not list."""
        if not self.root.is_dir():
            return []
        listed = {entry.workspace_id for entry in self.index.listed()}
        unrecorded: list[Path] = []
        for folder in sorted(self.root.iterdir()):
            if folder.name.startswith(".") or folder.name in listed or not _is_folder(folder):
                continue
            legacy = read_legacy(folder)
            if legacy is not None:
                key = WorkspaceKey(legacy.tenant, legacy.principal, legacy.session)
                if key.digest == folder.name:
                    with self._locked(key):
                        if self._entry_locked(key) is not None:
                            continue
            unrecorded.append(folder)
        return unrecorded

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


@contextlib.contextmanager
def _index_errors(key: WorkspaceKey, doing: str) -> Generator[None]:
    """The index's own failures (a ledger out of reach) as a :class:`WorkspaceError`, which the
    engine turns into a note on the run instead of a failed run."""
    try:
        yield
    except WorkspaceError:
        raise
    except CodemodeError as exc:
        raise WorkspaceError(f"the ledger could not {doing} the workspace of {key.label()}: {exc}") from exc


def _who(key: WorkspaceKey) -> str:
    """The ``codemode workspace`` options that name ``key``."""
    session = f" --session {key.session}" if key.session else ""
    return f"--tenant {key.tenant} --principal {key.principal}{session}"


def _is_folder(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


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
