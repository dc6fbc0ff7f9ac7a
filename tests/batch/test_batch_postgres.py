"""A batch job on the PostgreSQL ledger while the database drops every connection mid-job.

Items whose ledger writes fail pause and run again; nothing is reported done that the ledger
did not record, and the crm server's own log shows one write per item.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Generator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.ledger._pg import PostgresServer

from .conftest import MakeWorkspace
from .test_batch_e2e import batch_args, settle_unknown_notes, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

PASSWORD_ENV = "CODEMODE_TEST_PG_PASSWORD"


@contextlib.contextmanager
def outage(server: PostgresServer, database: str) -> Generator[None]:
    """The database refuses new connections (and its open ones are killed) inside the block."""
    allow = sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS {}")
    server.admin().execute(allow.format(sql.Identifier(database), sql.SQL("false")))
    try:
        yield
    finally:
        server.admin().execute(allow.format(sql.Identifier(database), sql.SQL("true")))


def test_dropped_database_connections_pause_items_and_lose_nothing(
    make_workspace: MakeWorkspace, postgres_server: PostgresServer
) -> None:
    database = postgres_server.new_database()
    url = postgres_server.url_with_reference(database, PASSWORD_ENV)
    ws = make_workspace(crm_fault="slow=0.02", extra=f"\n[ledger]\nurl = {json.dumps(url)}\n")
    ws.env[PASSWORD_ENV] = postgres_server.password_in_url
    process = ws.popen(*batch_args(ws, 60, "outage", "--concurrency", "2", "--json"))
    done = lambda: sum(s == "done" for s in ws.item_states("outage").values())  # noqa: E731
    killed = 0
    for target in (10, 25, 40):
        wait_for(lambda target=target: done() >= target or process.poll() is not None, 300, f"{target} done")
        assert process.poll() is None, (
            "the job goes on through the outage: " + process.communicate()[1][-3000:]
        )
        with outage(postgres_server, database):
            killed += postgres_server.terminate_connections(database)
            time.sleep(2.0)
    stdout, stderr = process.communicate(timeout=600)
    assert killed >= 3, "the job's connections were dropped while it ran"
    first: dict[str, Any] = json.loads(stdout)
    assert first["counts"]["failed"] == 0, stderr
    # A call whose answer came while the ledger was out of reach is unknown (never re-sent):
    # settle it from the server's records, as an operator would, then run its item again.
    settle_unknown_notes(ws)
    final = ws.cli(*batch_args(ws, 60, "outage", "--retry-unknown", "--json"))
    assert final.returncode == 0, final.stderr
    assert json.loads(final.stdout)["counts"]["done"] == 60
    writes = ws.crm_writes()
    assert len(writes) == len(set(writes)) == 60, "one write per item, none twice, none lost"
    # Every item reported done has its write recorded as completed in the ledger.
    with psycopg.connect(postgres_server.url(database)) as conn:
        completed = conn.execute(
            "SELECT count(*) FROM calls WHERE tool = 'add_note' "
            "AND state IN ('succeeded', 'reconciled_succeeded')"
        ).fetchone()
    assert completed is not None and completed[0] == 60
