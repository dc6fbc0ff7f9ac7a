"""``codemode sandbox build`` and ``codemode sandbox doctor``, and the pieces behind them."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from codemode.cli._sandbox_cmd import sandbox
from codemode.sandbox._image import DEFAULT_MIRROR, debian_mirror


@pytest.fixture
def process_config(tmp_path: Path) -> Path:
    path = tmp_path / "codemode.toml"
    path.write_text('[sandbox]\nbackend = "process"\n')
    return path


@pytest.mark.integration
def test_doctor_reports_every_check_as_json(process_config: Path) -> None:
    result = CliRunner().invoke(sandbox, ["doctor", "--json", "--config", str(process_config)])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["ok"] is True
    assert report["backend"]["name"] == "process"
    names = {check["name"] for check in report["checks"]}
    assert {"docker engine", "process: interpreter", "process: isolation", "backend"} <= names
    isolation = next(c for c in report["checks"] if c["name"] == "process: isolation")
    assert "weaker" in isolation["detail"]
    for check in report["checks"]:
        if check["status"] in ("fail", "warn"):
            assert check["fix"], check
    in_force = next(c for c in report["checks"] if c["name"] == "in force")
    assert in_force["status"] == "warn"
    assert in_force["detail"].startswith("process: ")
    assert report["backend"]["warning"]


@pytest.mark.bwrap
def test_doctor_says_bwrap_is_in_force_and_what_it_enforces(bwrap_ready: None, tmp_path: Path) -> None:
    config = tmp_path / "codemode.toml"
    config.write_text('[sandbox]\nbackend = "bwrap"\n')
    result = CliRunner().invoke(sandbox, ["doctor", "--json", "--config", str(config)])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert (report["backend"]["name"], report["backend"]["warning"]) == ("bwrap", None)
    checks = {check["name"]: check for check in report["checks"]}
    assert checks["bwrap"]["status"] == "ok"
    assert checks["bwrap: seccomp"]["status"] == "ok"
    assert checks["bwrap: test sandbox"]["status"] == "ok"
    assert "seccomp" in checks["bwrap: enforces"]["detail"]
    assert (checks["in force"]["status"], checks["in force"]["detail"]) == (
        "ok",
        f"bwrap: {checks['bwrap: enforces']['detail']}",
    )


@pytest.mark.docker
def test_doctor_checks_the_engine_the_image_and_limit_support(docker_image: str, tmp_path: Path) -> None:
    config = tmp_path / "codemode.toml"
    config.write_text(f'[sandbox]\nbackend = "auto"\nimage = "{docker_image}"\n')
    result = CliRunner().invoke(sandbox, ["doctor", "--config", str(config)])
    assert result.exit_code == 0, result.output
    for expected in (
        "docker engine",
        "sandbox image",
        "seccomp",
        "memory limit",
        "pids limit",
        "auto → docker",
    ):
        assert expected in result.output


@pytest.mark.docker
def test_doctor_names_the_fix_for_a_missing_image(docker_image: str, tmp_path: Path) -> None:
    config = tmp_path / "codemode.toml"
    config.write_text('[sandbox]\nbackend = "docker"\nimage = "codemode-no-such-image:nope"\n')
    result = CliRunner().invoke(sandbox, ["doctor", "--json", "--config", str(config)])
    assert result.exit_code == 1
    report = json.loads(result.output)
    image = next(c for c in report["checks"] if c["name"] == "sandbox image")
    assert (image["status"], image["fix"]) == ("fail", "codemode sandbox build")


@pytest.mark.docker
def test_build_is_idempotent_and_quick_when_up_to_date(docker_image: str, tmp_path: Path) -> None:
    config = tmp_path / "codemode.toml"
    config.write_text(f'[sandbox]\nimage = "{docker_image}"\n')
    started = time.monotonic()
    result = CliRunner().invoke(sandbox, ["build", "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert "up to date" in result.output
    assert time.monotonic() - started < 20


def test_the_debootstrap_mirror_comes_from_apt_sources(tmp_path: Path) -> None:
    deb822 = tmp_path / "debian.sources"
    deb822.write_text(
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n\n"
        "Types: deb\nURIs: http://mirror.example/debian\n"
        "Suites: bookworm bookworm-updates\nComponents: main\n"
    )
    assert debian_mirror([deb822]) == "http://mirror.example/debian"
    legacy = tmp_path / "sources.list"
    legacy.write_text("# comment\ndeb [arch=amd64] http://old.example/debian bookworm main\n")
    assert debian_mirror([legacy]) == "http://old.example/debian"
    assert debian_mirror([tmp_path / "missing.list"]) == DEFAULT_MIRROR
