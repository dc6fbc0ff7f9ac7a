"""The sandbox channel's wire contract, written once and read by both ends.

The host imports this file as ``codemode.sandbox._wire``. The in-sandbox runtime gets a
byte-identical copy staged beside it as ``codemode_runtime/_wire.py`` (``codemode.sandbox._files``
does the staging, and the runtime digest covers it, so a change here rebuilds the image). The copy
runs inside a sandbox that holds nothing but the standard library and the runtime: this module
imports only the standard library, nothing of ``codemode``, and holds only constants, shapes and
pure helpers.

The conversation, JSON-RPC 2.0 over one Unix stream socket, each message one frame
(:data:`HEADER`: 4-byte big-endian length, then that many bytes of UTF-8 JSON):

* the sandbox connects to :data:`SOCKET_NAME` in its channel directory and sends :data:`HELLO`
  with the one-time secret it read from :data:`SECRET_NAME` (:class:`HelloParams`); the host
  answers :class:`HelloResult`;
* the host sends :data:`RUN` (:class:`RunParams`) and the sandbox answers :class:`RunReply`;
  while a program runs the host may send :data:`SNAPSHOT` for the output so far (:class:`Snapshot`);
* during a run the program's runtime sends :data:`IMPORT` (:class:`ImportParams`, answered with
  :class:`ImportResult`) and :data:`CALL`, :data:`READ_RESOURCE`, :data:`GET_PROMPT` (answered
  with a :data:`CallOutcome`). Refusals come back as JSON-RPC errors with the codes below.
"""

# No ``from __future__ import annotations``: Python 3.11 sees ``NotRequired`` in a TypedDict only
# when the annotations are evaluated.
import json
import struct
from collections.abc import Mapping
from typing import Any, Final, Literal, NoReturn, NotRequired, TypedDict, cast

PROTOCOL_VERSION: Final = 1
"""Raised whenever a message's meaning changes; the host refuses a runtime speaking another."""

JSONRPC: Final = "2.0"

# -- transport ------------------------------------------------------------------------------

HEADER: Final = struct.Struct(">I")
"""Every frame starts with its body's length: 4 bytes, big-endian, unsigned."""
MAX_DEPTH: Final = 64
"""The deepest nesting of JSON either side accepts in a message or a program's result."""
HELLO_FRAME_BYTES: Final = 4096
"""The host reads at most this much of an unauthenticated connection's first frame."""
DEFAULT_MAX_FRAME_BYTES: Final = 16 * 1024 * 1024
"""The runtime's frame limit until :class:`HelloResult` gives the host's."""

CHANNEL_DIR: Final = "/run/codemode"
"""Where the channel directory appears inside a container or bwrap sandbox."""
CHANNEL_DIR_ENV: Final = "CODEMODE_CHANNEL_DIR"
"""Names the channel directory where it is not :data:`CHANNEL_DIR` (the process backend)."""
SOCKET_NAME: Final = "channel.sock"
SECRET_NAME: Final = "secret"  # noqa: S105 - a file name

# -- methods --------------------------------------------------------------------------------

HELLO: Final = "hello"
IMPORT: Final = "import"
CALL: Final = "call"
READ_RESOURCE: Final = "read_resource"
GET_PROMPT: Final = "get_prompt"
RUN: Final = "run"
SNAPSHOT: Final = "snapshot"

SANDBOX_METHODS: Final = frozenset({HELLO, IMPORT, CALL, READ_RESOURCE, GET_PROMPT})
"""What the sandbox may ask of the host."""
CALL_METHODS: Final = frozenset({CALL, READ_RESOURCE, GET_PROMPT})
"""The requests that reach the broker (each counts as one call of the run)."""
HOST_METHODS: Final = frozenset({RUN, SNAPSHOT})
"""What the host asks of the sandbox."""

# -- JSON-RPC error codes -------------------------------------------------------------------

SERVER_ERROR: Final = -32000
"""Assumed for an error response that carries no usable code."""
NO_RUN: Final = -32001
"""A call arrived while no program was running in the sandbox."""
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603

# -- limits the host enforces on what the sandbox sends --------------------------------------

NAME_MAX: Final = 256
"""Server, tool, prompt and schema-hash names, idempotency keys, the secret."""
URI_MAX: Final = 8192
MODULE_NAME_MAX: Final = 512
ERROR_TYPE_MAX: Final = 512
"""An exception type's name in :class:`ReplyError`."""

# -- a run's limits and reply ---------------------------------------------------------------

DEFAULT_OUTPUT_BYTES: Final = 65536
DEFAULT_RESULT_BYTES: Final = 65536
ERROR_MESSAGE_CAP: Final = 4096
"""The runtime cuts an exception's message to this many characters."""
TRACEBACK_CAP: Final = 16384
"""The runtime keeps this many characters of a traceback's end."""

Status = Literal["ok", "error"]
ResultKind = Literal["json", "repr", "stdout"]
"""``json``: ``result_json`` holds the value's JSON text (or, when ``result_truncated``,
``result_repr`` holds its start); ``repr``: the value was not JSON and ``result_repr`` holds its
``repr()``; ``stdout``: the program produced no value, its printed output is the result."""
OutcomeKind = Literal["ok", "tool_error", "denied", "failed"]

