"""The "client under test" that the conformance suite launches for its client scenarios.

    conformance client --command "python conformance/client_adapter.py" --scenario tools_call

The suite appends its test server's URL as the last argument and sets
``MCP_CONFORMANCE_SCENARIO`` (which scenario), ``MCP_CONFORMANCE_PROTOCOL_VERSION`` (which wire:
up to 2025-11-25 the initialize handshake, 2026-07-28 the stateless revision) and, for some
scenarios, ``MCP_CONFORMANCE_CONTEXT`` (JSON, e.g. which tool calls to make).

Everything goes through codemode, the way a user would use it:

1. a temporary ``codemode.toml`` names the suite's server as an HTTP server (``protocol`` set
   from the requested wire) with the process sandbox backend;
2. ``McpHost`` connects and lists it; the listing is recorded in ``codemode.lock`` and approved
   (what ``codemode sync`` + ``codemode pin --approve`` do);
3. ``CodeMode`` connects again and runs a *program in the sandbox* that imports the generated
   stubs (``from servers.conformance import <tool>``) and calls the tools the scenario expects;
   every call passes the broker and leaves codemode through the host's MCP client. A server's
   request for input during a call goes to the adapter's stand-in for a person, which accepts
   each form as offered (codemode fills in its defaults).

The ``auth/*`` scenarios go through the public CLI instead, as a user signing in would:
``codemode auth login conformance --headless`` (the suite's authorization server approves at
once), ``codemode sync``, ``codemode pin --approve`` and ``codemode run`` of a program that calls
every listed tool. When the run is refused for want of a scope (a step-up, which needs a person),
the adapter signs in again and re-runs, as the error message tells a user to. Pre-registered
client credentials from the context become ``[servers.conformance.oauth] client_id`` and
``client_secret``; a client ID metadata document URL is always offered (the client uses it only
where the server supports such documents).

The client-credentials and workload-identity scenarios are a machine's sign-in:
``grant = "client_credentials"`` with the context's secret or private key, or
``grant = "jwt_bearer"`` with its workload token, or ``grant = "identity_assertion"`` with the
person's ID token and the identity provider's token endpoint (as ``${VAR}`` references the
adapter sets), and the issuer that an operator would configure, read here from the server's
protected-resource metadata. No ``auth login`` runs: ``sync`` and ``run`` obtain their tokens
themselves.

Nothing here talks MCP itself. Exit status: 0 when codemode connected and the program ran;
1 otherwise (the suite's checks decide conformance, the exit status only helps diagnosis).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import anyio

SERVER = "conformance"
"""The configured server name: stubs are ``servers.conformance.<tool>``."""

MODERN = "2026-07-28"

# Scenario → the tool calls its test server expects. ``None`` means: call whatever the context
# (``MCP_CONFORMANCE_CONTEXT.toolCalls``) names. Scenarios not listed only connect and list.
CALLS: dict[str, list[tuple[str, dict[str, Any]]] | None] = {
    "initialize": [],
    "request-metadata": [],
    "json-schema-ref-no-deref": [],
    "tools_call": [("add_numbers", {"a": 5, "b": 3})],
    "sse-retry": [("test_reconnection", {})],
    "elicitation-sep1034-client-defaults": [("test_client_elicitation_defaults", {})],
    "sep-2322-client-request-state": [
        ("test_mrtr_echo_state", {}),
        ("test_mrtr_unrelated", {}),
        ("test_mrtr_no_state", {}),
        ("test_mrtr_no_result_type", {}),
    ],
    "http-custom-headers": None,
}
CALL_EVERY_TOOL = {"http-standard-headers", "http-invalid-tool-headers"}
"""Scenarios whose server judges which of its listed tools the client is willing to call."""


def log(message: str) -> None:
    print(f"[codemode-adapter] {message}", file=sys.stderr, flush=True)


CLIENT_METADATA_URL = "https://conformance-test.local/client-metadata.json"
"""The client ID metadata document the adapter offers (the suite's servers accept this one)."""


def write_config(directory: Path, url: str, protocol_version: str, oauth: str = "") -> Path:
    protocol = MODERN if protocol_version == MODERN else "legacy"
    path = directory / "codemode.toml"
    path.write_text(
        f"""\
[servers.{SERVER}]
url = {json.dumps(url)}
protocol = "{protocol}"
connect_timeout = 20
call_timeout = 20
# The suite's servers listen on localhost over plain http.
allow_loopback = true
{oauth}

[sandbox]
backend = "process"
pool_size = 0

[policy.consent]
# The suite's fixture tools have no annotations, so codemode rates them high risk; the operator
# of this adapter consents to them up front (no approver is asked).
never = ["{SERVER}/*"]
""",
        encoding="utf-8",
    )
    return path


async def sync_and_approve(config: Any) -> list[Any]:
    """``codemode sync`` + ``codemode pin --approve``: record the listing and approve it."""
    from codemode.catalog import approve, load_lock, locked, observe, save_lock
    from codemode.host import ConnectionState, McpHost

    async with McpHost(config) as host:
        statuses, catalogs = host.statuses(), host.catalogs()
    for status in statuses:
        log(
            f"sync: {status.name} {status.state.value} protocol={status.protocol_version} "
            f"tools={status.tool_count} excluded={status.excluded_count}"
            + (f" error={status.error}" if status.error else "")
        )
        if status.state is ConnectionState.FAILED:
            raise SystemExit(1)
    with locked(config.lock_path):
        lock = load_lock(config.lock_path)
        pending = 0
        for catalog in catalogs:
            lock, diff = observe(lock, catalog)
            pending += len(diff.pending)
            for excluded in catalog.excluded:
                log(f"sync: excluded {excluded.name}: {excluded.reason}")
        if pending:
            lock, done = approve(lock, [None])
            log(f"pin --approve: {', '.join(done)}")
        save_lock(config.lock_path, lock)
    return catalogs


def program_for(calls: list[tuple[str, dict[str, Any]]], modules: dict[str, str]) -> str:
    """A sandbox program that makes ``calls`` through the stubs and returns what each gave."""
    lines = ["import codemode", "results = []"]
    for tool, arguments in calls:
        module = modules.get(tool)
        if module is None:  # not offered as a stub (excluded or not listed): codemode won't call it
            lines.append(f"results.append({{'tool': {tool!r}, 'skipped': 'no stub'}})")
            continue
        package, _, ident = module.rpartition(".")
        lines += [
            "try:",
            f"    from {package} import {ident}",
            f"    results.append({{'tool': {tool!r}, 'result': {ident}(**{arguments!r})}})",
            "except Exception as exc:",
            f"    results.append({{'tool': {tool!r}, 'error': f'{{type(exc).__name__}}: {{exc}}'}})",
        ]
    lines.append("results")
    return "\n".join(lines) + "\n"


def planned_calls(
    scenario: str, context: dict[str, Any], tools: list[Any]
) -> list[tuple[str, dict[str, Any]]]:
    if scenario in CALL_EVERY_TOOL:
        return [(spec.name, _sample_arguments(spec.input_schema)) for spec in tools]
    planned = CALLS.get(scenario, [])
    if planned is None or (not planned and context.get("toolCalls")):
        return [(c["name"], dict(c.get("arguments") or {})) for c in context.get("toolCalls", [])]
    if scenario == "json-schema-2020-12-preservation":
        return _schema_round_trip(tools)
    return planned


def _sample_arguments(schema: dict[str, Any]) -> dict[str, Any]:
    """Minimal valid-looking arguments for a listed tool (required properties only)."""
    samples: dict[str, Any] = {
        "string": "x",
        "integer": 1,
        "number": 1,
        "boolean": True,
        "array": [],
        "object": {},
    }
    properties: dict[str, Any] = schema.get("properties") or {}
    required: list[str] = schema.get("required") or []
    arguments: dict[str, Any] = {}
    for name in required:
        prop: dict[str, Any] = properties.get(name) or {}
        kind: Any = prop.get("type", "string")
        arguments[name] = samples.get(kind if isinstance(kind, str) else "string", "x")
    return arguments


def _schema_round_trip(tools: list[Any]) -> list[tuple[str, dict[str, Any]]]:
    """Echo the richest listed schema back, as codemode recorded it, through the echo tool."""
    focal = [t for t in tools if "$defs" in t.input_schema or "$schema" in t.input_schema]
    echo = [t for t in tools if t not in focal]
    if not focal or not echo:
        return []
    return [(echo[0].name, {"schema": focal[0].input_schema})]


def _accepts_as_offered() -> Any:
    """The adapter's stand-in for the person behind the run: it accepts every form as offered,
    leaving each field empty, so codemode fills in the form's defaults (and refuses a form with a
    required field that has none)."""
    from codemode import CallbackElicitor, ElicitationAnswer, ElicitationRequest

    async def accept(request: ElicitationRequest) -> ElicitationAnswer:
        log(f"elicitation from {request.server}/{request.tool}: {request.message!r}; accepting as offered")
        return ElicitationAnswer("accept", {}, answered_by="conformance-adapter")

    return CallbackElicitor(accept, name="conformance-adapter")


MACHINE_SCENARIOS = {
    "auth/client-credentials-basic": "client_credentials",
    "auth/client-credentials-jwt": "client_credentials",
    "auth/wif-jwt-bearer": "jwt_bearer",
    "auth/enterprise-managed-authorization": "identity_assertion",
}
"""The scenarios of a machine's sign-in, and their grant. (Others give a client secret too: a
pre-registered client that a person signs in with.)"""


def advertised_issuer(url: str) -> str:
    """The first authorization server of ``url``'s protected-resource metadata, found the way the
    spec describes (the 401's ``resource_metadata``): what the operator of a machine client
    looks up once and writes into its configuration."""
    request = urllib.request.Request(url, data=b"{}", headers={"Content-Type": "application/json"})  # noqa: S310
    challenge = ""
    try:
        urllib.request.urlopen(request, timeout=10).close()  # noqa: S310 - the suite's loopback server
    except urllib.error.HTTPError as refused:
        challenge = refused.headers.get("WWW-Authenticate", "")
    marker = 'resource_metadata="'
    start = challenge.index(marker) + len(marker)
    with urllib.request.urlopen(challenge[start : challenge.index('"', start)], timeout=10) as answer:  # noqa: S310
        return str(json.load(answer)["authorization_servers"][0])


def oauth_table(scenario: str, context: dict[str, Any], url: str) -> str:
    grant = MACHINE_SCENARIOS.get(scenario)
    if grant is not None:
        lines = [
            f"[servers.{SERVER}.oauth]",
            f'grant = "{grant}"',
            f"issuer = {json.dumps(advertised_issuer(url))}",
            f"client_id = {json.dumps(context['client_id'])}",
        ]
        if grant == "identity_assertion":
            # The company's identity provider; the person's ID token is what single sign-on left.
            lines.append('client_secret = "${CONFORMANCE_CLIENT_SECRET}"')
            lines.append(f"[servers.{SERVER}.oauth.identity_provider]")
            lines.append(f"token_endpoint = {json.dumps(context['idp_token_endpoint'])}")
            lines.append(f"client_id = {json.dumps(context['idp_client_id'])}")
            lines.append('id_token = "${CONFORMANCE_ID_TOKEN}"')
        elif grant == "jwt_bearer":
            lines.append('assertion = "${CONFORMANCE_WORKLOAD_TOKEN}"')
        elif context.get("private_key_pem"):
            lines.append('private_key = "${CONFORMANCE_PRIVATE_KEY}"')
            lines.append(f"signing_algorithm = {json.dumps(context.get('signing_algorithm') or 'RS256')}")
        else:
            lines.append('client_secret = "${CONFORMANCE_CLIENT_SECRET}"')
        return "\n".join(lines) + "\n"
    lines = [f"[servers.{SERVER}.oauth]", f"client_metadata_url = {json.dumps(CLIENT_METADATA_URL)}"]
    if context.get("client_id"):
        lines.append(f"client_id = {json.dumps(context['client_id'])}")
    if context.get("client_secret"):
        # A secret is written as a reference, as codemode.toml asks; the adapter sets the variable.
        lines.append('client_secret = "${CONFORMANCE_CLIENT_SECRET}"')
    return "\n".join(lines) + "\n"


def cli(directory: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "codemode.cli", *args, "--config", str(directory / "codemode.toml")]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60, check=False)
    log(f"$ codemode {' '.join(args)} -> exit {done.returncode}\n{done.stdout}{done.stderr}")
    return done


