"""CLI startup: how long each command takes in a fresh process, next to its target.

    .venv/bin/python benchmarks/cli_startup.py            # 7 runs per command, median
    .venv/bin/python benchmarks/cli_startup.py -n 15 --json

It builds a workspace with the bundled example servers (init --demo, sync, pin --approve, one
run so the ledger has rows), then times each command as a user types it: a new process each
time, the console script itself. ``python -c pass`` is the floor. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TypedDict

ROOT = Path(__file__).resolve().parent.parent
CODEMODE = str(Path(sys.executable).with_name("codemode"))
ENV = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
"""The commands' environment. An installed package has its bytecode compiled at install time; with
PYTHONDONTWRITEBYTECODE set, each timed run of a source checkout would compile changed modules again."""


class Row(TypedDict):
    command: str
    median_ms: int
    target_ms: float | None


# command, target in ms (None: no target, shown for scale)
COMMANDS: list[tuple[str, float | None]] = [
    ("python -c pass", None),
    ("codemode --version", 200),
    ("codemode --help", 200),
    ("codemode tree", 500),
    ("codemode search customer", 500),
    ("codemode pin", 500),
    ("codemode ledger list", 500),
]


def timed(argv: list[str], cwd: Path) -> float:
    started = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-n", type=int, default=7, help="runs per command")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    workspace = Path(tempfile.mkdtemp(prefix="codemode-startup-"))
    try:
        config = workspace / "codemode.toml"
        for setup in (["init", "--demo"], ["sync"], ["pin", "--approve"]):
            subprocess.run(
                [CODEMODE, *setup, "--config", str(config)], env=ENV, check=True, capture_output=True
            )
        subprocess.run(
            [CODEMODE, "run", "-", "--backend", "process", "--no-input", "--config", str(config)],
            input=b"1",
            env=ENV,
            check=True,
            capture_output=True,
        )
        rows: list[Row] = []
        for command, target in COMMANDS:
            argv = command.split()
            if argv[0] == "python":
                argv[0] = sys.executable
            else:
                argv = [CODEMODE, *argv[1:]]
                if "--version" not in argv and "--help" not in argv:
                    argv += ["--config", str(config)]
            timed(argv, workspace)  # warm the page cache (and write bytecode)
            runs = [timed(argv, workspace) for _ in range(args.n)]
            median = statistics.median(runs)
            rows.append(Row(command=command, median_ms=round(median), target_ms=target))
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{'command':<28} {'median':>8} {'target':>8}")
    for row in rows:
        target = f"< {row['target_ms']:.0f}" if row["target_ms"] else "-"
        verdict = (
            "" if not row["target_ms"] else ("  ok" if row["median_ms"] < row["target_ms"] else "  over")
        )
        print(f"{row['command']:<28} {row['median_ms']:>6} ms {target:>8}{verdict}")


if __name__ == "__main__":
    main()
