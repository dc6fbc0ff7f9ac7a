"""The sandbox wire contract: one file that both ends read, and every message kind round-trips.

``codemode/sandbox/_wire.py`` is the host's module and, staged byte for byte, the runtime's
``codemode_runtime._wire``. These tests hold the two ends to it: the staged copies are the same
bytes, neither end spells a protocol constant of its own, the host's validators accept exactly
the wire's shapes, every message kind survives the trip in both directions (encoded by one end's
code, read by the other's), and a changed contract changes the runtime digest and so rebuilds
the image.
"""

# pyright: reportPrivateUsage=false
# (the host's validators and message classifier are what these tests hold to the contract)

from __future__ import annotations

import importlib.util
import subprocess
import sys
import threading
import types
import typing
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import docker
import pytest
from pydantic import BaseModel

from codemode import calls
from codemode.calls import (
    CallDenied,
    CallFailed,
    CallOutcome,
    ModuleSource,
    PromptGetRequest,
    ResourceReadRequest,
    RunBinding,
    ToolCallRequest,
    ToolError,
    ToolResult,
    content_blocks,
)
from codemode.sandbox import _channel_messages, _files, _outcome, build_image
from codemode.sandbox import _wire as wire
from codemode.sandbox._channel import HostChannel, RemoteError, RunContext
from codemode.sandbox._docker import RUNTIME_LABEL
from codemode.sandbox._docker_api import docker_api
from codemode.sandbox._files import (
    BOOT_SCRIPT,
    RUNTIME_PACKAGE,
    WIRE_MODULE,
    WIRE_SOURCE,
    install_runtime,
    runtime_digest,
    runtime_files,
    sandbox_dir,
    stage_build_context,
    stage_runtime,
)
from codemode.sandbox._framing import decode, encode
from codemode.sandbox._outcome import parse_reply, parse_snapshot

pytestmark = pytest.mark.anyio

MiB = 1024 * 1024
HOST_MODULES = ("_channel.py", "_channel_messages.py", "_framing.py", "_outcome.py")


@pytest.fixture
def staged(tmp_path: Path) -> Path:
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    stage_runtime(runtime)
    return runtime