def run_auth_scenario(scenario: str, url: str, protocol_version: str, context: dict[str, Any]) -> int:
    """config -> auth login --headless -> sync -> pin --approve -> run, all through the CLI."""
    with tempfile.TemporaryDirectory(prefix="codemode-conformance-auth-") as tmp:
        directory = Path(tmp)
        write_config(directory, url, protocol_version, oauth_table(scenario, context, url))
        env = {
            **os.environ,
            "CODEMODE_CREDENTIALS": str(directory / "credentials.json"),
            "CONFORMANCE_CLIENT_SECRET": str(context.get("client_secret") or ""),
            "CONFORMANCE_PRIVATE_KEY": str(context.get("private_key_pem") or ""),
            "CONFORMANCE_WORKLOAD_TOKEN": str(context.get("valid_jwt") or ""),
            "CONFORMANCE_ID_TOKEN": str(context.get("idp_id_token") or ""),
        }
        sign_in = [] if scenario in MACHINE_SCENARIOS else [["auth", "login", SERVER, "--headless"]]
        for step in (*sign_in, ["sync"], ["pin", "--approve"]):
            if cli(directory, *step, env=env).returncode != 0:
                return 1
        listed = cli(directory, "tree", "servers/" + SERVER, "--json", env=env)
        names = sorted(
            str(entry["name"]).removesuffix(".py")
            for entry in json.loads(listed.stdout or "[]")
            if entry["kind"] != "directory" and not str(entry["name"]).startswith("_")
        )
        program = directory / "program.py"
        lines = ["results = []"]
        lines += [f"from servers.{SERVER} import {n}\nresults.append({n}())" for n in names]
        program.write_text("\n".join([*lines, "results"]) + "\n", encoding="utf-8")
        run = cli(directory, "run", str(program), "--json", env=env)
        if run.returncode != 0 and f"codemode auth login {SERVER}" in run.stdout + run.stderr:
            # A call was refused for want of a scope (step-up): what a person does next is sign
            # in again - login asks for the scope the call was refused for - and re-run.
            if cli(directory, "auth", "login", SERVER, "--headless", env=env).returncode != 0:
                return 1
            run = cli(directory, "run", str(program), "--json", env=env)
        return 0 if run.returncode == 0 else 1


