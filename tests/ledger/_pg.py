"""A throwaway PostgreSQL server for the ledger tests: one per test session (per xdist worker).

The binaries come from Debian's ``postgresql`` package (``./dev test`` installs it as root). The
cluster lives in a temporary directory and listens only on a unix socket there and on 127.0.0.1
at a free port. ``initdb`` refuses to run as root, so as root the cluster runs as the
``postgres`` user. Without the binaries (or psycopg) the tests that need a server are skipped;
``CODEMODE_REQUIRE_POSTGRES=1`` (CI) turns that into a failure.

Tests connect as the role :data:`ROLE` with a password over TCP (scram-sha-256), the way a broker
on another host would; :meth:`PostgresServer.admin` is the superuser over the socket.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import quote

import pytest

if TYPE_CHECKING:
    import psycopg

REQUIRE_POSTGRES = os.environ.get("CODEMODE_REQUIRE_POSTGRES", "").strip() not in ("", "0", "false", "no")
ROLE = "codemode"
SUPERUSER = "postgres"
DEBIAN_BINARIES = Path("/usr/lib/postgresql")


def unavailable(reason: str) -> NoReturn:
    """Skip the test, or fail it when CODEMODE_REQUIRE_POSTGRES is set."""
    if REQUIRE_POSTGRES:
        pytest.fail(f"CODEMODE_REQUIRE_POSTGRES is set but {reason}")
    pytest.skip(reason)


def find_bindir() -> Path | None:
    """The directory of ``initdb`` and ``pg_ctl``: on PATH, else Debian's newest version."""
    on_path = shutil.which("initdb")
    if on_path is not None and shutil.which("pg_ctl") is not None:
        return Path(on_path).parent

    def version(bindir: Path) -> tuple[int, ...]:
        return tuple(int(n) for n in re.findall(r"\d+", bindir.parent.name))

    found = [
        b for b in DEBIAN_BINARIES.glob("*/bin") if (b / "initdb").is_file() and (b / "pg_ctl").is_file()
    ]
    return max(found, key=version, default=None)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PostgresServer:
    """A running cluster; see the module docstring. Start it with :meth:`start`."""

    def __init__(self, root: Path, bindir: Path, run_as: list[str]) -> None:
        self.root = root
        self.data = root / "data"
        self.bindir = bindir
        self.port = 0
        self.password = f"pw:{secrets.token_hex(8)}/@#"  # needs percent-encoding in a URL
        self._run_as = run_as
        self._admin: psycopg.Connection[tuple[Any, ...]] | None = None
        self._databases = 0

    @classmethod
    def start(cls) -> PostgresServer:
        bindir = find_bindir()
        if bindir is None:
            unavailable(
                "the PostgreSQL server binaries (initdb, pg_ctl) are not installed "
                "(Debian: apt-get install postgresql; ./dev test does it as root)"
            )
        try:
            import psycopg  # noqa: F401  # pyright: ignore[reportUnusedImport]
        except ImportError as exc:
            unavailable(f"psycopg is not installed ({exc}): pip install 'codemode[postgres]'")
        run_as: list[str] = []
        owner: pwd.struct_passwd | None = None
        if os.geteuid() == 0:
            try:
                owner = pwd.getpwnam(SUPERUSER)
            except KeyError:
                unavailable("initdb refuses to run as root and there is no 'postgres' user to run it as")
            if shutil.which("runuser") is None:
                unavailable("initdb refuses to run as root and runuser is missing")
            run_as = ["runuser", "-u", SUPERUSER, "--"]
        # Short and private: a unix socket path must stay under ~100 bytes.
        root = Path(tempfile.mkdtemp(prefix="codemode-pg-", dir="/tmp"))
        if owner is not None:
            os.chown(root, owner.pw_uid, owner.pw_gid)
        server = cls(root, bindir, run_as)
        try:
            server._init_cluster()
            server._start_listening()
            server._create_role()
        except BaseException:
            server.stop()
            raise
        return server

    def _run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self._run_as, *argv],
            cwd=self.root,  # the postgres user may not be able to read the caller's directory
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def _init_cluster(self) -> None:
        done = self._run(
            str(self.bindir / "initdb"),
            "--pgdata",
            str(self.data),
            "--username",
            SUPERUSER,
            "--encoding",
            "UTF8",
            "--locale",
            "C",
            "--auth-local",
            "trust",
            "--auth-host",
            "scram-sha-256",
            "--no-sync",  # a throwaway cluster: nothing to keep if the machine crashes
        )
        if done.returncode != 0:
            unavailable(f"initdb failed ({done.returncode}): {done.stderr.strip()[-2000:]}")

    def _start_listening(self) -> None:
        log = self.root / "server.log"
        done: subprocess.CompletedProcess[str] | None = None
        for _ in range(3):  # the free port may be taken between probing and binding it
            self.port = _free_port()
            settings = {
                "listen_addresses": "'127.0.0.1'",  # never any other address
                "port": str(self.port),
                "unix_socket_directories": f"'{self.root}'",
                # Throwaway data: skipping fsync makes each test's CREATE DATABASE and the
                # stores' durable commits cheap. Nothing here has to survive a crash.
                "fsync": "off",
            }
            with (self.data / "postgresql.conf").open("a") as conf:
                conf.write("".join(f"{name} = {value}\n" for name, value in settings.items()))
            done = self._run(
                str(self.bindir / "pg_ctl"),
                "--pgdata",
                str(self.data),
                "--log",
                str(log),
                "-w",
                "-t",
                "60",
                "start",
            )
            if done.returncode == 0:
                return
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else done.stderr if done else ""
        unavailable(f"the PostgreSQL server did not start: {tail.strip()}")

    def admin(self) -> psycopg.Connection[tuple[Any, ...]]:
        """The superuser's connection (autocommit), over the unix socket."""
        import psycopg

        if self._admin is None or self._admin.closed:
            self._admin = psycopg.connect(
                host=str(self.root), port=self.port, user=SUPERUSER, dbname="postgres", autocommit=True
            )
        return self._admin

    def _create_role(self) -> None:
        from psycopg import sql

        self.admin().execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                sql.Identifier(ROLE), sql.Literal(self.password)
            )
        )

    def url(self, dbname: str, *, scheme: str = "postgresql") -> str:
        """The URL a broker would use: the test role, its password, TCP on 127.0.0.1."""
        return f"{scheme}://{ROLE}:{quote(self.password, safe='')}@127.0.0.1:{self.port}/{dbname}"

    def url_with_reference(self, dbname: str, variable: str) -> str:
        """:meth:`url` with ``${variable}`` in place of the password, as a codemode.toml holds it;
        set the variable to :attr:`password_in_url`."""
        return self.url(dbname).replace(self.password_in_url, "${" + variable + "}")

    @property
    def password_in_url(self) -> str:
        """The password as the URL carries it (percent-encoded)."""
        return quote(self.password, safe="")

    def new_database(self) -> str:
        """A new, empty database owned by :data:`ROLE`; its name."""
        from psycopg import sql

        self._databases += 1
        name = f"ledger_{self._databases}_{secrets.token_hex(3)}"
        self.admin().execute(
            sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(name), sql.Identifier(ROLE))
        )
        return name

    def drop_database(self, name: str) -> None:
        from psycopg import sql

        # FORCE: a test may leave a connection behind (a killed client, a failed close).
        self.admin().execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

    def terminate_connections(self, dbname: str) -> int:
        """Kill every session on ``dbname`` as an administrator would; how many there were.

        Returns once they are gone (the 5 s wait of ``pg_terminate_backend``, PostgreSQL 14+).
        """
        found = self.admin().execute(
            "SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (dbname,),
        )
        row = found.fetchone()
        return 0 if row is None else int(row[0])

    def stop(self) -> None:
        if self._admin is not None:
            with contextlib.suppress(Exception):
                self._admin.close()
        if (self.data / "postmaster.pid").exists():
            self._run(
                str(self.bindir / "pg_ctl"), "--pgdata", str(self.data), "-m", "immediate", "-w", "stop"
            )
        shutil.rmtree(self.root, ignore_errors=True)


_server: PostgresServer | None = None
_users = 0


@contextlib.contextmanager
def shared_server() -> Generator[PostgresServer]:
    """The session's server, started on first use and stopped when its last user is done.

    Each test module that needs it declares a session fixture entering this (the contract suite's
    conftest is not visible to ``tests/ledger/test_postgres.py``), so they all share one cluster.
    """
    global _server, _users
    server = _server or PostgresServer.start()
    _server = server
    _users += 1
    try:
        yield server
    finally:
        _users -= 1
        if _users == 0:
            _server = None
            server.stop()
