"""Shared plumbing for the example MCP servers (``docs``, ``crm``, ``tickets``).

This module is imported by the server scripts as a plain top-level module (``import _common``):
the scripts are run by path, so their own directory is on ``sys.path``. It holds

* the command line every server shares (``--transport``, ``--host``, ``--port``, ``--stateless``,
  ``--log-level``) and the code that runs a server over stdio or Streamable HTTP;
* the seeded "world" the three servers agree on (customers, staff, products, which customer each
  ticket belongs to), so that joins across servers make sense;
* a durable, append-only write log in SQLite that counts every side effect (used by ``crm`` and
  ``tickets``), and the fault injection switches used by the ledger tests.

Only the standard library, ``mcp`` and ``pydantic`` are used.
"""

from __future__ import annotations

import argparse
import atexit
import base64
import binascii
import contextlib
import inspect
import json
import logging
import os
import random
import shutil
import signal
import socket
import sqlite3
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

import anyio
from anyio import to_thread
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, ToolAnnotations

SERVER_VERSION = "0.1.0"
SEED = "codemode-examples-v1"

log = logging.getLogger("codemode.examples")
_F = TypeVar("_F", bound=Callable[..., Any])

# --------------------------------------------------------------------------------------------
# Tool annotations
# --------------------------------------------------------------------------------------------

READ_ONLY = ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)


def tool(
    server: MCPServer, *, annotations: ToolAnnotations, structured_output: bool | None = None
) -> Callable[[_F], _F]:
    """``@server.tool(...)`` with the function's docstring, dedented, as the description."""

    def decorator(fn: _F) -> _F:
        server.add_tool(
            fn,
            description=inspect.cleandoc(fn.__doc__ or ""),
            annotations=annotations,
            structured_output=structured_output,
        )
        return fn

    return decorator


def write_annotations(*, destructive: bool, open_world: bool = False) -> ToolAnnotations:
    """Annotations of a side-effecting tool. Every call is a new, counted write: never idempotent."""
    return ToolAnnotations(
        read_only_hint=False,
        destructive_hint=destructive,
        idempotent_hint=False,
        open_world_hint=open_world,
    )


# --------------------------------------------------------------------------------------------
# Command line and transports
# --------------------------------------------------------------------------------------------


def build_parser(name: str, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"{name}_server.py", description=description)
    parser.add_argument(
        "--transport",
        choices=["stdio", "http"],
        default="stdio",
        help="stdio (default) or Streamable HTTP",
    )
    parser.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default 127.0.0.1)")
    parser.add_argument(
        "--port",
        type=int,
        default=None,
        help="HTTP port, required with --transport http; 0 picks a free port (see the READY line)",
    )
    parser.add_argument(
        "--stateless",
        action="store_true",
        help="HTTP only: no sessions (stateless_http), as a 2026-07-28-style stateless server",
    )
    parser.add_argument(
        "--log-level",
        default=os.environ.get("EXAMPLE_SERVER_LOG_LEVEL", "WARNING"),
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="log level for stderr (default WARNING)",
    )
    return parser


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.transport == "http":
        if args.port is None:
            parser.error("--transport http needs --port (0 picks a free port)")
        if not 0 <= args.port <= 65535:
            parser.error(f"--port must be between 0 and 65535, not {args.port}")
    elif args.stateless:
        parser.error("--stateless applies only to --transport http")


def configure_logging(level: str) -> None:
    """Log to stderr only: on the stdio transport, stdout carries the protocol."""
    logging.basicConfig(
        level=level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        force=True,
    )


