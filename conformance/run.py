"""Run the official MCP conformance suite against codemode and judge it against the baseline.

Use ``bash conformance/run.sh`` (it installs the pinned suite and Node.js 22 first). For each
requirement set (2025-11-25, 2026-07-28):

- **server**: one ``codemode serve --transport http`` on a free 127.0.0.1 port (a demo config
  in a temporary directory: the bundled example servers, synced and approved, process sandbox)
  and ``conformance server --url … --requirements SET`` - every scenario the set names, each at
  its own wire (the 2025-11-25 handshake, or the stateless 2026-07-28 revision);
- **client**: ``conformance client --command "python conformance/client_adapter.py" --scenario S
  --spec-version SET`` for every client scenario of the set that applies to codemode's host.

Each scenario's checks (``checks.json``) are then sorted: not applicable (``not-applicable.json``),
passed, expected failure (``baseline.json``) or unexpected failure. Exit status 1 on any
unexpected failure or stale baseline entry (one that passes now), else 0. A JSON summary is
written to ``<results>/summary.json``.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SETS = ("2025-11-25", "2026-07-28")
SIDES = ("server", "client")
# Where install.sh put the pinned npm packages (run.sh sets it; outside the checkout).
NODE_MODULES = Path(os.environ["CODEMODE_CONFORMANCE_HOME"]) / "node_modules"
SUITE = NODE_MODULES / "@modelcontextprotocol" / "conformance"
ADAPTER = HERE / "client_adapter.py"
SERVER_SET_TIMEOUT_S = 600
CLIENT_SCENARIO_TIMEOUT_S = 180
_TIMESTAMP = re.compile(r"-\d{4}-\d{2}-\d{2}T[\d-]+Z$")
_SEVERITY = {"FAILURE": 3, "WARNING": 2, "SKIPPED": 1, "SUCCESS": 0, "INFO": 0}


def node22() -> Path:
    arch = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(
        platform.machine().lower()
    )
    return NODE_MODULES / f"node-linux-{arch}" / "bin" / "node"


def suite(*args: str) -> list[str]:
    return [str(node22()), str(SUITE / "dist" / "index.js"), *args]


def codemode_cli() -> str:
    beside = Path(sys.executable).parent / "codemode"
    return str(beside) if beside.exists() else (shutil.which("codemode") or "codemode")


# -- expectations ----------------------------------------------------------------------------


@dataclass
class Expectations:
    not_applicable: dict[str, dict[str, str]]
    """side → pattern (scenario glob, or scenario:check) → reason."""
    baseline: dict[str, dict[str, dict[str, str]]]
    """set → side → scenario or scenario:check → reason."""

    @classmethod
    def load(cls) -> Expectations:
        na = json.loads((HERE / "not-applicable.json").read_text())
        base = json.loads((HERE / "baseline.json").read_text())
        return cls(
            not_applicable={side: dict(na.get(side, {})) for side in SIDES},
            baseline={s: {side: dict(base.get(s, {}).get(side, {})) for side in SIDES} for s in SETS},
        )

    def scenario_na(self, side: str, scenario: str) -> str | None:
        for pattern, reason in self.not_applicable[side].items():
            if ":" not in pattern and fnmatch.fnmatchcase(scenario, pattern):
                return reason
        return None

    def check_na(self, side: str, scenario: str, check: str) -> str | None:
        return self.not_applicable[side].get(f"{scenario}:{check}")


def requirement_set(name: str) -> dict[str, Any]:
    """The suite's frozen requirement set, parsed with the suite's own YAML library."""
    script = (
        "const fs=require('fs');const Y=require('yaml');"
        "process.stdout.write(JSON.stringify(Y.parse(fs.readFileSync(process.argv[1],'utf8'))))"
    )
    path = SUITE / "requirements" / f"{name}.yaml"
    out = subprocess.run(
        [str(node22()), "-e", script, str(path)],
        cwd=NODE_MODULES.parent,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    data: dict[str, Any] = json.loads(out)
    return data


def scenarios_of(req: dict[str, Any], side: str) -> list[tuple[str, str | None]]:
    """(scenario, why it is not scored or None) for one side of a requirement set."""
    listed: list[str] = list(req.get(side) or [])
    entries: list[dict[str, Any]] = list(req.get("not_scored") or [])
    out: list[tuple[str, str | None]] = [(str(name), None) for name in listed]
    out += [(str(e["scenario"]), str(e.get("reason"))) for e in entries if e.get("leg") == side]
    return out


# -- results -----------------------------------------------------------------------------------


@dataclass
class ScenarioResult:
    name: str
    side: str
    req_set: str
    not_scored: str | None = None
    not_applicable: str | None = None
    ran: bool = False
    checks: dict[str, dict[str, Any]] = field(default_factory=lambda: {})
    """check id → the most severe occurrence."""
    na_checks: list[str] = field(default_factory=lambda: [])
    expected: list[str] = field(default_factory=lambda: [])
    unexpected: list[str] = field(default_factory=lambda: [])
    warnings: list[str] = field(default_factory=lambda: [])
    error: str | None = None

    @property
    def verdict(self) -> str:
        if self.not_applicable is not None:
            return "n/a"
        if self.error is not None or self.unexpected:
            return "fail"
        if self.expected:
            return "expected-fail"
        return "pass"

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.name,
            "verdict": self.verdict,
            "not_scored": self.not_scored,
            "not_applicable": self.not_applicable,
            "checks": {k: v.get("status") for k, v in self.checks.items()},
            "expected_failures": self.expected,
            "unexpected_failures": self.unexpected,
            "not_applicable_checks": self.na_checks,
            "warnings": self.warnings,
            "error": self.error,
        }


def collapse(checks: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """One verdict per check id, the most severe occurrence first (as the suite does)."""
    out: dict[str, dict[str, Any]] = {}
    for check in checks:
        key = str(check.get("id"))
        if key not in out or _SEVERITY.get(check.get("status", ""), 0) > _SEVERITY.get(
            out[key].get("status", ""), 0
        ):
            out[key] = check
    return out


def judge(result: ScenarioResult, checks: list[dict[str, Any]], exp: Expectations) -> None:
    result.ran = True
    result.checks = collapse(checks)
    if result.not_applicable is not None:  # ran only because the suite runs the whole set; not judged
        return
    if not result.checks:
        result.error = "the scenario produced no checks"
        return
    baseline = exp.baseline[result.req_set][result.side]
    whole = result.name in baseline
    for check_id, check in result.checks.items():
        status = check.get("status")
        message = (check.get("errorMessage") or check.get("description") or "").strip().splitlines()
        label = f"{check_id}: {message[0][:160] if message else ''}"
        if status == "WARNING":
            result.warnings.append(label)
        if status != "FAILURE":
            continue
        if exp.check_na(result.side, result.name, check_id):
            result.na_checks.append(check_id)
        elif whole or f"{result.name}:{check_id}" in baseline:
            result.expected.append(check_id)
        else:
            result.unexpected.append(label)


def stale_entries(results: list[ScenarioResult], exp: Expectations, req_set: str, side: str) -> list[str]:
    """Baseline entries that no longer describe a failure (remove them) or name nothing."""
    by_name = {r.name: r for r in results}
    stale: list[str] = []
    for entry in exp.baseline[req_set][side]:
        scenario, _, check = entry.partition(":")
        result = by_name.get(scenario)
        if result is None or not result.ran or result.not_applicable is not None:
            continue  # invalid or not-applicable names are reported by invalid_expectations
        if (check and check not in result.expected) or (
            not check and not result.expected and result.error is None
        ):
            stale.append(f"{entry} (passes now: remove it from baseline.json)")
    return stale


def invalid_expectations(exp: Expectations, reqs: dict[str, dict[str, Any]]) -> list[str]:
    """Entries that name no scenario of the pinned suite (or a not-applicable one): typos hide nothing."""
    problems: list[str] = []
    for side in SIDES:
        names = {name for req in reqs.values() for name, _ in scenarios_of(req, side)}
        for pattern in exp.not_applicable[side]:
            scenario = pattern.partition(":")[0]
            if not any(fnmatch.fnmatchcase(n, scenario) for n in names):
                problems.append(
                    f"not-applicable.json {side}: {pattern!r} matches no scenario of the pinned suite"
                )
        for req_set, req in reqs.items():
            in_set = {name for name, _ in scenarios_of(req, side)}
            for entry in exp.baseline[req_set][side]:
                scenario = entry.partition(":")[0]
                if scenario not in in_set:
                    problems.append(
                        f"baseline.json {req_set} {side}: {entry!r} is not a scenario of that set"
                    )
                elif exp.scenario_na(side, scenario) is not None:
                    problems.append(
                        f"baseline.json {req_set} {side}: {entry!r} is also marked not applicable"
                    )
    return problems


def load_checks(directory: Path) -> list[dict[str, Any]]:
    path = directory / "checks.json"
    data: list[dict[str, Any]] = json.loads(path.read_text())
    return data


# -- server side -------------------------------------------------------------------------------


class CodemodeServe:
    """``codemode serve --transport http`` on a free 127.0.0.1 port, with a demo config."""

    def __init__(self, workdir: Path, log_dir: Path) -> None:
        self.workdir = workdir
        self.log_path = log_dir / "codemode-serve.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def _cli(self, *args: str) -> None:
        cmd = [codemode_cli(), *args, "--config", str(self.workdir / "codemode.toml")]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
        if done.returncode != 0:
            raise RuntimeError(f"{shlex.join(cmd)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")

    def __enter__(self) -> CodemodeServe:
        config = self.workdir / "codemode.toml"
        self._cli("init", "--demo")
        text = config.read_text()
        # The server scenarios never run code; the process sandbox keeps the server light and
        # independent of a Docker engine.
        sandbox = '[sandbox]\nbackend = "process"\npool_size = 0\n'
        config.write_text(
            text.replace("\n[sandbox]\n", "\n" + sandbox, 1)
            if "\n[sandbox]\n" in text
            else text + "\n" + sandbox
        )
        self._cli("sync")
        self._cli("pin", "--approve")
        with self.log_path.open("wb") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                [
                    codemode_cli(),
                    "serve",
                    "--transport",
                    "http",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    "0",
                    "--config",
                    str(config),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            match = re.search(r"READY (http://\S+)", self.log_path.read_text(errors="replace"))
            if match:
                self.url = match.group(1)
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        self.__exit__(None, None, None)
        raise RuntimeError(
            f"codemode serve did not become ready:\n{self.log_path.read_text(errors='replace')}"
        )

    def __exit__(self, *exc: object) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the session this runner started for it
            proc.wait(timeout=10)


def run_server_set(
    url: str, req_set: str, req: dict[str, Any], out: Path, exp: Expectations
) -> list[ScenarioResult]:
    out.mkdir(parents=True, exist_ok=True)
    log = out / "suite.log"
    with log.open("w") as stream:
        try:
            subprocess.run(
                suite("server", "--url", url, "--requirements", req_set, "-o", str(out)),
                cwd=HERE,
                stdout=stream,
                stderr=subprocess.STDOUT,
                timeout=SERVER_SET_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            stream.write(f"\n[run.py] the suite did not finish within {SERVER_SET_TIMEOUT_S} s\n")
    found: dict[str, Path] = {}
    for directory in sorted(out.iterdir()):
        if (
            directory.is_dir()
            and directory.name.startswith("server-")
            and (directory / "checks.json").exists()
        ):
            found[_TIMESTAMP.sub("", directory.name[len("server-") :])] = directory
    results: list[ScenarioResult] = []
    for name, why in scenarios_of(req, "server"):
        result = ScenarioResult(
            name, "server", req_set, not_scored=why, not_applicable=exp.scenario_na("server", name)
        )
        if name in found:
            judge(result, load_checks(found[name]), exp)
        elif result.not_applicable is None:
            result.error = f"the suite produced no result for it (see {log})"
        results.append(result)
    return results


# -- client side -------------------------------------------------------------------------------


def run_client_scenario(result: ScenarioResult, out: Path, exp: Expectations) -> None:
    safe = result.name.replace("/", "_")
    directory = out / safe
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(ADAPTER))}"
    args = suite(
        "client", "--command", command, "--scenario", result.name, "--spec-version", result.req_set,
        "--timeout", "30000", "-o", str(directory),
        # An extension's scenario is on no spec revision's timeline: the suite skips it unless told.
        *(["--force"] if result.not_scored == "extension" else []),
    )  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with (directory / "suite.log").open("w") as stream:
        try:
            subprocess.run(
                args,
                cwd=HERE,
                stdout=stream,
                stderr=subprocess.STDOUT,
                timeout=CLIENT_SCENARIO_TIMEOUT_S,
                env=env,
            )
        except subprocess.TimeoutExpired:
            result.error = f"the suite did not finish within {CLIENT_SCENARIO_TIMEOUT_S} s"
            return
    # An ``auth/x`` scenario writes its run under ``auth/``: look below the scenario's directory.
    runs = sorted(checks.parent for checks in directory.rglob("checks.json"))
    if not runs:
        text = (directory / "suite.log").read_text(errors="replace")
        skipped = re.search(r"SKIPPED: .*", text)
        result.error = (
            skipped.group(0) if skipped else f"the suite produced no result (see {directory / 'suite.log'})"
        )
        return
    judge(result, load_checks(runs[0]), exp)


def run_client_set(
    req_set: str, req: dict[str, Any], out: Path, exp: Expectations, progress: bool, which: str = "all"
) -> list[ScenarioResult]:
    results: list[ScenarioResult] = []
    for name, why in scenarios_of(req, "client"):
        if which != "all" and name.startswith("auth/") != (which == "auth"):
            continue
        result = ScenarioResult(
            name, "client", req_set, not_scored=why, not_applicable=exp.scenario_na("client", name)
        )
        if result.not_applicable is None:
            started = time.monotonic()
            run_client_scenario(result, out, exp)
            if progress:
                print(
                    f"  {req_set} client {name}: {result.verdict} ({time.monotonic() - started:.0f} s)",
                    file=sys.stderr,
                )
        results.append(result)
    return results


# -- report ------------------------------------------------------------------------------------


def tally(results: list[ScenarioResult]) -> dict[str, Any]:
    applicable = [r for r in results if r.not_applicable is None]
    required = [r for r in applicable if r.not_scored is None]
    extra = [r for r in applicable if r.not_scored is not None]
    statuses = [c.get("status") for r in applicable for k, c in r.checks.items() if k not in r.na_checks]
    return {
        "required_passed": sum(r.verdict == "pass" for r in required),
        "required_total": len(required),
        "not_scored_passed": sum(r.verdict == "pass" for r in extra),
        "not_scored_total": len(extra),
        "passed": sum(r.verdict == "pass" for r in applicable),
        "total": len(applicable),
        "expected_failures": sum(r.verdict == "expected-fail" for r in applicable),
        "unexpected_failures": sum(r.verdict == "fail" for r in applicable),
        "not_applicable": len(results) - len(applicable),
        # INFO and SKIPPED entries are not verdicts; a WARNING is a SHOULD that was not met.
        "checks_passed": statuses.count("SUCCESS"),
        "checks_warnings": statuses.count("WARNING"),
        "checks_failed": statuses.count("FAILURE"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--set", dest="sets", action="append", choices=SETS, help="requirement set (default: both)"
    )
    parser.add_argument("--side", choices=(*SIDES, "both"), default="both")
    parser.add_argument(
        "--results", type=Path, default=HERE / "results" / "latest", help="where the suite's output goes"
    )
    parser.add_argument(
        "--client-scenarios",
        choices=("all", "auth", "other"),
        default="all",
        help="the client side's auth/* scenarios only, or all but them (they take most of its time)",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args(argv)
    sets: list[str] = args.sets or list(SETS)
    sides = list(SIDES) if args.side == "both" else [args.side]
    if not node22().exists() or not (SUITE / "dist" / "index.js").exists():
        print("conformance: the suite is not installed; run bash conformance/install.sh", file=sys.stderr)
        return 3

    exp = Expectations.load()
    reqs = {s: requirement_set(s) for s in SETS}
    problems = invalid_expectations(exp, reqs)
    suite_version = json.loads((SUITE / "package.json").read_text())["version"]
    node_version = subprocess.run([str(node22()), "--version"], capture_output=True, text=True).stdout.strip()
    results_dir: Path = args.results.resolve()
    shutil.rmtree(results_dir, ignore_errors=True)
    results_dir.mkdir(parents=True)

    started = time.monotonic()
    all_results: dict[tuple[str, str], list[ScenarioResult]] = {}
    if "server" in sides:
        with (
            tempfile.TemporaryDirectory(prefix="codemode-conformance-serve-") as tmp,
            CodemodeServe(Path(tmp), results_dir) as serve,
        ):
            for req_set in sets:
                if not args.quiet:
                    print(
                        f"  {req_set} server: running the requirement set against {serve.url}",
                        file=sys.stderr,
                    )
                all_results[(req_set, "server")] = run_server_set(
                    serve.url, req_set, reqs[req_set], results_dir / req_set / "server", exp
                )
    if "client" in sides:
        for req_set in sets:
            all_results[(req_set, "client")] = run_client_set(
                req_set,
                reqs[req_set],
                results_dir / req_set / "client",
                exp,
                progress=not args.quiet,
                which=args.client_scenarios,
            )

    summary: dict[str, Any] = {
        "suite": f"@modelcontextprotocol/conformance@{suite_version}",
        "node": node_version,
        "seconds": round(time.monotonic() - started, 1),
        "results": {},
    }
    unexpected: list[str] = []
    expected: list[str] = []
    stale: list[str] = list(problems)
    warnings: list[str] = []
    lines: list[str] = []
    for (req_set, side), results in all_results.items():
        counts = tally(results)
        summary["results"].setdefault(req_set, {})[side] = {
            **counts,
            "scenarios": [r.to_json() for r in results],
        }
        extra = (
            f" (+{counts['not_scored_passed']}/{counts['not_scored_total']} not scored)"
            if counts["not_scored_total"]
            else ""
        )
        notes = [f"{counts['not_applicable']} not applicable"]
        if counts["expected_failures"]:
            plural = "s" if counts["expected_failures"] != 1 else ""
            notes.append(f"{counts['expected_failures']} expected failure{plural}")
        if counts["unexpected_failures"]:
            notes.append(f"{counts['unexpected_failures']} UNEXPECTED")
        lines.append(
            f"  {req_set}  {side:6}  {counts['required_passed']}/{counts['required_total']} "
            f"required scenarios passed{extra}; "
            f"checks {counts['checks_passed']} passed, {counts['checks_warnings']} warnings, "
            f"{counts['checks_failed']} failed; " + ", ".join(notes)
        )
        baseline = exp.baseline[req_set][side]
        for r in results:
            where = f"{req_set} {side} {r.name}"
            if r.error:
                unexpected.append(f"{where}: {r.error}")
            unexpected.extend(f"{where}: {u}" for u in r.unexpected)
            if r.expected and r.name in baseline:
                checks = f"{len(r.expected)} failing check{'s' if len(r.expected) != 1 else ''}"
                expected.append(f"{where} ({checks}): {baseline[r.name]}")
            elif r.expected:
                expected.extend(f"{where}:{c}: {baseline[f'{r.name}:{c}']}" for c in r.expected)
            warnings.extend(f"{where}: {w}" for w in r.warnings if r.not_applicable is None)
        stale.extend(f"{req_set} {side}: {s}" for s in stale_entries(results, exp, req_set, side))

    print(
        f"MCP conformance: {summary['suite']} on Node.js {node_version} "
        f"({summary['seconds']:.0f} s; results in {results_dir})"
    )
    print("\n".join(lines))
    for title, items in (
        ("expected failures (conformance/baseline.json)", expected),
        ("warnings (SHOULD-level; not failures)", warnings),
        ("stale or invalid expectations", stale),
        ("UNEXPECTED FAILURES", unexpected),
    ):
        if items or title.startswith("UNEXPECTED"):
            print(f"{title}:")
            print("\n".join(f"  - {i}" for i in items) if items else "  none")
    ok = not unexpected and not stale
    summary.update(ok=ok, unexpected=unexpected, stale=stale, expected=expected, warnings=warnings)
    (results_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    print(f"conformance: {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