@pytest.fixture
def runtime_wire(staged: Path) -> types.ModuleType:
    """The runtime's copy of the wire module, loaded on its own (not the host's module object)."""
    spec = importlib.util.spec_from_file_location("staged_wire", staged / WIRE_MODULE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module is not wire
    return module


# -- one source ----------------------------------------------------------------------------------


def test_every_staged_runtime_holds_the_hosts_wire_module_byte_for_byte(tmp_path: Path) -> None:
    source = WIRE_SOURCE.read_bytes()
    assert Path(wire.__file__).resolve() == WIRE_SOURCE
    base = tmp_path / "base"
    base.mkdir()
    installed = install_runtime(base)  # the process and bwrap backends' copy
    assert (installed / WIRE_MODULE).read_bytes() == source
    context = tmp_path / "context"
    context.mkdir()
    stage_build_context(context)  # what `codemode sandbox build` sends to Docker
    assert (context / "runtime" / WIRE_MODULE).read_bytes() == source
    assert (context / "Dockerfile").read_bytes() == (sandbox_dir() / "Dockerfile").read_bytes()
    staged = sorted(p.relative_to(installed).as_posix() for p in installed.rglob("*") if p.is_file())
    assert staged == list(runtime_files())
    assert {BOOT_SCRIPT, f"{RUNTIME_PACKAGE}/__init__.py", f"{RUNTIME_PACKAGE}/__init__.pyi"} <= set(staged)


def test_in_a_checkout_the_runtimes_wire_module_is_a_link_to_the_hosts() -> None:
    link = sandbox_dir() / "runtime" / WIRE_MODULE
    if "_bundled" in sandbox_dir().parts:
        pytest.skip("an installed wheel holds a copy (staging replaces it with the host's file)")
    assert link.is_symlink(), f"{link} must be a symlink to {WIRE_SOURCE}, not a copy"
    assert link.resolve() == WIRE_SOURCE


def test_host_and_runtime_read_the_same_constants(runtime_wire: types.ModuleType) -> None:
    def constants(module: types.ModuleType) -> dict[str, Any]:
        return {
            name: value
            for name, value in vars(module).items()
            if name.isupper() and isinstance(value, int | str | frozenset | tuple)
        }

    host = constants(wire)
    assert len(host) > 30, sorted(host)
    assert constants(runtime_wire) == host
    assert runtime_wire.HEADER.format == wire.HEADER.format


# Literals that belong to the contract: each end must take them from ``_wire``, never spell them.
# (``read_resource`` and ``get_prompt`` are left out: they are the runtime API's names as well.)
_CONTRACT_LITERALS = (
    '">I"',
    "-32000",
    "-32001",
    "-3260",
    '"channel.sock"',
    '"/run/codemode"',
    '"CODEMODE_CHANNEL_DIR"',
    '"2.0"',
    '"hello"',
    '"import"',
    '"call"',
    '"run"',
    '"snapshot"',
    "16 * 1024 * 1024",
)


@pytest.mark.parametrize("end", ["runtime", "host"])
def test_neither_end_spells_a_protocol_constant_of_its_own(end: str, staged: Path) -> None:
    if end == "runtime":
        files = [p for p in (staged / RUNTIME_PACKAGE).glob("*.py") if p.name != "_wire.py"]
        files.append(staged / BOOT_SCRIPT)
    else:
        files = [WIRE_SOURCE.with_name(name) for name in HOST_MODULES]
    assert len(files) >= 3
    found = [
        f"{path.name}: {literal}"
        for path in files
        for literal in _CONTRACT_LITERALS
        if literal in path.read_text()
    ]
    assert found == []


def test_the_runtime_digest_follows_the_wire_contract(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = runtime_digest()
    assert runtime_digest() == before
    changed = tmp_path / "_wire.py"
    changed.write_bytes(WIRE_SOURCE.read_bytes() + b"\n# a changed contract\n")
    monkeypatch.setattr(_files, "WIRE_SOURCE", changed)
    after = runtime_digest()
    assert after != before
    base = tmp_path / "base"
    base.mkdir()
    installed = install_runtime(base)
    assert installed.name == f"runtime-{after}"
    assert (installed / WIRE_MODULE).read_bytes() == changed.read_bytes()


def test_host_processes_installing_the_runtime_at_once_each_get_a_whole_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Test workers or batch workers starting together all stage the runtime; the first rename wins
    and nobody's staging folder is pulled from under it."""
    starters = 4
    all_staging = threading.Barrier(starters, timeout=30)
    stage = _files.stage_runtime

    def stage_together(target: Path) -> None:
        stage(target)
        all_staging.wait()  # every starter is mid-install at once

    monkeypatch.setattr(_files, "stage_runtime", stage_together)
    base = tmp_path / "base"
    base.mkdir()
    with ThreadPoolExecutor(starters) as pool:
        installed = [
            future.result() for future in [pool.submit(install_runtime, base) for _ in range(starters)]
        ]
    assert len(set(installed)) == 1
    assert sorted(path.name for path in base.iterdir()) == [installed[0].name]
    assert all((installed[0] / name).is_file() for name in runtime_files())


# -- the host's validators and the wire's shapes -------------------------------------------------

_VALIDATED: list[tuple[type[BaseModel], Any]] = [
    (_channel_messages.HelloParams, wire.HelloParams),
    (_channel_messages.ImportParams, wire.ImportParams),
    (_channel_messages.CallParams, wire.CallParams),
    (_channel_messages.ReadParams, wire.ReadResourceParams),
    (_channel_messages.PromptParams, wire.GetPromptParams),
    (_outcome.Snapshot, wire.Snapshot),
    (_outcome.RuntimeReply, wire.RunReply),
    (_outcome.ReplyError, wire.ReplyError),
]


@pytest.mark.parametrize(("model", "shape"), _VALIDATED, ids=lambda x: getattr(x, "__name__", ""))
def test_the_host_validates_exactly_the_wire_shapes(model: type[BaseModel], shape: Any) -> None:
    """Same fields; the host demands nothing the wire leaves optional (it may default more)."""
    assert set(model.model_fields) == set(shape.__annotations__)
    required = {name for name, info in model.model_fields.items() if info.is_required()}
    assert required <= shape.__required_keys__
    assert model.model_config.get("extra") == "forbid"


_OUTCOMES: list[tuple[type[BaseModel], Any]] = [
    (calls.ToolResult, wire.OkOutcome),
    (calls.ToolError, wire.ToolErrorOutcome),
    (calls.CallDenied, wire.DeniedOutcome),
    (calls.CallFailed, wire.FailedOutcome),
]


@pytest.mark.parametrize(("model", "shape"), _OUTCOMES, ids=lambda x: getattr(x, "__name__", ""))
def test_call_outcomes_are_the_wire_shapes(model: type[BaseModel], shape: Any) -> None:
    assert set(model.model_fields) == set(shape.__annotations__) == shape.__required_keys__
    (kind,) = typing.get_args(typing.get_type_hints(shape)["kind"])
    assert model.model_fields["kind"].default == kind


def test_the_enumerations_agree() -> None:
    assert {model.model_fields["kind"].default for model, _ in _OUTCOMES} == set(wire.OUTCOME_KINDS)
    assert typing.get_args(wire.OutcomeKind) == wire.OUTCOME_KINDS
    assert typing.get_args(wire.ResultKind) == wire.RESULT_KINDS
    assert typing.get_args(wire.Status) == wire.STATUSES
    assert _outcome.ResultKind is wire.ResultKind
    everything = {
        wire.HELLO,
        wire.IMPORT,
        wire.CALL,
        wire.READ_RESOURCE,
        wire.GET_PROMPT,
        wire.RUN,
        wire.SNAPSHOT,
    }
    assert everything == wire.SANDBOX_METHODS | wire.HOST_METHODS
    assert wire.CALL_METHODS < wire.SANDBOX_METHODS
    assert not wire.SANDBOX_METHODS & wire.HOST_METHODS


# -- every message kind, encoded by one end and read by the other --------------------------------


def conforms(value: Any, shape: Any) -> None:
    """``value`` has ``shape``'s keys: all the required ones, and no others."""
    assert isinstance(value, dict)
    keys = set(typing.cast(dict[str, Any], value))
    assert shape.__required_keys__ <= keys, f"missing {shape.__required_keys__ - keys}"
    assert keys <= set(shape.__annotations__), f"unknown {keys - set(shape.__annotations__)}"


_TO_HOST: dict[str, tuple[str, dict[str, Any], type[BaseModel]]] = {
    "hello": (
        wire.HELLO,
        {"secret": "s3cret", "protocol": wire.PROTOCOL_VERSION, "pid": 7},
        _channel_messages.HelloParams,
    ),
    "import": (wire.IMPORT, {"module": "servers.demo.add"}, _channel_messages.ImportParams),
    "call": (
        wire.CALL,
        {
            "server": "demo",
            "tool": "add",
            "schema_hash": "sha256:x",
            "arguments": {"a": [1, {"b": None}], "ü": "✓"},
            "idempotency_key": "k-1",
        },
        _channel_messages.CallParams,
    ),
    "read_resource": (wire.READ_RESOURCE, {"server": "demo", "uri": "mem://a"}, _channel_messages.ReadParams),
    "get_prompt": (
        wire.GET_PROMPT,
        {"server": "demo", "name": "greet", "arguments": {"who": "Ada"}},
        _channel_messages.PromptParams,
    ),
}


@pytest.mark.parametrize("kind", list(_TO_HOST))
def test_sandbox_requests_reach_the_host_intact(kind: str, runtime_wire: types.ModuleType) -> None:
    method, params, model = _TO_HOST[kind]
    frame = runtime_wire.encode_frame(runtime_wire.request(3, method, params))
    (length,) = wire.HEADER.unpack(frame[: wire.HEADER.size])
    assert length == len(frame) - wire.HEADER.size
    message = _channel_messages.classify(decode(frame[wire.HEADER.size :]))
    assert (message.kind, message.id, message.method) == ("request", 3, method)
    assert model.model_validate(message.params).model_dump(exclude_unset=True) == params
    assert method in wire.SANDBOX_METHODS


_REPLIES: dict[str, dict[str, Any]] = {
    "a value": {
        "status": "ok",
        "result_kind": "json",
        "result_json": '{"a": [1, 2]}',
        "stdout": "out\n",
        "stdout_truncated": False,
        "stderr": "",
        "stderr_truncated": False,
        "error": None,
    },
    "a repr": {
        "status": "ok",
        "result_kind": "repr",
        "result_repr": "Point(1, 2)",
        "result_truncated": False,
        "stdout": "",
        "stdout_truncated": False,
        "stderr": "",
        "stderr_truncated": True,
        "error": None,
    },
    "an error": {
        "status": "error",
        "result_kind": "stdout",
        "stdout": "",
        "stdout_truncated": False,
        "stderr": "warning\n",
        "stderr_truncated": False,
        "error": {"type": "ValueError", "message": "bad", "traceback": '  File "<program>", line 1\n'},
    },
}


@pytest.mark.parametrize("kind", list(_REPLIES))
def test_run_replies_reach_the_host_intact(kind: str, runtime_wire: types.ModuleType) -> None:
    reply = _REPLIES[kind]
    conforms(reply, runtime_wire.RunReply)
    frame = runtime_wire.encode_frame(runtime_wire.response(9, reply))
    message = _channel_messages.classify(decode(frame[wire.HEADER.size :]))
    assert (message.kind, message.id) == ("response", 9)
    assert parse_reply(message.result).model_dump(exclude_unset=True) == reply


def test_snapshots_reach_the_host_intact(runtime_wire: types.ModuleType) -> None:
    snapshot = {"stdout": "so far\n", "stdout_truncated": True, "stderr": "", "stderr_truncated": False}
    conforms(snapshot, runtime_wire.Snapshot)
    frame = runtime_wire.encode_frame(runtime_wire.response(2, snapshot))
    message = _channel_messages.classify(decode(frame[wire.HEADER.size :]))
    assert parse_snapshot(message.result).model_dump() == snapshot


def _outcome_dumps() -> dict[str, dict[str, Any]]:
    blocks = content_blocks(
        [{"type": "text", "text": "{}"}, {"type": "image", "data": "AA==", "mimeType": "x"}]
    )
    outcomes: list[CallOutcome] = [
        ToolResult(structured={"total": 3}, content=blocks),
        ToolError(message="no such row", content=blocks[:1]),
        CallDenied(gate="policy", reason="not allowed"),
        CallFailed(reason="server down", outcome_unknown=True),
    ]
    return {outcome.kind: outcome.model_dump(mode="json") for outcome in outcomes}


_TO_SANDBOX: dict[str, tuple[Any, str]] = {
    "run request": (
        {
            "run_id": "r1",
            "code": "1 + 1",
            "output_bytes": 10,
            "result_bytes": 20,
            "bindings": {"x": 1},
            "fresh": True,
        },
        "RunParams",
    ),
    "hello result": ({"protocol": wire.PROTOCOL_VERSION, "max_frame_bytes": 4 * MiB}, "HelloResult"),
    "import found": ({"found": True, "source": "x = 1\n", "is_package": False}, "ImportResult"),
    "import not found": ({"found": False}, "ImportResult"),
    **{f"outcome {kind}": (dump, "CallOutcome") for kind, dump in _outcome_dumps().items()},
}
_OUTCOME_SHAPES = {
    "ok": "OkOutcome",
    "tool_error": "ToolErrorOutcome",
    "denied": "DeniedOutcome",
    "failed": "FailedOutcome",
}


@pytest.mark.parametrize("kind", list(_TO_SANDBOX))
def test_host_messages_reach_the_runtime_intact(kind: str, runtime_wire: types.ModuleType) -> None:
    value, shape_name = _TO_SANDBOX[kind]
    if shape_name == "CallOutcome":
        shape_name = _OUTCOME_SHAPES[value["kind"]]
    conforms(value, getattr(wire, shape_name))
    message = wire.request(5, wire.RUN, value) if kind == "run request" else wire.response(5, value)
    received = runtime_wire.decode_body(encode(message)[runtime_wire.HEADER.size :])
    assert received == message
    conforms(
        received["params"] if kind == "run request" else received["result"], getattr(runtime_wire, shape_name)
    )


@pytest.mark.parametrize(
    "code",
    [
        wire.SERVER_ERROR,
        wire.NO_RUN,
        wire.INVALID_REQUEST,
        wire.METHOD_NOT_FOUND,
        wire.INVALID_PARAMS,
        wire.INTERNAL_ERROR,
    ],
)
def test_error_responses_reach_either_end_intact(code: int, runtime_wire: types.ModuleType) -> None:
    from_host = runtime_wire.decode_body(encode(wire.error_response(4, code, "why"))[4:])
    assert from_host == {"jsonrpc": "2.0", "id": 4, "error": {"code": code, "message": "why"}}
    from_runtime = _channel_messages.classify(
        decode(runtime_wire.encode_frame(runtime_wire.error_response(4, code, "why"))[4:])
    )
    assert (from_runtime.kind, from_runtime.error) == ("response", {"code": code, "message": "why"})


# -- the real runtime talking to the real host channel -------------------------------------------

_PROGRAM = """
import codemode, codemode_runtime
from servers.demo import VALUE
seen = [VALUE]
try:
    import servers.missing
except ModuleNotFoundError:
    seen.append("no servers.missing")
seen.append(codemode.call_tool("demo", "ok", "sha256:h", {"a": [1, None]}, idempotency_key="k-1"))
seen.append(codemode.call_tool("demo", "content", "sha256:h", {}))
for tool in ("tool_error", "denied", "failed"):
    try:
        codemode.call_tool("demo", tool, "sha256:h", {})
    except codemode.ToolError as exc:
        seen.append(["ToolError", exc.message, exc.content])
    except codemode.CallDenied as exc:
        seen.append(["CallDenied", exc.gate, exc.reason])
    except codemode.CallFailed as exc:
        seen.append(["CallFailed", exc.reason, exc.outcome_unknown])
seen.append([[c.uri, c.text] for c in codemode.read_resource("demo", "mem://a")])
seen.append([[m.role, m.content] for m in codemode.get_prompt("demo", "greet", {"who": "Ada"})])
refused = [("call", {"server": "demo"}), ("shell", {}), ("hello", {"secret": "x", "protocol": 1})]
for method, params in refused:
    try:
        codemode_runtime._request(method, params)
    except codemode_runtime._RemoteError as exc:
        seen.append(exc.code)
print("partial output")
seen.append(codemode.call_tool("demo", "snapshot", "sha256:h", {}))
seen
"""


class _Modules:
    def module_source(self, module: str) -> ModuleSource | None:
        if module == "servers":
            return ModuleSource(source="", is_package=True)
        if module == "servers.demo":
            return ModuleSource(source="VALUE = 'imported'\n", is_package=True)
        return None


@dataclass
class _Handler:
    channel: HostChannel
    requests: list[Any] = field(default_factory=lambda: [])
    snapshots: list[_outcome.Snapshot] = field(default_factory=lambda: [])

    async def call_tool(self, binding: RunBinding, request: ToolCallRequest) -> CallOutcome:
        self.requests.append(request)
        if request.tool == "snapshot":
            # The program waits for this call; its runtime's reader thread answers meanwhile.
            for _ in range(500):
                snapshot = parse_snapshot(await self.channel.request(wire.SNAPSHOT, {}))
                self.snapshots.append(snapshot)
                if snapshot.stdout:
                    break
                await anyio.sleep(0.01)
            return ToolResult(structured={"snapshots": len(self.snapshots)})
        return {
            "ok": ToolResult(structured={"total": 3}),
            "content": ToolResult(
                content=content_blocks(
                    [{"type": "text", "text": '{"a": 1}'}, {"type": "text", "text": "plain"}]
                )
            ),
            "tool_error": ToolError(
                message="no such row", content=content_blocks([{"type": "text", "text": "42"}])
            ),
            "denied": CallDenied(gate="policy", reason="not allowed"),
        }.get(request.tool, CallFailed(reason="server down", outcome_unknown=True))

    async def read_resource(self, binding: RunBinding, request: ResourceReadRequest) -> CallOutcome:
        self.requests.append(request)
        return ToolResult(structured={"contents": [{"uri": request.uri, "text": "body"}]})

    async def get_prompt(self, binding: RunBinding, request: PromptGetRequest) -> CallOutcome:
        self.requests.append(request)
        return ToolResult(
            structured={"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}]}
        )


async def test_every_message_kind_between_the_real_runtime_and_the_host(staged: Path, tmp_path: Path) -> None:
    """The staged runtime, started as a sandbox starts it (minus the sandbox), and a host channel."""
    directory = tmp_path / "channel"
    channel = HostChannel(directory, max_frame_bytes=4 * MiB)
    await channel.listen()
    runtime = await anyio.open_process(
        [sys.executable, "-I", "-B", str(staged / BOOT_SCRIPT)],
        env={wire.CHANNEL_DIR_ENV: str(directory)},
        stdin=subprocess.DEVNULL,
        stdout=None,
        stderr=None,
    )
    try:
        await _converse(channel)
        # The channel's end is the runtime's end.
        assert await runtime.wait() == 0
    finally:
        if runtime.returncode is None:
            runtime.kill()
        await runtime.aclose()


async def _converse(channel: HostChannel) -> None:
    await channel.accept(30.0)  # hello, answered with HelloResult
    handler = _Handler(channel)
    binding = RunBinding(run_id="r-1", principal="alice", tenant="acme", trace_id="t-1")
    async with anyio.create_task_group() as tg:
        tg.start_soon(channel.serve)
        channel.bind(RunContext(binding=binding, modules=_Modules(), handler=handler))
        params: wire.RunParams = {
            "run_id": binding.run_id,
            "code": _PROGRAM,
            "output_bytes": 4096,
            "result_bytes": 65536,
            "bindings": {},
            "fresh": False,
        }
        reply = parse_reply(await channel.request(wire.RUN, dict(params)))
        assert reply.status == "ok", reply.error
        assert reply.stdout == "partial output\n"
        assert reply.result_kind == "json" and reply.result_json is not None
        assert decode(reply.result_json.encode()) == [
            "imported",
            "no servers.missing",
            {"total": 3},
            [{"a": 1}, "plain"],
            ["ToolError", "no such row", [42]],
            ["CallDenied", "policy", "not allowed"],
            ["CallFailed", "server down", True],
            [["mem://a", "body"]],
            [["user", "hi"]],
            wire.INVALID_PARAMS,
            wire.METHOD_NOT_FOUND,
            wire.INVALID_REQUEST,
            {"snapshots": len(handler.snapshots)},
        ]
        assert handler.snapshots[-1].stdout == "partial output\n"
        first = handler.requests[0]
        assert isinstance(first, ToolCallRequest)
        assert (first.arguments, first.idempotency_key, first.schema_hash) == (
            {"a": [1, None]},
            "k-1",
            "sha256:h",
        )
        assert [type(r).__name__ for r in handler.requests[-3:]] == [
            "ResourceReadRequest",
            "PromptGetRequest",
            "ToolCallRequest",
        ]
        prompt = handler.requests[-2]
        assert isinstance(prompt, PromptGetRequest) and prompt.arguments == {"who": "Ada"}

        # A failing program: the reply carries the error's shape.
        failing = {**params, "code": "raise ValueError('bad value')\n"}
        error_reply = parse_reply(await channel.request(wire.RUN, failing))
        assert error_reply.status == "error" and error_reply.error is not None
        assert (error_reply.error.type, error_reply.error.message) == ("ValueError", "bad value")
        assert 'File "<program #2>", line 1' in error_reply.error.traceback
        assert "codemode_runtime" not in error_reply.error.traceback
        # Requests the runtime refuses come back as JSON-RPC errors.
        with pytest.raises(RemoteError, match="unknown method"):
            await channel.request("shell", {})
        with pytest.raises(RemoteError, match="'code' must be a string"):
            await channel.request(wire.RUN, {**params, "code": 1})
        channel.unbind()
        await channel.aclose()
        tg.cancel_scope.cancel()


# -- the image follows the contract --------------------------------------------------------------


@pytest.mark.docker
@pytest.mark.slow
def test_sandbox_build_rebuilds_the_image_when_the_wire_contract_changes(
    docker_image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tag = f"codemode-sandbox-wiretest:{uuid.uuid4().hex[:12]}"
    built: list[str] = []

    def with_marker(marker: str) -> None:
        changed = tmp_path / f"{marker}.py"
        changed.write_bytes(WIRE_SOURCE.read_bytes() + f"\n# {marker}\n".encode())
        monkeypatch.setattr(_files, "WIRE_SOURCE", changed)

    def wire_in_image() -> str:
        client = docker.from_env()
        try:
            output = client.containers.run(
                tag,
                entrypoint=["python3", "-c", f"print(open('/opt/codemode/{WIRE_MODULE}').read())"],
                network_disabled=True,
                remove=True,
            )
        finally:
            client.close()
        return output.decode()

    try:
        with_marker("contract-a")
        first = build_image(tag, pull=False)
        built.append(first.image_id)
        assert first.rebuilt
        again = build_image(tag, pull=False)
        assert not again.rebuilt and again.image_id == first.image_id
        assert wire_in_image().rstrip().endswith("# contract-a")

        with_marker("contract-b")
        second = build_image(tag, pull=False)
        built.append(second.image_id)
        assert second.rebuilt and second.image_id != first.image_id
        api = docker_api()
        try:
            info = api.image(tag)
        finally:
            api.close()
        assert info is not None and info[1][RUNTIME_LABEL] == runtime_digest()
        assert wire_in_image().rstrip().endswith("# contract-b")
    finally:
        api = docker_api()
        try:
            for image_id in reversed(built):
                api.remove_image(image_id)
        finally:
            api.close()
