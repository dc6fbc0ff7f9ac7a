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
import itertools
import json
import operator
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
MAX_VALUES: Final = 1 << 20
"""The most JSON values the host decodes from one frame of the sandbox's, counted as containers
opened plus commas between items (an empty container counts twice) before the JSON is parsed (see
:func:`scan_body`): what a frame decodes to is bounded by this, not by its size alone
(``[[],[],…]`` turns 16 MiB into 5.5 million lists)."""
DEFAULT_MAX_REQUEST_BYTES: Final = 4 * 1024 * 1024
"""The largest request (a call, a resource read, a prompt, an import) the host takes from a
sandbox under the default frame limit; under another, a quarter of it, never less than this (nor
more than the frame limit). Answers to the host (a run's reply with its output) may use the whole
frame limit. A bigger request is refused with ``INVALID_REQUEST``; the connection goes on."""

CHANNEL_DIR: Final = "/run/codemode"
"""Where the channel directory appears inside a container or bwrap sandbox."""
CHANNEL_DIR_ENV: Final = "CODEMODE_CHANNEL_DIR"
"""Names the channel directory where it is not :data:`CHANNEL_DIR` (the process backend)."""
WORKSPACE_DIR: Final = "/workspace"
"""Where a run's workspace appears inside a container or bwrap sandbox."""
WORKSPACE_DIR_ENV: Final = "CODEMODE_WORKSPACE_DIR"
"""The workspace directory, set by a backend that gives one; programs see it as :data:`WORKSPACE_ENV`."""
WORKSPACE_ENV: Final = "CODEMODE_WORKSPACE"
SCRATCH_DIRS_ENV: Final = "CODEMODE_SCRATCH_DIRS"
"""The directories that are the sandbox's own (``os.pathsep``-separated: its private ``/tmp``,
``/dev/shm``, its working directory), which the runtime empties before a fresh run. Set by the
backend only for directories no one else uses; without it nothing is emptied."""
SOCKET_NAME: Final = "channel.sock"
SECRET_NAME: Final = "secret"  # noqa: S105 - a file name

# -- methods --------------------------------------------------------------------------------

HELLO: Final = "hello"
IMPORT: Final = "import"
CALL: Final = "call"
READ_RESOURCE: Final = "read_resource"
GET_PROMPT: Final = "get_prompt"
PROPOSE_SKILL: Final = "propose_skill"
RUN: Final = "run"
SNAPSHOT: Final = "snapshot"

SANDBOX_METHODS: Final = frozenset({HELLO, IMPORT, CALL, READ_RESOURCE, GET_PROMPT, PROPOSE_SKILL})
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
SKILL_SOURCE_MAX: Final = 256 * 1024
"""A proposed skill's source (and description) in characters."""
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
OutcomeKind = Literal["ok", "tool_error", "denied", "failed", "planned"]

STATUSES: Final[tuple[Status, ...]] = ("ok", "error")
RESULT_KINDS: Final[tuple[ResultKind, ...]] = ("json", "repr", "stdout")
OUTCOME_KINDS: Final[tuple[OutcomeKind, ...]] = ("ok", "tool_error", "denied", "failed", "planned")


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
    skill: NotRequired[str]
    """``name@version`` of the saved skill whose code made the call (audit only)."""


class ReadResourceParams(TypedDict):
    server: str
    uri: str


class GetPromptParams(TypedDict):
    server: str
    name: str
    arguments: NotRequired[dict[str, str]]


class ProposeSkillParams(TypedDict):
    """A program proposes a saved skill; a person approves it later (``codemode skill``)."""

    name: str
    source: str
    description: str


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


class PlannedOutcome(TypedDict):
    """A dry run recorded the call in its plan instead of sending it (tool calls only)."""

    kind: Literal["planned"]
    index: int
    """The planned call's number in the plan: what its placeholder refers to."""


CallOutcome = OkOutcome | ToolErrorOutcome | DeniedOutcome | FailedOutcome | PlannedOutcome
"""The answer to :data:`CALL`, :data:`READ_RESOURCE` and :data:`GET_PROMPT`, told apart by ``kind``."""


class WorkspaceParams(TypedDict):
    files: dict[str, str]
    """Relative POSIX path -> the file's bytes in base64."""
    quota_bytes: int
    quota_files: int


class WorkspaceReply(TypedDict):
    files: dict[str, str]
    """What the workspace holds when the program ends (relative path -> base64)."""
    refused: dict[str, str]
    """Entries that are not kept (links, FIFOs, devices …), each with what it is."""
    error: str | None
    """Why nothing of this run's workspace may be kept (the quota was hit); then ``files`` is empty."""


