"""``deploy/``: the compose file, the balancer and the replicas' config agree with each other and
with codemode (what ``docker compose config`` would check of the file, plus what only codemode's
own loader and serve's start-up checks know). Nothing here starts a container."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from codemode.config import Config, load_config

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
SECRETS = {
    "CODEMODE_DB_PASSWORD": "a-database-password",
    "CODEMODE_ALICE_TOKEN": "alice-token-0123456789",
    "CODEMODE_OPS_TOKEN": "ops-token-0123456789abc",
}


@pytest.fixture
def compose() -> dict[str, Any]:
    return cast(dict[str, Any], yaml.safe_load((DEPLOY / "compose.yaml").read_text(encoding="utf-8")))


@pytest.fixture
def config(monkeypatch: pytest.MonkeyPatch) -> Config:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    return load_config(DEPLOY / "codemode.toml")


def _replicas(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    services = cast(dict[str, dict[str, Any]], compose["services"])
    return {name: service for name, service in services.items() if name.startswith("serve-")}


def _mounts(service: dict[str, Any]) -> dict[str, str]:
    """Container path -> source (a host path or a named volume)."""
    return {str(v).split(":")[1]: str(v).split(":")[0] for v in service.get("volumes", [])}


def test_the_replicas_config_is_valid_and_every_caller_may_run(config: Config) -> None:
    # Loaded at all, it passed serve's start-up checks too: every token's principal is in its tenant.
    assert {grant.principal for grant in config.serve.tokens.values()} <= set(config.policy.principals)
    ledger = config.ledger_location()
    assert isinstance(ledger, str) and ledger.startswith(
        "postgresql://codemode:a-database-password@postgres:"
    )
    assert config.sandbox.backend == "docker"
    # What replicas must share outside the database sits on the shared state volume.
    assert config.lock_path.is_relative_to("/var/lib/codemode")
    assert config.workspace_root.is_relative_to("/var/lib/codemode")


def test_every_replica_runs_the_same_image_on_the_shared_ledger_and_state(
    compose: dict[str, Any], config: Config
) -> None:
    replicas = _replicas(compose)
    assert len(replicas) >= 2
    assert len({service["image"] for service in replicas.values()}) == 1
    referenced = set(re.findall(r"\$\{(\w+)\}", (DEPLOY / "codemode.toml").read_text(encoding="utf-8")))
    for name, service in replicas.items():
        mounts = _mounts(service)
        assert mounts["/etc/codemode/codemode.toml"] == "./codemode.toml", name
        assert mounts["/var/lib/codemode"] in compose["volumes"], name  # a named volume, shared
        assert "/var/run/docker.sock" in mounts, name  # the Docker sandbox backend's engine
        assert referenced <= set(service["environment"]), name  # every ${VAR} the config reads
        assert service["depends_on"]["postgres"]["condition"] == "service_healthy", name
        grace = int(str(service["stop_grace_period"]).rstrip("s"))
        assert grace > config.serve.drain_s, name  # SIGTERM drains before the engine's SIGKILL
    postgres = compose["services"]["postgres"]
    assert postgres["environment"]["POSTGRES_USER"] == "codemode"
    assert postgres["environment"]["POSTGRES_DB"] == "codemode"


def test_the_balancer_checks_readiness_and_keeps_a_session_on_its_replica(compose: dict[str, Any]) -> None:
    haproxy = (DEPLOY / "haproxy.cfg").read_text(encoding="utf-8")
    servers = set(re.findall(r"^\s*server\s+(\S+)\s+(\S+):8765\s+check", haproxy, re.M))
    assert {name for name, _ in servers} == set(_replicas(compose))
    assert all(name == host for name, host in servers)
    assert re.search(r"^\s*option httpchk GET /readyz$", haproxy, re.M)
    assert re.search(r"^\s*stick on req\.hdr\(mcp-session-id\)$", haproxy, re.M)
    balancer = compose["services"]["balancer"]
    assert _mounts(balancer)["/usr/local/etc/haproxy/haproxy.cfg"] == "./haproxy.cfg"
    assert balancer["ports"] == ["127.0.0.1:8765:8765"]


def test_the_image_serves_http_with_the_mounted_config_and_reports_readiness(config: Config) -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text(encoding="utf-8").replace("\\\n", " ")
    entry = re.search(r"^ENTRYPOINT (\[.*\])$", dockerfile, re.M)
    assert entry is not None
    argv = cast(list[str], yaml.safe_load(entry.group(1)))
    assert argv[:2] == ["codemode", "serve"]
    options = dict(zip(argv[2::2], argv[3::2], strict=False))
    assert options["--transport"] == "http" and options["--config"] == "/etc/codemode/codemode.toml"
    assert options["--port"] == "8765"
    # The allowed Host names are the balancer's published address.
    assert "127.0.0.1:8765" in config.serve.allowed_hosts
    health = re.search(r"^HEALTHCHECK .*CMD (.*)$", dockerfile, re.M)
    assert health is not None and "/readyz" in health.group(1)
    install = next(line for line in dockerfile.splitlines() if "pip install" in line)
    assert "postgres" in shlex.split(install)[4]  # the extra the PostgreSQL ledger needs