STATUSES: Final[tuple[Status, ...]] = ("ok", "error")
RESULT_KINDS: Final[tuple[ResultKind, ...]] = ("json", "repr", "stdout")
OUTCOME_KINDS: Final[tuple[OutcomeKind, ...]] = ("ok", "tool_error", "denied", "failed")


class HelloParams(TypedDict):
    secret: str
    protocol: int
    pid: NotRequired[int | None]


class HelloResult(TypedDict):
    protocol: int
    max_frame_bytes: int


class ImportParams(TypedDict):
    module: str
    """``servers`` or ``servers.<name>…``; anything else is not found."""


class ImportResult(TypedDict):
    found: bool
    source: NotRequired[str]
    is_package: NotRequired[bool]


class CallParams(TypedDict):
    server: str
    tool: str
    schema_hash: str
    arguments: dict[str, Any]
    idempotency_key: NotRequired[str | None]


class ReadResourceParams(TypedDict):
    server: str
    uri: str


class GetPromptParams(TypedDict):
    server: str
    name: str
    arguments: NotRequired[dict[str, str]]


class OkOutcome(TypedDict):
    kind: Literal["ok"]
    structured: Any
    content: list[dict[str, Any]]
    """MCP content blocks, as the server sent them (after the result filter)."""
    truncated: bool


class ToolErrorOutcome(TypedDict):
    kind: Literal["tool_error"]
    message: str
    content: list[dict[str, Any]]


class DeniedOutcome(TypedDict):
    kind: Literal["denied"]
    gate: str
    reason: str


class FailedOutcome(TypedDict):
    kind: Literal["failed"]
    reason: str
    outcome_unknown: bool


CallOutcome = OkOutcome | ToolErrorOutcome | DeniedOutcome | FailedOutcome
"""The answer to :data:`CALL`, :data:`READ_RESOURCE` and :data:`GET_PROMPT`, told apart by ``kind``."""


class RunParams(TypedDict):
    run_id: str
    code: str
    output_bytes: int
    result_bytes: int
    bindings: dict[str, Any]
    """Globals set before the program runs (JSON values; names must be identifiers)."""
    fresh: bool
    """Start from an empty ``__main__`` (a session otherwise keeps its globals)."""


class Snapshot(TypedDict):
    stdout: str
    stdout_truncated: bool
    stderr: str
    stderr_truncated: bool


class ReplyError(TypedDict):
    type: str
    message: str
    traceback: str


class RunReply(Snapshot):
    status: Status
    result_kind: ResultKind
    result_json: NotRequired[str | None]
    result_repr: NotRequired[str | None]
    result_truncated: NotRequired[bool]
    error: ReplyError | None
    leftover: NotRequired[int]
    """Threads and child processes the program started that still run after it ended: the host
    discards a sandbox that reports any, so that they cannot act during a later run."""


# -- messages -------------------------------------------------------------------------------


def request(request_id: int, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": JSONRPC, "id": request_id, "method": method, "params": dict(params)}


def response(request_id: int | str | None, result: Any) -> dict[str, Any]:
    return {"jsonrpc": JSONRPC, "id": request_id, "result": result}


def error_response(request_id: int | str | None, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": JSONRPC, "id": request_id, "error": {"code": code, "message": message}}


# -- frames ---------------------------------------------------------------------------------


class WireError(ValueError):
    """A frame body that is not acceptable JSON (not UTF-8, not JSON, NaN, too deep)."""


_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
"""Made once: ``json.dumps`` with any non-default option builds a new encoder on every call."""


def encode_body(message: Any) -> bytes:
    """One message's frame body: compact UTF-8 JSON, no NaN or infinities."""
    return _ENCODER.encode(message).encode()


def encode_frame(message: Any) -> bytes:
    """One message as a whole frame (header + body)."""
    body = encode_body(message)
    return HEADER.pack(len(body)) + body


def json_depth(value: Any) -> int:
    """Nesting depth of a parsed JSON value (a scalar is 0, ``[]`` is 1), computed without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children: list[Any]
        if isinstance(item, dict):
            children = list(cast(dict[str, Any], item).values())
        elif isinstance(item, list):
            children = cast(list[Any], item)
        else:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children)
    return deepest


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not valid JSON")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
"""Made once, as ``_ENCODER`` is (it keeps no state between documents)."""


def decode_body(body: bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """Parse one frame body, refusing anything but plain JSON at most ``max_depth`` deep.

    Nesting is bounded twice: the decoder's own recursion guard stops pathological depth, and an
    iterative walk after parsing enforces the protocol's much smaller limit.
    """
    try:
        value = _DECODER.decode(body.decode("utf-8"))
    except RecursionError:
        raise WireError("message nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise WireError(f"message is not valid JSON: {str(exc)[:200]}") from None
    # Each level opens with a bracket of its own, so a body with few brackets needs no walk.
    if body.count(b"[") + body.count(b"{") > max_depth and json_depth(value) > max_depth:
        raise WireError(f"message nested deeper than {max_depth} levels")
    return value