class RunParams(TypedDict):
    run_id: str
    code: str
    output_bytes: int
    result_bytes: int
    bindings: dict[str, Any]
    """Globals set before the program runs (JSON values; names must be identifiers)."""
    fresh: bool
    """Start from an empty ``__main__`` (a session otherwise keeps its globals)."""
    workspace: NotRequired[WorkspaceParams]
    """The run's workspace files, written before the program starts (absent: no workspace)."""


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
    workspace: NotRequired[WorkspaceReply]
    """The workspace at the program's end, when the run had one."""


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

_STRUCTURE: Final = bytes(set(range(256)) - set(b'"[]{},'))
"""Deleted from a body before its strings are found: what is left is quotes, brackets and commas."""
_BRACKETS: Final = bytes.maketrans(b"{}", b"[]")
_STEPS: Final = bytes.maketrans(b"[]", b"\x02\x00")
"""``[`` -> 2, ``]`` -> 0: the running sum of a bracket string's steps, less the count of steps, is
its nesting depth at each point."""
_COUNTED_FROM: Final = 4096
"""A body this small counts as holding as many values as it has bytes (counting costs more)."""


def _too_deep(brackets: bytes | bytearray, limit: int) -> bool:
    """Whether a string of ``[`` and ``]`` nests deeper than ``limit`` (raises when unbalanced).

    A ``replace`` pass removes every innermost pair, one level in all: shallow, wide JSON (the
    usual big message) is gone after a pass or two. Once a pass no longer halves what is left, the
    rest is walked once, in C iterators.
    """
    while brackets and limit > 0:
        peeled = brackets.replace(b"[]", b"")
        limit -= 1
        halved = len(peeled) <= len(brackets) // 2
        brackets = peeled
        if not halved:
            break
    if not brackets:
        return False
    depths = list(map(operator.sub, itertools.accumulate(brackets.translate(_STEPS)), itertools.count(1)))
    if depths[-1] != 0 or min(depths) < 0:
        raise WireError("message is not valid JSON: unbalanced brackets")
    return max(depths) > limit


def scan_body(body: bytes | bytearray, *, max_depth: int = MAX_DEPTH, max_values: int | None = None) -> int:
    """Refuse a body nested deeper than ``max_depth`` or holding more than ``max_values`` values,
    before it is parsed; return an upper bound of its values.

    Values are counted as the containers opened plus the commas between items, outside strings.
    Counting every bracket and comma, in strings too, bounds both cheaply: only a body over a limit
    by that count (a big one, or one with brackets in its text) has its strings taken out and is
    counted exactly. Strings are found as JSON does: escaped backslashes and quotes go first, then
    every quote opens or closes one. A body that is not JSON may be counted wrongly past the point
    where it stops being JSON, which is where the parser stops too.
    """
    opens = body.count(b"[") + body.count(b"{")
    if opens <= max_depth:
        size = len(body)
        if max_values is None or (size <= _COUNTED_FROM and size <= max_values):
            return size  # no value takes less than a byte
        values = opens + body.count(b",")
        if values <= max_values:
            return values
    if b"\\" in body:
        body = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    structure = body.translate(None, _STRUCTURE).replace(b'""', b"")
    if max_values is not None and structure.count(b'"') > 4 * (max_values + 1):
        # Every string is a value or a key, so a body with this many is over the limit (or not JSON).
        raise WireError(f"message holds more than {max_values} JSON values")
    if b'"' in structure:
        structure = b"".join(structure.split(b'"')[::2])  # the even pieces are outside strings
    opens = structure.count(b"[") + structure.count(b"{")
    values = opens + structure.count(b",")
    if max_values is not None and values > max_values:
        raise WireError(f"message holds more than {max_values} JSON values")
    if opens > max_depth and _too_deep(structure.translate(_BRACKETS, b","), max_depth):
        raise WireError(f"message nested too deeply (deeper than {max_depth} levels)")
    return values


def parse_body(body: bytes | bytearray) -> Any:
    """Parse one frame body that :func:`scan_body` accepted, refusing anything but plain JSON."""
    try:
        return _DECODER.decode(body.decode("utf-8"))
    except RecursionError:
        raise WireError("message nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise WireError(f"message is not valid JSON: {str(exc)[:200]}") from None


def decode_body(body: bytes | bytearray, *, max_depth: int = MAX_DEPTH) -> Any:
    """Parse one frame body, refusing anything but plain JSON at most ``max_depth`` deep (checked
    before the body is parsed). The host also caps the values: :func:`scan_body`'s ``max_values``."""
    scan_body(body, max_depth=max_depth)
    return parse_body(body)
