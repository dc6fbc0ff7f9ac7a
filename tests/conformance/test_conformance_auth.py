"""The conformance suite's client ``auth/*`` scenarios, both requirement sets, through codemode's
CLI (``auth login --headless``, ``sync``, ``pin --approve``, ``run``: see conformance/README.md).

Apart from test_conformance.py because they take most of the client side's time: under
``--dist loadfile`` a module of its own runs beside the rest.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conformance.test_conformance import run_suite


@pytest.mark.slow
@pytest.mark.timeout(1500)  # 39 scenarios, five CLI commands each: about 220 s on a quiet machine
def test_the_client_auth_scenarios_pass_through_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    summary = run_suite(tmp_path, capsys, "--side", "client", "--client-scenarios", "auth")
    for req_set, sides in summary["results"].items():
        assert set(sides) == {"client"}, req_set
