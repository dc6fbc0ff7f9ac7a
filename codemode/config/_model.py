"""The shape of ``codemode.toml``, validated with pydantic.

Every section forbids unknown keys, so a typo is an error that names the key instead of a
setting that silently does nothing. Secrets are written as ``${ENV_VAR}`` references and stay
unresolved in these models; :mod:`codemode.config._secrets` resolves them on the host, at
connect time only.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    field_validator,
    model_validator,
)

from codemode.config._batch import BatchConfig
from codemode.config._compensation import Compensations
from codemode.config._oauth import OAuthSettings
from codemode.config._policy import PolicyConfig
from codemode.config._retention import LedgerRetention
from codemode.config._search import SearchConfig
from codemode.config._secrets import check_references, resolve_references
from codemode.config._serve import ServeConfig, identity_problems
from codemode.config._workspace import WorkspaceConfig

SERVER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")

ProtocolChoice = Literal["auto", "legacy", "2026-07-28"]
BackendChoice = Literal["auto", "docker", "bwrap", "process"]
"""``[sandbox] backend``: ``auto`` tries docker, then bwrap, then (with a warning) process."""
MAX_CALL_SLOTS = 1024
"""The largest ``max_concurrent_calls`` of a server."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _ServerCommon(_Section):
    trusted: bool = False
    """Trust the server's own annotations (``readOnlyHint`` …). Untrusted servers' hints are ignored."""
    enabled: bool = True
    protocol: ProtocolChoice = "auto"
    """``auto`` tries the stateless 2026-07-28 revision and falls back to the 2025-11-25 handshake;
    ``legacy`` forces the handshake; ``2026-07-28`` forces the stateless revision."""
    connect_timeout: float = Field(default=30.0, gt=0, le=600)
    """Seconds allowed for starting the server, negotiating the protocol and listing what it
    offers; each later re-listing (after a list change) gets as long."""
    call_timeout: float = Field(default=60.0, gt=0, le=86_400)
    """Seconds allowed for one call, resource read or prompt (a task-backed tool call may run
    longer; its polling requests each get this)."""
    max_concurrent_calls: int | None = None
    """At most this many requests (tool calls, resource reads, prompts) in flight to this server
    at once, across every run of the process (``serve``, ``batch``, ``run``); the others wait
    their turn, and one that waits longer than ``call_timeout`` is refused, unsent. For a server
    that loses work under concurrent requests. Unset: no limit beyond the policy's budget."""
    reconnect: bool = True
    """Reconnect (with backoff) when the server fails or its connection is lost."""
    max_message_bytes: int = Field(default=16 * 1024 * 1024, ge=64 * 1024, le=1024 * 1024 * 1024)
    """The most of one message from the server that is read into memory. A longer tool result is
    cut here and arrives ``ok`` with a truncation marker; any other longer message fails its
    request only. The policy's ``max_tool_result_bytes`` then cuts results further."""
    elicitation: Literal["relay", "deny"] = "relay"
    """When the server asks for input during a tool call (MCP elicitation): ``relay`` asks the
    person behind the run (the terminal of ``codemode run``, the Python API's ``elicitor``),
    never the program; with nobody to ask the request is declined. ``deny`` declines every
    request and tells the server that the host cannot elicit at all."""
    sampling: Literal["deny", "relay"] = "deny"
    """When the server asks for a model completion during a tool call (MCP sampling): ``deny``
    (default) does not declare the capability and refuses every request; ``relay`` passes it, after
    the result filter, to the run's model (the MCP client's under ``codemode serve``, the Python
    API's ``sampler``), never to the program, within ``[policy.budget] sampling_tokens_per_run``.
    ``codemode run`` has no model and refuses."""
    roots: list[str] = Field(default_factory=list)
    """Absolute directories offered to the server as its roots (hints only: the policy's path
    scopes stay the enforcement). Empty: the host offers no roots."""

    @field_validator("max_concurrent_calls", mode="before")
    @classmethod
    def _call_slots(cls, value: object) -> object:
        # Checked here, not by Field(ge=...): true is not 1, 2.0 is not a count, and the message
        # says what the number means.
        if value is None:
            return value
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_CALL_SLOTS:
            raise ValueError(
                f"must be a whole number of requests from 1 to {MAX_CALL_SLOTS}, not {value!r} "
                "(leave it out for no limit)"
            )
        return value

    @field_validator("roots")
    @classmethod
    def _absolute_roots(cls, value: list[str]) -> list[str]:
        for root in value:
            if not os.path.isabs(root):
                raise ValueError(f"root {root!r} is not an absolute path; write it as /full/path")
        return value


