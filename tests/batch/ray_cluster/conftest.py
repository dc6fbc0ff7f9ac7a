"""Fixtures for batch on a real Ray cluster: PostgreSQL, Ray nodes and crm, all on loopback.

This directory is collected only inside the network namespace that ``tests/batch/test_ray.py``
creates (``CODEMODE_IN_NETNS=1``), where ``lo`` is the only interface: Ray binds to the
machine's interface address by default, and in there that can only be 127.0.0.1.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from tests.batch.conftest import Workspace
from tests.conftest import HttpServers
from tests.ledger._pg import PostgresServer

IN_NETNS = os.environ.get("CODEMODE_IN_NETNS") == "1"
collect_ignore_glob = [] if IN_NETNS else ["test_*.py"]

PASSWORD_ENV = "CODEMODE_TEST_PG_PASSWORD"


@pytest.fixture(scope="session")
def pg(postgres_server: PostgresServer) -> PostgresServer:
    # The nodes resolve the ledger URL's ${...} from their own environment, inherited from here.
    os.environ[PASSWORD_ENV] = postgres_server.password_in_url
    return postgres_server


class RayCluster:
    """A local cluster of Ray nodes in this namespace (``ray.cluster_utils.Cluster``)."""

    def __init__(self) -> None:
        from ray.cluster_utils import Cluster

        self._cluster = Cluster(
            initialize_head=True,
            head_node_args={"num_cpus": 2, "node_ip_address": "127.0.0.1", "include_dashboard": False},
        )

    @property
    def address(self) -> str:
        return str(cast(object, self._cluster.address))

    def add_node(self, **args: Any) -> None:
        self._cluster.add_node(num_cpus=2, node_ip_address="127.0.0.1", **args)

    def node_addresses(self) -> list[str]:
        import ray

        ray.init(address=self.address, logging_level=logging.ERROR, log_to_driver=False)
        try:
            nodes = cast(list[dict[str, Any]], ray.nodes())  # pyright: ignore[reportUnknownMemberType]
            return [str(node["NodeManagerAddress"]) for node in nodes if node["Alive"]]
        finally:
            ray.shutdown()

    def shutdown(self) -> None:
        self._cluster.shutdown()


MakeCluster = Callable[..., RayCluster]


@pytest.fixture
def make_cluster(pg: PostgresServer) -> Iterator[MakeCluster]:
    del pg  # the cluster inherits the ledger password set by the pg fixture
    started: list[RayCluster] = []

    def make(*, extra_node_env: dict[str, str] | None = None) -> RayCluster:
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        cluster = RayCluster()
        started.append(cluster)
        cluster.add_node(**({"env_vars": extra_node_env} if extra_node_env else {}))
        return cluster

    yield make
    for cluster in started:
        cluster.shutdown()


MakeRayWorkspace = Callable[..., Workspace]


@pytest.fixture
def make_ray_workspace(tmp_path: Path, pg: PostgresServer, http_servers: HttpServers) -> MakeRayWorkspace:
    def make(*, servers: str = "", sync_env: dict[str, str] | None = None) -> Workspace:
        root = tmp_path / f"ws-{len(list(tmp_path.iterdir()))}"
        root.mkdir()
        url = http_servers.start("crm", "--state-dir", str(root / "crm-state"))
        ledger = pg.url_with_reference(pg.new_database(), PASSWORD_ENV)
        (root / "codemode.toml").write_text(
            f'[servers.crm]\nurl = "{url}"\ntrusted = true\nallow_loopback = true\n\n{servers}\n'
            '[sandbox]\nbackend = "process"\npool_size = 1\n\n'
            f"[ledger]\nurl = {json.dumps(ledger)}\n\n"
            '[policy.consent]\nnever = ["crm/add_note"]\n',
            encoding="utf-8",
        )
        workspace = Workspace(root, {PASSWORD_ENV: os.environ[PASSWORD_ENV], **(sync_env or {})})
        for command in (("sync",), ("pin", "--approve")):
            done = workspace.cli(*command)
            assert done.returncode == 0, done.stderr
        return workspace

    return make
