"""Runs ``tests/batch/ray_cluster`` inside a new network namespace where only ``lo`` is up.

Ray binds to the machine's interface address by default; in a namespace of our own that can
only be 127.0.0.1, so the test clusters never send a packet anywhere else. The inner run is a
second pytest: its report is checked here, and a skip in it counts as a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
INNER = "tests/batch/ray_cluster"
REQUIRE_RAY = os.environ.get("CODEMODE_REQUIRE_RAY", "").strip() not in ("", "0", "false", "no")

pytestmark = [pytest.mark.ray, pytest.mark.slow]


# The inner run has its own 1500 s limit; about 155 s alone, but it shares two cores with the
# conformance suite in CI, so pytest-timeout's 300 s default must not cut it first.
@pytest.mark.timeout(1500)
def test_batch_on_a_two_node_ray_cluster_in_its_own_network_namespace(tmp_path: Path) -> None:
    try:
        import ray  # noqa: F401  # pyright: ignore[reportUnusedImport]
    except ImportError:
        if REQUIRE_RAY:
            pytest.fail("CODEMODE_REQUIRE_RAY is set but ray is not installed: pip install 'codemode[ray]'")
        pytest.skip("ray is not installed: pip install 'codemode[ray]'")
    if shutil.which("unshare") is None or shutil.which("ip") is None or os.geteuid() != 0:
        pytest.fail("the Ray tests need root, unshare (util-linux) and ip (iproute2) for a network namespace")
    report = tmp_path / "inner.xml"
    inner = [sys.executable, "-m", "pytest", INNER, "-p", "no:cacheprovider", "-q", f"--junitxml={report}"]
    script = 'ip link set lo up && exec "$@"'
    done = subprocess.run(
        ["unshare", "--net", "--", "sh", "-c", script, "sh", *inner],
        cwd=REPO,
        env={**os.environ, "CODEMODE_IN_NETNS": "1", "RAY_USAGE_STATS_ENABLED": "0"},
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-4000:]
    suite = ET.parse(report).getroot().find("testsuite")
    assert suite is not None
    counts = {k: int(suite.get(k, "0")) for k in ("tests", "failures", "errors", "skipped")}
    assert counts["tests"] >= 4 and counts["failures"] == counts["errors"] == counts["skipped"] == 0, counts