def reject_unknown_tools(server: MCPServer) -> None:
    """Answer a call to an unknown tool with JSON-RPC -32602, as both spec revisions require."""

    async def middleware(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method == "tools/call" and ctx.params is not None:
            name = ctx.params.get("name")
            if isinstance(name, str) and name not in {tool.name for tool in await server.list_tools()}:
                raise MCPError(code=INVALID_PARAMS, message=f"Unknown tool: {name}")
        return await call_next(ctx)

    server.middleware.append(middleware)


def run(server: MCPServer, args: argparse.Namespace) -> None:
    """Serve ``server`` as the parsed command line says. Returns when the server stops."""
    # SIGTERM exits at once, removing a temporary state dir first (uvicorn restores and re-raises it
    # after its graceful shutdown on HTTP).
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    if args.transport == "stdio":
        anyio.run(server.run_stdio_async)
    else:
        with contextlib.suppress(KeyboardInterrupt):
            anyio.run(_serve_http, server, args.host, args.port, args.stateless, args.log_level)


_TEMP_DIRS: list[Path] = []


def _remove_temp_dirs() -> None:
    for path in _TEMP_DIRS:
        shutil.rmtree(path, ignore_errors=True)


atexit.register(_remove_temp_dirs)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    # Not SystemExit: on stdio a worker thread blocks reading stdin and would keep the process alive.
    _remove_temp_dirs()
    os._exit(128 + signum)


async def _serve_http(server: MCPServer, host: str, port: int, stateless: bool, log_level: str) -> None:
    import uvicorn  # the SDK's HTTP dependency; imported here so stdio servers start faster

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        print(f"error: cannot listen on {host}:{port}: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from exc
    sock.listen(128)
    bound_port = sock.getsockname()[1]
    url_host = f"[{host}]" if family == socket.AF_INET6 else host
    url = f"http://{url_host}:{bound_port}/mcp"

    app = server.streamable_http_app(stateless_http=stateless, host=host)
    config = uvicorn.Config(
        app,
        host=host,
        port=bound_port,
        log_config=None,
        access_log=False,
        log_level=log_level.lower(),
        lifespan="on",
        timeout_graceful_shutdown=1,
    )

    class _Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started:
                print(f"READY {url}", file=sys.stderr, flush=True)

    await _Server(config).serve(sockets=[sock])


# --------------------------------------------------------------------------------------------
# Pagination
# --------------------------------------------------------------------------------------------


def encode_cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(f"offset:{offset}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> int:
    """The offset an opaque cursor stands for (0 for no cursor); ToolError for a malformed one."""
    if cursor is None or cursor == "":
        return 0
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        prefix, _, number = raw.partition(":")
        offset = int(number)
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise ToolError(f"invalid cursor {cursor!r}: pass the next_cursor of a previous page") from exc
    if prefix != "offset" or offset < 0:
        raise ToolError(f"invalid cursor {cursor!r}: pass the next_cursor of a previous page")
    return offset


def page_cursor(offset: int, limit: int, total: int) -> str | None:
    return encode_cursor(offset + limit) if offset + limit < total else None


# --------------------------------------------------------------------------------------------
# The shared, seeded world
# --------------------------------------------------------------------------------------------

FIRST_NAMES = (
    "Ada", "Aiko", "Alejandro", "Amara", "Anders", "Ana", "Arjun", "Beatriz", "Bruno", "Camille",
    "Carlos", "Chen", "Chloe", "Dana", "Daniel", "Diego", "Elena", "Emeka", "Emma", "Farah",
    "Felix", "Fatima", "Gabriel", "Grace", "Hana", "Hugo", "Ines", "Isaac", "Ivan", "Jana",
    "Javier", "Jin", "Johan", "Julia", "Kai", "Karin", "Kwame", "Lars", "Laura", "Leila",
    "Liam", "Lucia", "Mateo", "Maya", "Mei", "Mohammed", "Nadia", "Nikhil", "Noah", "Olga",
    "Omar", "Paula", "Pedro", "Rafael", "Rina", "Rosa", "Sara", "Sofia", "Sven", "Tomas",
    "Valentina", "Victor", "Yara", "Yusuf", "Zara", "Zoe",
)  # fmt: skip
LAST_NAMES = (
    "Abe", "Adeyemi", "Alvarez", "Andersson", "Bauer", "Becker", "Bianchi", "Costa", "Dubois",
    "Eriksen", "Fernandes", "Fischer", "Garcia", "Gupta", "Hansen", "Haddad", "Ibrahim", "Ivanova",
    "Jensen", "Kim", "Kowalski", "Kumar", "Laurent", "Lee", "Lindqvist", "Lopez", "Mensah",
    "Moreau", "Muller", "Nakamura", "Novak", "Nowak", "Okafor", "Olsen", "Park", "Patel",
    "Petrov", "Rossi", "Santos", "Sato", "Schmidt", "Silva", "Singh", "Tanaka", "Torres",
    "Van Dijk", "Wagner", "Wang", "Weber", "Yilmaz", "Zhang",
)  # fmt: skip
COMPANY_PREFIXES = (
    "Northwind", "Bluefin", "Cobalt", "Evergreen", "Granite", "Harbor", "Ironclad", "Juniper",
    "Keystone", "Lumen", "Meridian", "Nimbus", "Orchid", "Pinnacle", "Quarry", "Redwood",
    "Sable", "Tidewater", "Umbra", "Vantage", "Willow", "Xenon", "Yellowstone", "Zephyr",
    "Alder", "Brightline", "Crescent", "Driftwood", "Ember", "Foxglove", "Glacier", "Helix",
)  # fmt: skip
COMPANY_SUFFIXES = (
    "Logistics", "Analytics", "Health", "Foods", "Robotics", "Capital", "Energy", "Labs",
    "Media", "Outfitters", "Pharma", "Retail", "Systems", "Telecom", "Travel", "Ventures",
    "Manufacturing", "Insurance", "Education", "Biotech",
)  # fmt: skip
COUNTRIES = {
    # country: (region, phone country code, email tld)
    "US": ("NA", "+1", "com"),
    "CA": ("NA", "+1", "ca"),
    "MX": ("LATAM", "+52", "mx"),
    "BR": ("LATAM", "+55", "com.br"),
    "GB": ("EMEA", "+44", "co.uk"),
    "DE": ("EMEA", "+49", "de"),
    "FR": ("EMEA", "+33", "fr"),
    "NL": ("EMEA", "+31", "nl"),
    "SE": ("EMEA", "+46", "se"),
    "ES": ("EMEA", "+34", "es"),
    "NG": ("EMEA", "+234", "com.ng"),
    "IN": ("APAC", "+91", "in"),
    "JP": ("APAC", "+81", "jp"),
    "SG": ("APAC", "+65", "sg"),
    "AU": ("APAC", "+61", "com.au"),
}
COUNTRY_WEIGHTS = (30, 6, 4, 5, 9, 8, 6, 4, 3, 3, 2, 7, 5, 4, 4)
SEGMENTS = ("enterprise", "mid-market", "smb", "startup")
SEGMENT_WEIGHTS = (15, 30, 40, 15)

# Staff of the company that runs these systems: they speak in the transcripts, write the memos
# and work the tickets. handle -> (full name, team)
STAFF = {
    "priya.shah": ("Priya Shah", "support"),
    "marcus.lee": ("Marcus Lee", "support"),
    "elena.rossi": ("Elena Rossi", "support"),
    "tom.becker": ("Tom Becker", "support"),
    "aisha.okafor": ("Aisha Okafor", "engineering"),
    "kenji.tanaka": ("Kenji Tanaka", "engineering"),
    "sofia.alvarez": ("Sofia Alvarez", "engineering"),
    "david.kim": ("David Kim", "sales"),
    "hannah.weber": ("Hannah Weber", "sales"),
    "lucas.moreau": ("Lucas Moreau", "customer-success"),
    "nina.petrov": ("Nina Petrov", "customer-success"),
    "omar.haddad": ("Omar Haddad", "finance"),
}

# product: list price in USD
PRODUCTS = {
    "Atlas Analytics Seat": 49.0,
    "Atlas Analytics Enterprise Seat": 119.0,
    "Beacon Sync Add-on": 19.0,
    "Compass API 100k Calls": 12.5,
    "Harbor Storage TB": 23.0,
    "Lighthouse Monitoring Host": 15.0,
    "Sentinel SSO": 6.0,
    "Premium Support": 499.0,
    "Onboarding Package": 1500.0,
    "Data Export Connector": 79.0,
}

TICKET_COUNT = 300
FIRST_TICKET = 1001
CUSTOMER_COUNT = 500


def customer_id(number: int) -> str:
    return f"CUST-{number:04d}"


def ticket_id(number: int) -> str:
    return f"TCK-{number}"


@dataclass(frozen=True)
class CustomerBrief:
    """The part of a customer record every server agrees on."""

    customer_id: str
    company: str
    contact_first: str
    contact_last: str
    country: str
    region: str
    segment: str

    @property
    def contact_name(self) -> str:
        return f"{self.contact_first} {self.contact_last}"


@cache
def customers() -> tuple[CustomerBrief, ...]:
    """The 500 customers (CUST-0001 … CUST-0500), always the same."""
    rng = random.Random(f"{SEED}:customers")
    companies = [f"{p} {s}" for p in COMPANY_PREFIXES for s in COMPANY_SUFFIXES]
    rng.shuffle(companies)
    countries = rng.choices(list(COUNTRIES), weights=COUNTRY_WEIGHTS, k=CUSTOMER_COUNT)
    segments = rng.choices(SEGMENTS, weights=SEGMENT_WEIGHTS, k=CUSTOMER_COUNT)
    result: list[CustomerBrief] = []
    for index in range(CUSTOMER_COUNT):
        country = countries[index]
        result.append(
            CustomerBrief(
                customer_id=customer_id(index + 1),
                company=companies[index],
                contact_first=rng.choice(FIRST_NAMES),
                contact_last=rng.choice(LAST_NAMES),
                country=country,
                region=COUNTRIES[country][0],
                segment=segments[index],
            )
        )
    return tuple(result)


def customer_by_id(cid: str) -> CustomerBrief | None:
    try:
        number = int(cid.removeprefix("CUST-"))
    except ValueError:
        return None
    if not cid.startswith("CUST-") or not 1 <= number <= CUSTOMER_COUNT or cid != customer_id(number):
        return None
    return customers()[number - 1]


@cache
def ticket_customers() -> tuple[str, ...]:
    """customer id of ticket TCK-1001 + i, for i in range(300). Some customers file many tickets."""
    rng = random.Random(f"{SEED}:ticket-customers")
    busy = rng.sample(range(1, CUSTOMER_COUNT + 1), 25)
    out: list[str] = []
    for _ in range(TICKET_COUNT):
        number = rng.choice(busy) if rng.random() < 0.45 else rng.randint(1, CUSTOMER_COUNT)
        out.append(customer_id(number))
    return tuple(out)


def ticket_customer(tid: str) -> str | None:
    try:
        number = int(tid.removeprefix("TCK-"))
    except ValueError:
        return None
    index = number - FIRST_TICKET
    if not tid.startswith("TCK-") or not 0 <= index < TICKET_COUNT:
        return None
    return ticket_customers()[index]


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
            _TEMP_DIRS.append(self._state_dir)
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
    parser = build_parser(name, description)
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
    check_args(parser, args)
    configure_logging(args.log_level)
    faults = Faults.from_env(fault_env)
    run(create(resolve_state_dir(args.state_dir, state_env), faults), args)
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
