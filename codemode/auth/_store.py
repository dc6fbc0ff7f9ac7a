"""The host's credential store: OAuth tokens and client registrations, one record per server.

A record is keyed by the server's resource URL (what the tokens are for) and names the issuer
that minted them; the OAuth client drops a record whose issuer no longer matches the server's
authorization server, so a token never reaches another audience. The default store is one JSON
file, mode 0600 in a 0700 directory, written atomically under a lock. It is refused, not
repaired, when other users could read it or when it is not valid: a credential file is never
silently rewritten. :class:`CredentialStore` is the seam a keyring-backed store would fill.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
from collections.abc import Generator, Mapping
from pathlib import Path
from typing import Any, Protocol, cast

from pydantic import BaseModel, ConfigDict, ValidationError

from codemode._atomic import replace_file
from codemode._private_files import private_folder
from codemode.errors import AuthError

__all__ = [
    "CREDENTIALS_ENV_VAR",
    "CredentialStore",
    "FileCredentialStore",
    "StoredCredentials",
    "default_credentials_path",
]

CREDENTIALS_ENV_VAR = "CODEMODE_CREDENTIALS"
"""Overrides where the default store keeps its file."""

_FORMAT = 1


class StoredCredentials(BaseModel):
    """What the host holds for one server. ``client`` and ``tokens`` are the OAuth client
    registration and token response as the authorization server sent them."""

    model_config = ConfigDict(extra="forbid")

    server: str
    """The configured server name (for display; the key is the resource URL)."""
    issuer: str | None = None
    client: dict[str, Any] | None = None
    tokens: dict[str, Any] | None = None
    obtained_at: float | None = None
    """When ``tokens`` arrived (epoch seconds), so their remaining lifetime survives a restart."""
    wanted_scope: str | None = None
    """Every scope an authorization was asked for, including a step-up that could not happen
    without a person: the next sign-in asks for all of it at once."""
    metadata: dict[str, Any] | None = None
    """The metadata (RFC 8414) of the authorization server that issued ``tokens``, as checked at
    sign-in: after a restart the tokens are refreshed at its token endpoint, never at a guess."""

    dpop_key: str | None = None
    """The private key (PEM) that DPoP-bound tokens of this server are bound to; host only."""
    dpop_bound: bool = False
    """Whether ``tokens`` are bound to ``dpop_key`` (sent with a proof, never as bearer tokens)."""

    def expires_at(self) -> float | None:
        lifetime = (self.tokens or {}).get("expires_in")
        if self.obtained_at is None or not isinstance(lifetime, int | float):
            return None
        return self.obtained_at + float(lifetime)


class CredentialStore(Protocol):
    """Where the host keeps credentials. Keys are resource URLs."""

    def get(self, resource: str) -> StoredCredentials | None: ...

    def put(self, resource: str, record: StoredCredentials) -> None: ...

    def delete(self, resource: str) -> bool: ...

    def records(self) -> Mapping[str, StoredCredentials]: ...


def default_credentials_path(environ: Mapping[str, str] | None = None) -> Path:
    """``$CODEMODE_CREDENTIALS``, else ``$XDG_DATA_HOME/codemode/credentials.json`` (by default
    under ``~/.local/share``): outside every workspace, so a sandbox mount never includes it."""
    env = os.environ if environ is None else environ
    if env.get(CREDENTIALS_ENV_VAR):
        return Path(env[CREDENTIALS_ENV_VAR]).expanduser()
    base = Path(env.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "codemode" / "credentials.json"


class FileCredentialStore:
    """A :class:`CredentialStore` in one JSON file readable by its owner only."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path if path is not None else default_credentials_path()

    # -- CredentialStore ---------------------------------------------------------------------

    def get(self, resource: str) -> StoredCredentials | None:
        return self._read().get(resource)

    def put(self, resource: str, record: StoredCredentials) -> None:
        with self._locked():
            records = dict(self._read())
            records[resource] = record
            self._write(records)

    def delete(self, resource: str) -> bool:
        with self._locked():
            records = dict(self._read())
            if records.pop(resource, None) is None:
                return False
            self._write(records)
            return True

    def records(self) -> Mapping[str, StoredCredentials]:
        return self._read()

    # -- the file ------------------------------------------------------------------------------

    def _read(self) -> dict[str, StoredCredentials]:
        try:
            # O_NONBLOCK: a FIFO planted under the name must not hang the command (it is refused).
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise AuthError(f"cannot open the credential store {self.path}: {exc.strerror}") from exc
        try:
            self._check_private(os.fstat(fd))  # before reading: a directory or FIFO is refused here
            self._check_folder()
        except BaseException:
            os.close(fd)
            raise
        with os.fdopen(fd, "rb") as file:
            raw = file.read()
        try:
            data: object = json.loads(raw)
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
            document = cast(dict[str, Any], data)
            servers: object = document.get("servers", {})
            if document.get("format") != _FORMAT or not isinstance(servers, dict):
                raise ValueError("not a codemode credential store (format 1)")
            entries = cast(dict[str, Any], servers)
            return {str(key): StoredCredentials.model_validate(value) for key, value in entries.items()}
        except (ValueError, ValidationError) as exc:
            raise AuthError(
                f"the credential store {self.path} is damaged and was left untouched "
                f"({type(exc).__name__}). Move it aside and sign in again with `codemode auth login`."
            ) from None

    def _check_private(self, info: os.stat_result) -> None:
        if not stat.S_ISREG(info.st_mode):
            raise AuthError(f"the credential store {self.path} is not a regular file; refusing to use it")
        if info.st_uid != os.getuid():
            raise AuthError(f"the credential store {self.path} belongs to another user; refusing to use it")
        if stat.S_IMODE(info.st_mode) & 0o077:
            raise AuthError(
                f"the credential store {self.path} is readable by other users "
                f"(mode {stat.S_IMODE(info.st_mode):04o}); run `chmod 600 {self.path}` and retry"
            )

    def _write(self, records: Mapping[str, StoredCredentials]) -> None:
        document = {
            "format": _FORMAT,
            "servers": {key: record.model_dump(mode="json") for key, record in sorted(records.items())},
        }
        replace_file(self.path, lambda file: json.dump(document, file, indent=2), mode=0o600)

    def _check_folder(self) -> None:
        """In a folder another user owns or can write to, they could plant the lock or the store
        under its name (a symlink to a file of the victim's choosing), or hold the lock forever."""
        folder = self.path.parent
        if not private_folder(folder):
            raise AuthError(
                f"the folder {folder} of the credential store can be written by other users; "
                f"keep it in a folder of your own (chmod 700), or set {CREDENTIALS_ENV_VAR}"
            )

    @contextlib.contextmanager
    def _locked(self) -> Generator[None]:
        """Serialises writers (a refresh in ``codemode batch`` may race a login elsewhere)."""
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._check_folder()
        lock = self.path.with_name(f".{self.path.name}.lock")
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            raise AuthError(f"cannot open the credential store's lock {lock}: {exc.strerror}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)
