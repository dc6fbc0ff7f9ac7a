"""What ``codemode demo`` says to do next: the commands as this person can type them (the venv's
codemode is not on PATH until it is activated), one install line for use outside the clone, and
how to add an extra to the checkout."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from codemode.cli._demo_cmd import checkout, codemode_command, next_steps

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.prefix).resolve() / "bin"

pytestmark = pytest.mark.skipif(
    not (VENV_BIN / "codemode").exists(), reason="codemode is not installed as a script in this venv"
)


def _path_without_venv() -> str:
    return os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if Path(p) != VENV_BIN)


def test_in_the_clone_with_the_venv_not_activated_every_command_names_the_venv_s_codemode(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PATH", _path_without_venv())
    monkeypatch.chdir(VENV_BIN.parent.parent)  # the clone, when ./dev made the venv
    typed = os.path.relpath(VENV_BIN, Path.cwd())
    command = codemode_command()
    assert command == f"{typed}/codemode"
    text = "\n".join(next_steps(command, checkout()))
    assert (
        f"your own servers   {typed}/codemode init --from ~/.config/Claude/claude_desktop_config.json" in text
    )
    assert f"reach codemode     {typed}/codemode (not on PATH), or run 'source {typed}/activate'" in text


def test_with_the_venv_on_path_the_commands_say_codemode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", os.pathsep.join([str(VENV_BIN), _path_without_venv()]))
    assert codemode_command() == "codemode"
    text = "\n".join(next_steps("codemode", checkout()))
    assert "your own servers   codemode init --from" in text
    assert "reach codemode" not in text


def test_a_checkout_gets_an_install_line_and_the_way_to_add_an_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert checkout() == REPO, "the tests run from a checkout"
    monkeypatch.chdir(REPO)
    text = "\n".join(next_steps("codemode", REPO))
    assert f"install elsewhere  pip install {REPO}   (into any Python >= 3.11 venv)" in text
    assert "-m pip install -e '.[otel]'   (bench, otel, postgres, ray, semantic)" in text
    monkeypatch.chdir(tmp_path)  # elsewhere, the paths are whole
    text = "\n".join(next_steps("codemode", REPO))
    assert f"{VENV_BIN}/python -m pip install -e '{REPO}[otel]'" in text


def test_an_installed_wheel_gets_no_clone_lines() -> None:
    text = "\n".join(next_steps("codemode", None))
    assert "pip install" not in text
    assert "next:" in text and "codemode init --from" in text
