"""The skill tests' ledger: each test that asks for ``ledger_toml`` (or ``make_deployment``) runs
once on a SQLite ledger beside the config and once on a PostgreSQL ledger of its own (a new
database on the session's throwaway server, ``tests/ledger/_pg.py``; marked ``postgres``), so the
same behaviour is shown on both stores."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ledger._pg import PostgresServer
from tests.skills._deployment import LedgerToml, MakeDeployment, deployment

PASSWORD_VAR = "CODEMODE_TEST_SKILLS_LEDGER_PASSWORD"


def _postgres_toml(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> LedgerToml:
    server: PostgresServer = request.getfixturevalue("postgres_server")
    # The password as a deployment holds it: a ${ENV} reference, resolved at open time.
    monkeypatch.setenv(PASSWORD_VAR, server.password_in_url)

    def new() -> str:
        name = server.new_database()
        request.addfinalizer(lambda: server.drop_database(name))
        return f"\n[ledger]\nurl = {json.dumps(server.url_with_reference(name, PASSWORD_VAR))}\n"

    return new


@pytest.fixture(params=[pytest.param("sqlite"), pytest.param("postgres", marks=(pytest.mark.postgres,))])
def ledger_toml(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[LedgerToml]:
    if request.param == "sqlite":
        yield lambda: ""
    else:
        yield _postgres_toml(request, monkeypatch)


@pytest.fixture
def make_deployment(ledger_toml: LedgerToml) -> MakeDeployment:
    def make(root: Path, extra: str = "") -> Path:
        return deployment(root, extra + ledger_toml())

    return make