class StdioServerConfig(_ServerCommon):
    """A server launched as a subprocess and spoken to over its stdin/stdout."""

    transport: Literal["stdio"] = "stdio"
    command: str = Field(min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    """Extra environment for the server process; values may be ``${VAR}`` references."""
    cwd: str | None = None

    @field_validator("env")
    @classmethod
    def _env_refs(cls, value: dict[str, str]) -> dict[str, str]:
        for item in value.values():
            check_references(item)
        return value

    @field_validator("args")
    @classmethod
    def _args_refs(cls, value: list[str]) -> list[str]:
        for item in value:
            check_references(item)
        return value

    def describe(self) -> str:
        return " ".join([self.command, *self.args])


class HttpServerConfig(_ServerCommon):
    """A server reached over Streamable HTTP."""

    transport: Literal["http"] = "http"
    url: str
    headers: dict[str, str] = Field(default_factory=dict)
    """Request headers; values may be ``${VAR}`` references (for example a bearer token)."""
    oauth: OAuthSettings | None = None
    """Sign in with OAuth 2.1 (``codemode auth login NAME``); see :class:`OAuthSettings`."""
    allow_loopback: bool = False
    """Allow a loopback host (``127.0.0.1``, ``::1``, ``localhost``) and, for it only, plain
    ``http://``. Off by default: every other server must be https on a public address."""
    allow_private_network: bool = False
    """Allow private addresses (RFC 1918, unique-local IPv6): a server inside your own network.
    Link-local and cloud-metadata addresses stay refused whatever this says."""

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        check_references(value)
        if not re.match(r"https?://", value):
            raise ValueError("must start with http:// or https://")
        return value

    @field_validator("headers")
    @classmethod
    def _header_refs(cls, value: dict[str, str]) -> dict[str, str]:
        for item in value.values():
            check_references(item)
        return value

    def describe(self) -> str:
        return self.url


def _server_kind(value: Any) -> str | None:
    if isinstance(value, dict):
        if "transport" in value:
            return str(value["transport"])  # pyright: ignore[reportUnknownArgumentType]
        if "url" in value:
            return "http"
        if "command" in value:
            return "stdio"
        return None
    return getattr(value, "transport", None)


ServerConfig = Annotated[
    Annotated[StdioServerConfig, Tag("stdio")] | Annotated[HttpServerConfig, Tag("http")],
    Discriminator(
        _server_kind,
        custom_error_type="server_kind",
        custom_error_message="a server needs either 'command' (stdio) or 'url' (Streamable HTTP)",
    ),
]


class SandboxConfig(_Section):
    """Where and how programs run. Limits apply per run."""

    backend: BackendChoice = "auto"
    """``auto`` uses Docker when an engine and the image are there, else bubblewrap when it can run
    sandboxes, else (with a warning) the much weaker process backend."""
    image: str = "codemode-sandbox:latest"
    memory_mb: int = Field(default=512, ge=16, le=65_536)
    cpus: float = Field(default=1.0, gt=0, le=64)
    pids: int = Field(default=64, ge=4, le=4096)
    wall_time_s: float = Field(default=60.0, gt=0, le=86_400)
    output_bytes: int = Field(default=65_536, ge=1024, le=64 * 1024 * 1024)
    """Cap on captured stdout and on stderr (each)."""
    result_bytes: int = Field(default=65_536, ge=1024, le=64 * 1024 * 1024)
    """Cap on the final result returned to the model."""
    tmpfs_mb: int = Field(default=64, ge=1, le=16_384)
    nofile: int = Field(default=256, ge=16, le=65_536)
    pool_size: int = Field(default=2, ge=0, le=64)
    """Warm containers (or processes) kept ready; 0 starts one per run."""
    max_frame_bytes: int = Field(default=16 * 1024 * 1024, ge=4096, le=256 * 1024 * 1024)
    """Largest single message accepted on a run's channel (a run's reply with its output may use
    all of it). A request from the program (a tool call with its arguments, a resource read, a
    prompt) may use a quarter of it, at least 4 MiB (or all of it, if that is less): 4 MiB by
    default; a bigger one is refused and the program's call raises. Either way a message may hold
    at most 1,048,576 JSON values (containers opened plus commas between items), nested at most
    64 deep: a message over either is a protocol violation and ends the run's sandbox."""
    max_inflight_calls: int = Field(default=32, ge=1, le=1024)
    """Requests from one sandbox handled at once; beyond that the host stops reading its channel.
    It also stops while the requests being handled hold four of the largest requests' bytes, or
    1,048,576 JSON values, in all."""
    start_timeout_s: float = Field(default=30.0, gt=0, le=600)
    """Time allowed for a new sandbox to start and connect to its channel."""
    process_python: str | None = None
    """Interpreter for the process and bwrap backends (Python >= 3.11). Default: this one, or a system python3
    when the sandbox's private uid cannot read this one (e.g. a pyenv Python under /root)."""
    cgroups: Literal["auto", "off"] = "auto"
    """How the process and bwrap backends enforce ``memory_mb`` and ``pids``. ``auto``: a cgroup per
    sandbox where this host can make one (v2 with memory and pids delegated, or v1 as root), which
    counts every page the sandbox holds (memfds, shared memory, tmpfs files too); else the watchdog,
    which adds those up ten times a second. ``off``: always the watchdog. ``sandbox doctor`` says
    which is in force."""


class LedgerConfig(_Section):
    path: str = "codemode.db"
    """SQLite file of the operation ledger, relative to the config file (batch job state is
    kept beside it, also with ``url``)."""
    url: str | None = None
    """A ``postgresql://`` URL: the ledger then lives in that database, shared by every codemode
    that points at it (needs ``pip install 'codemode[postgres]'``). Put the password in a
    ``${ENV}`` reference, never in the file."""
    store_arguments: bool = True
    """Keep each call's canonical arguments (needed to reconcile by read-back; may hold PII)."""
    durability: Literal["full", "write_ahead"] = "full"
    """Which records of a call that may have a side effect are on disk before the program goes on.
    ``full``: the record written before the request leaves, and the outcome's record.
    ``write_ahead``: only the first; the outcome's record is written after the program has its
    answer, batched with others, without an fsync. A crash then may leave an answered write
    ``unknown``, to reconcile; it is never sent twice."""
    retention: LedgerRetention = Field(default_factory=LedgerRetention)
    """When old events move to archive files (``codemode ledger archive``)."""

    @field_validator("url")
    @classmethod
    def _postgres_url(cls, value: str | None) -> str | None:
        if value is not None:
            if not value.startswith(("postgresql://", "postgres://")):
                raise ValueError("must be a postgresql:// URL (for a SQLite file use 'path')")
            check_references(value)
        return value


class PinsConfig(_Section):
    lock_file: str = "codemode.lock"
    """Pinned tool hashes, relative to the config file."""


class Config(_Section):
    """A whole ``codemode.toml``."""

    servers: dict[str, ServerConfig] = Field(default_factory=dict)
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    ledger: LedgerConfig = Field(default_factory=LedgerConfig)
    pins: PinsConfig = Field(default_factory=PinsConfig)
    serve: ServeConfig = Field(default_factory=ServeConfig)
    batch: BatchConfig = Field(default_factory=BatchConfig)
    search: SearchConfig = Field(default_factory=SearchConfig)
    workspace: WorkspaceConfig = Field(default_factory=WorkspaceConfig)
    compensation: Compensations = Field(default_factory=lambda: {})
    """``[compensation."server/tool"]``: the call that undoes each tool's completed call."""

    _base_dir: Path = PrivateAttr(default_factory=Path.cwd)
    _source: str = PrivateAttr(default="<objects>")

    @field_validator("servers")
    @classmethod
    def _server_names(cls, value: dict[str, Any]) -> dict[str, Any]:
        for name in value:
            if not SERVER_NAME.fullmatch(name):
                raise ValueError(
                    f"server name {name!r} must be 1-64 characters of letters, digits, '_', '-' or '.', "
                    "starting with a letter or digit"
                )
        return value

    @model_validator(mode="after")
    def _serve_callers_fit_the_policy(self) -> Config:
        # Here, not at serve's start: every consumer of the config (serve, the console, a
        # config watch) then agrees that such a token is a mistake.
        problems = identity_problems(self.serve, self.policy)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def base_dir(self) -> Path:
        """Directory that relative paths (lock file, ledger) are resolved against."""
        return self._base_dir

    @property
    def source(self) -> str:
        """Where this config came from (a file path, or ``<objects>``)."""
        return self._source

    def with_origin(self, source: str, base_dir: Path) -> Config:
        self._source = source
        self._base_dir = base_dir
        return self

    @property
    def lock_path(self) -> Path:
        return self.base_dir / self.pins.lock_file

    @property
    def workspace_root(self) -> Path:
        return self.base_dir / self.workspace.root

    @property
    def ledger_path(self) -> Path:
        return self.base_dir / self.ledger.path

    def ledger_location(self, environ: Mapping[str, str] | None = None) -> Path | str:
        """What ``open_ledger`` opens: the ``[ledger] url`` with its ``${ENV}`` references
        resolved (from ``environ``, default this process's), else the SQLite file."""
        if self.ledger.url is None:
            return self.ledger_path
        return resolve_references(self.ledger.url, os.environ if environ is None else environ)

    def enabled_servers(self) -> dict[str, StdioServerConfig | HttpServerConfig]:
        return {name: server for name, server in self.servers.items() if server.enabled}
