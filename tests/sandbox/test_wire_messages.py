"""The sandbox wire contract: the host's validators accept exactly the wire's shapes, and every
message kind round-trips in both directions (encoded by one end's code, read by the other's).

See ``test_wire.py`` for the contract itself (``codemode/sandbox/_wire.py``, staged byte for byte as
the runtime's ``codemode_runtime._wire``).
"""

# pyright: reportPrivateUsage=false
# (the host's validators and message classifier are what these tests hold to the contract)

from __future__ import annotations

import types
import typing
from typing import Any

import pytest
from pydantic import BaseModel

from codemode import calls
from codemode.calls import CallDenied, CallFailed, CallOutcome, ToolError, ToolResult, content_blocks
from codemode.sandbox import _channel_messages, _outcome
from codemode.sandbox import _wire as wire
from codemode.sandbox._framing import decode, encode
from codemode.sandbox._outcome import parse_reply, parse_snapshot

pytestmark = pytest.mark.anyio

MiB = 1024 * 1024


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
    (_outcome.WorkspaceReply, wire.WorkspaceReply),
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
    (calls.CallPlanned, wire.PlannedOutcome),
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
        wire.PROPOSE_SKILL,
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
