"""Durable writes for the example servers with side effects (``crm``, ``tickets``).

An append-only write log in SQLite that counts every side effect, the command line of a server
with durable writes (``--state-dir``, ``count-writes``), and the fault injection switches used by
the ledger tests. Imported by the server scripts as a plain top-level module (``import _writes``),
like ``_common``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sqlite3
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _common
import anyio
from anyio import to_thread
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

log = _common.log

# --------------------------------------------------------------------------------------------
# Durable write log
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WriteRecord:
    sequence: int
    receipt_id: str
    tool: str
    target_id: str
    arguments: dict[str, Any]


class WriteLog:
    """Append-only log of side effects in ``<state_dir>/writes.sqlite3``.

    Every side-effecting tool call appends exactly one row, in one ``BEGIN IMMEDIATE`` transaction,
    before it answers; the receipt id is derived from the row's sequence number. The count is
    exact under concurrent calls and across processes sharing the directory, and survives
    restarts. The servers rebuild their mutable state from this log, so it is the source of truth.
    """

    FILENAME = "writes.sqlite3"

    def __init__(self, state_dir: Path | None, receipt_prefix: str, name: str = "server") -> None:
        """``state_dir=None``: a temporary directory, made at the first write and removed at exit
        (so read-only use leaves nothing behind, even if the process is killed)."""
        self.prefix = receipt_prefix
        self.name = name
        self._state_dir = state_dir
        self._ready = False
        if state_dir is not None:
            self._ensure()

    @property
    def path(self) -> Path | None:
        return None if self._state_dir is None else self._state_dir / self.FILENAME

    def _ensure(self) -> Path:
        """Create the directory and table if needed; return the database path."""
        if self._state_dir is None:
            self._state_dir = Path(tempfile.mkdtemp(prefix=f"{self.name}-state-"))
            _common.TEMP_DIRS.append(self._state_dir)
            log.warning("%s: writes go to the temporary %s (removed at exit)", self.name, self._state_dir)
        path = self._state_dir / self.FILENAME
        if not self._ready:
            self._state_dir.mkdir(parents=True, exist_ok=True)
            with contextlib.closing(self._connect(path)) as conn:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS writes ("
                    " sequence INTEGER PRIMARY KEY AUTOINCREMENT,"
                    " receipt_id TEXT UNIQUE,"
                    " tool TEXT NOT NULL,"
                    " target_id TEXT NOT NULL,"
                    " arguments TEXT NOT NULL)"
                )
                conn.execute("CREATE INDEX IF NOT EXISTS writes_target ON writes(target_id)")
            self._ready = True
        return path

    @staticmethod
    def _connect(path: Path) -> sqlite3.Connection:
        conn = sqlite3.connect(path, timeout=30, isolation_level=None)
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA busy_timeout=30000")
        return conn

    def receipt_for(self, sequence: int) -> str:
        return f"{self.prefix}_{sequence:06d}"

    def append(self, tool: str, target_id: str, arguments: dict[str, Any]) -> WriteRecord:
        """Durably record one write and return it (with its receipt id). Blocking: run in a thread."""
        conn = self._connect(self._ensure())
        try:
            conn.execute("BEGIN IMMEDIATE")
            cursor = conn.execute(
                "INSERT INTO writes (tool, target_id, arguments) VALUES (?, ?, ?)",
                (tool, target_id, json.dumps(arguments, sort_keys=True)),
            )
            sequence = cursor.lastrowid
            assert sequence is not None
            receipt = self.receipt_for(sequence)
            conn.execute("UPDATE writes SET receipt_id = ? WHERE sequence = ?", (receipt, sequence))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        finally:
            conn.close()
        return WriteRecord(sequence, receipt, tool, target_id, arguments)

    def _select(self, where: str = "", params: Sequence[Any] = ()) -> list[WriteRecord]:
        path = self.path
        if not self._ready and (path is None or not path.exists()):
            return []  # nothing was ever written here
        conn = self._connect(self._ensure())
        try:
            rows = conn.execute(
                f"SELECT sequence, receipt_id, tool, target_id, arguments FROM writes {where} "  # noqa: S608
                "ORDER BY sequence",
                tuple(params),
            ).fetchall()
        finally:
            conn.close()
        return [WriteRecord(r[0], r[1], r[2], r[3], json.loads(r[4])) for r in rows]

    def since(self, sequence: int) -> list[WriteRecord]:
        return self._select("WHERE sequence > ?", (sequence,))

    def get(self, receipt_id: str) -> WriteRecord | None:
        found = self._select("WHERE receipt_id = ?", (receipt_id,))
        return found[0] if found else None

    def count(self) -> int:
        return 0 if self._state_dir is None else count_writes(self._state_dir)


def count_writes(state_dir: Path) -> int:
    """Number of writes recorded in ``state_dir`` (0 if nothing was ever written there)."""
    path = state_dir / WriteLog.FILENAME
    if not path.exists():
        return 0
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        conn.execute("PRAGMA busy_timeout=30000")
        (count,) = conn.execute("SELECT count(*) FROM writes").fetchone()
    finally:
        conn.close()
    return int(count)


def resolve_state_dir(arg: str | None, env_var: str) -> Path | None:
    """The state directory from ``--state-dir`` or the environment; None for a temporary one."""
    value = arg or os.environ.get(env_var)
    return Path(value).expanduser().resolve() if value else None


def main_with_state(
    argv: list[str],
    *,
    name: str,
    description: str,
    state_env: str,
    fault_env: str,
    create: Callable[[Path | None, Faults], MCPServer],
) -> int:
    """Command line of a server with durable writes: serve, or ``count-writes``."""
    if argv[:1] == ["count-writes"]:
        return count_writes_main(argv[1:], state_env, name)
    parser = _common.build_parser(name, description)
    parser.add_argument(
        "--state-dir",
        default=None,
        help=f"where writes are stored (default ${state_env}, else a temp dir removed at exit)",
    )
    parser.epilog = (
        f"'{parser.prog} count-writes --state-dir DIR' prints {{\"writes\": N}}. "
        f"Fault injection: {fault_env}=comma-separated list of {', '.join(FAULT_NAMES)}, slow=SECONDS."
    )
    args = parser.parse_args(argv)
    _common.check_args(parser, args)
    _common.configure_logging(args.log_level)
    faults = Faults.from_env(fault_env)
    _common.run(create(resolve_state_dir(args.state_dir, state_env), faults), args)
    return 0


def count_writes_main(argv: list[str], env_var: str, name: str) -> int:
    """``<server>.py count-writes --state-dir DIR``: print ``{"writes": N}``."""
    parser = argparse.ArgumentParser(
        prog=f"{name}_server.py count-writes", description=f"Print the number of {name} writes as JSON."
    )
    parser.add_argument("--state-dir", default=None, help=f"state directory (default ${env_var})")
    args = parser.parse_args(argv)
    value = args.state_dir or os.environ.get(env_var)
    if not value:
        parser.error(f"give --state-dir or set {env_var}")
    print(json.dumps({"writes": count_writes(Path(value))}))
    return 0


# --------------------------------------------------------------------------------------------
# Fault injection
# --------------------------------------------------------------------------------------------

FAULT_NAMES = (
    "hang_before_write",
    "fail_before_write",
    "hang_after_write",
    "crash_after_write",
    "fail_after_write",
)


@dataclass(frozen=True)
class Faults:
    """Faults switched on by an environment variable such as ``CRM_FAULT=hang_after_write,slow=0.5``.

    * ``fail_before_write`` — side-effecting tools answer ``isError`` "service unavailable (503),
      nothing written" and write nothing (a refused-before-execution failure).
    * ``hang_before_write`` — side-effecting tools never answer and write nothing.
    * ``hang_after_write`` — the write is committed, then the call never answers.
    * ``crash_after_write`` — the write is committed, then the process exits with status 1.
    * ``fail_after_write`` — the write is committed, then the call answers ``isError``
      "internal error (500)" (the server says failure, its state says success).
    * ``slow=<seconds>`` — every tool call (reads too) sleeps that long first.
    """

    active: frozenset[str] = frozenset()
    slow: float = 0.0

    @classmethod
    def parse(cls, spec: str) -> Faults:
        active: set[str] = set()
        slow = 0.0
        for raw in spec.split(","):
            item = raw.strip()
            if not item:
                continue
            if item.startswith("slow="):
                try:
                    slow = float(item.removeprefix("slow="))
                except ValueError as exc:
                    raise ValueError(f"slow=<seconds> needs a number, got {item!r}") from exc
                if slow < 0:
                    raise ValueError(f"slow=<seconds> must not be negative, got {item!r}")
            elif item in FAULT_NAMES:
                active.add(item)
            else:
                known = ", ".join((*FAULT_NAMES, "slow=<seconds>"))
                raise ValueError(f"unknown fault {item!r} (known: {known})")
        return cls(frozenset(active), slow)

    @classmethod
    def from_env(cls, env_var: str) -> Faults:
        spec = os.environ.get(env_var, "")
        try:
            faults = cls.parse(spec)
        except ValueError as exc:
            print(f"error: {env_var}: {exc}", file=sys.stderr, flush=True)
            raise SystemExit(2) from exc
        if faults.active or faults.slow:
            log.warning("fault injection on (%s=%s)", env_var, spec)
        return faults

    def install(self, server: MCPServer) -> None:
        """Make every tool call sleep ``slow`` seconds first."""
        if not self.slow:
            return
        delay = self.slow

        async def middleware(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
            if ctx.method == "tools/call":
                await anyio.sleep(delay)
            return await call_next(ctx)

        server.middleware.append(middleware)

    async def before_write(self) -> None:
        if "fail_before_write" in self.active:
            raise ToolError("service unavailable (503), nothing written; retry later")
        if "hang_before_write" in self.active:
            await anyio.Event().wait()

    async def after_write(self, record: WriteRecord) -> None:
        if "crash_after_write" in self.active:
            log.error("fault crash_after_write: exiting after %s", record.receipt_id)
            logging.shutdown()
            sys.stderr.flush()
            os._exit(1)
        if "hang_after_write" in self.active:
            log.warning("fault hang_after_write: %s committed, never answering", record.receipt_id)
            await anyio.Event().wait()
        if "fail_after_write" in self.active:
            raise ToolError("internal error (500) while finishing the request")


class DurableWriter:
    """Performs a write through the log with the configured faults around it."""

    def __init__(self, log: WriteLog, faults: Faults) -> None:
        self.log = log
        self.faults = faults

    async def write(self, tool: str, target_id: str, arguments: dict[str, Any]) -> WriteRecord:
        await self.faults.before_write()
        record = await to_thread.run_sync(self.log.append, tool, target_id, arguments)
        await self.faults.after_write(record)
        return record
