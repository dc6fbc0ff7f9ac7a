"""The CLI starts fast because it imports lazily: pinned here as imports, never as timings
(timings live in benchmarks/cli_startup.py; these machines are shared and noisy)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import codemode

HEAVY = ("mcp", "mcp_types", "docker", "pydantic", "jinja2", "jsonschema", "anyio")
PUBLIC_API = [
    "ApprovalAnswer",
    "ApprovalRequest",
    "Approver",
    "AuthError",
    "AuthRequiredError",
    "BatchOptions",
    "CallProgress",
    "CallbackApprover",
    "CallbackElicitor",
    "CallbackSampler",
    "CatalogError",
    "ChannelError",
    "CodeMode",
    "CodemodeError",
    "Config",
    "ConfigError",
    "ElicitationAnswer",
    "ElicitationRequest",
    "Elicitor",
    "ItemResult",
    "LedgerError",
    "MissingSecretError",
    "NameCollisionError",
    "OutcomeUnknownError",
    "Plan",
    "PlanRefusedError",
    "PolicyError",
    "RunErrorInfo",
    "RunLimits",
    "RunResult",
    "RunUsage",
    "Sampler",
    "SamplingAnswer",
    "SamplingRequest",
    "SandboxError",
    "SandboxUnavailableError",
    "SearchResult",
    "ServerConnectionError",
    "ServerRefusedError",
    "ServerRejectedError",
    "ServerStatus",
    "ServerUnavailableError",
    "StubRenderError",
    "TerminalApprover",
    "TerminalElicitor",
    "ToolFormat",
    "ToolReply",
    "UnsafeURLError",
    "VirtualTree",
    "config_from_mapping",
    "load_config",
]


def test_the_public_api_is_exactly_what_all_lists_and_every_name_resolves() -> None:
    assert codemode.__all__ == PUBLIC_API, "a change to the public API must be deliberate"
    for name in codemode.__all__:
        assert getattr(codemode, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = codemode.nope  # type: ignore[attr-defined]


TESTING_API = [
    "FakeCall",
    "FakeClock",
    "FakeTools",
    "ToolFailure",
    "approved_pins",
    "fake_broker",
    "in_memory_transports",
    "in_process_sandbox",
    "memory_ledger",
    "open_test_run",
]


def test_the_testing_module_exports_exactly_its_seams() -> None:
    import codemode.testing

    assert codemode.testing.__all__ == TESTING_API, "a change to codemode.testing must be deliberate"
    for name in TESTING_API:
        assert getattr(codemode.testing, name) is not None, name


def imported_after(*argv: str, cwd: Path | None = None) -> set[str]:
    """The top-level modules a fresh interpreter imported to run ``codemode ARGV``."""
    probe = (
        "import sys\n"
        "from codemode.cli._main import cli\n"
        "try:\n"
        f"    cli({list(argv)!r}, prog_name='codemode')\n"
        "except SystemExit:\n"
        "    pass\n"
        "sys.stdout.write('\\n' + __import__('json').dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=cwd)
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.integration
@pytest.mark.parametrize("argv", [("--version",), ("--help",)])
def test_version_and_help_import_nothing_heavy(argv: tuple[str, ...]) -> None:
    loaded = imported_after(*argv)
    assert not loaded & set(HEAVY), loaded & set(HEAVY)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    config = tmp_path_factory.mktemp("startup") / "codemode.toml"
    for command in (["init", "--demo"], ["sync"], ["pin", "--approve"]):
        subprocess.run(
            [sys.executable, "-m", "codemode.cli", *command, "--config", str(config)],
            check=True,
            capture_output=True,
            timeout=300,
        )
    return config


@pytest.mark.integration
@pytest.mark.parametrize(
    "argv", [("tree",), ("tree", "servers/crm"), ("search", "customer"), ("pin",), ("ledger", "list")]
)
def test_local_state_commands_start_no_server_and_import_no_sdk_or_docker(
    workspace: Path, argv: tuple[str, ...]
) -> None:
    loaded = imported_after(*argv, "--config", str(workspace))
    assert not loaded & {"mcp", "docker"}, loaded & {"mcp", "docker"}


@pytest.mark.integration
def test_tree_reads_the_lock_and_live_asks_the_servers(workspace: Path) -> None:
    def tree(*extra: str) -> str:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "codemode.cli",
                "tree",
                "servers/docs",
                *extra,
                "--config",
                str(workspace),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    local, live = tree(), tree("--live")
    assert "get_document" in local and "get_document" in live
    assert "_resources" in live, "resources come only from a live listing"