async def main(url: str) -> int:
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    protocol_version = os.environ.get("MCP_CONFORMANCE_PROTOCOL_VERSION", "2025-11-25")
    context: dict[str, Any] = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    log(f"scenario={scenario} protocol={protocol_version} url={url}")
    if scenario.startswith("auth/"):
        return await anyio.to_thread.run_sync(run_auth_scenario, scenario, url, protocol_version, context)

    try:
        from codemode import CodeMode
    except ImportError:  # before the Python API exported it
        from codemode.engine._engine import CodeMode
    from codemode.config import load_config

    with tempfile.TemporaryDirectory(prefix="codemode-conformance-") as tmp:
        config = load_config(write_config(Path(tmp), url, protocol_version))
        await sync_and_approve(config)
        async with CodeMode(config, elicitor=_accepts_as_offered()) as engine:
            tree = engine.tree
            tools = tree.tools()
            modules = {
                spec.name: module
                for spec in tools
                if (module := tree.module_for_tool(SERVER, spec.name)) is not None
            }
            calls = planned_calls(scenario, context, tools)
            if not calls:
                log("connected and listed; this scenario needs no tool call")
                return 0
            program = program_for(calls, modules)
            log("running in the sandbox:\n" + program)
            result = await engine.run(program)
            print(json.dumps(result.to_json(), indent=1, default=str))
            if result.status != "ok":
                log(f"run failed: {result.error}")
                return 1
            return 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: client_adapter.py SERVER_URL  (the conformance suite appends it)")
    sys.exit(anyio.run(main, sys.argv[-1]))
