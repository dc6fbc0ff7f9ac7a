"""codemode's in-sandbox runtime: the only code inside the sandbox that talks to the host.

It implements the API that generated stubs and programs use (``stubs_templates/codemode_runtime.pyi``:
``call_tool``, ``read_resource``, ``get_prompt``, ``result``, ``parallel`` and the exception and
content classes) and the sandbox side of the run channel:

* connect to the Unix socket the host created for this sandbox, and authenticate with the
  one-time secret the host left beside it (the host deletes both once the connection is made);
* install an import hook for ``servers`` / ``servers.*`` that fetches each module's source from
  the host when it is first imported, so only what a program imports ever travels;
* wait for ``run`` requests, execute each program (its trailing expression, or what it passes to
  :func:`result`, is the final result; otherwise its printed output), capture stdout/stderr at the
  file-descriptor level with a cap, and answer with a structured reply.

Standard library only, Python 3.11+: the sandbox image contains nothing else. Everything the host
sends is JSON-RPC 2.0 in length-prefixed frames (4-byte big-endian length, UTF-8 JSON).
"""

from __future__ import annotations

import ast
import base64
import builtins
import difflib
import importlib.abc
import importlib.machinery
import importlib.util
import io
import json
import linecache
import os
import queue
import socket
import struct
import sys
import threading
import traceback
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

__all__ = [
    "Audio",
    "CallDenied",
    "CallError",
    "CallFailed",
    "EmbeddedResource",
    "Image",
    "PromptMessage",
    "ResourceContents",
    "ResourceLink",
    "ToolError",
    "call_tool",
    "get_prompt",
    "parallel",
    "read_resource",
    "result",
]

_R = TypeVar("_R")

_PROTOCOL = 1
_HEADER = struct.Struct(">I")
_MAX_DEPTH = 64
_CHANNEL_DIR = "/run/codemode"
_SOCKET_NAME = "channel.sock"
_SECRET_NAME = "secret"  # noqa: S105 - a file name
_LAST = "__codemode_last_value__"
_MESSAGE_CAP = 4096
_TRACEBACK_CAP = 16384

# Frames from files in the runtime's directory (this module and the boot script) are plumbing:
# tracebacks shown to the model leave them out.
_OWN_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


# --------------------------------------------------------------------------------------------
# Errors and content classes (the public API of the .pyi)
# --------------------------------------------------------------------------------------------


class CallError(Exception):
    """Base class of every error a stub call raises."""


class ToolError(CallError):
    """The tool ran and reported a failure (an MCP result with ``isError: true``)."""

    message: str
    content: list[Any]

    def __init__(self, message: str, content: list[Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.content = list(content or [])


class CallDenied(CallError):
    """The broker refused the call; nothing reached the server."""

    gate: str
    reason: str

    def __init__(self, gate: str, reason: str) -> None:
        super().__init__(f"denied by the {gate} gate: {reason}")
        self.gate = gate
        self.reason = reason


class CallFailed(CallError):
    """The call did not complete (server unavailable, timeout, unknown outcome)."""

    reason: str
    outcome_unknown: bool

    def __init__(self, reason: str, outcome_unknown: bool = False) -> None:
        suffix = " (the outcome is unknown: it may have taken effect)" if outcome_unknown else ""
        super().__init__(reason + suffix)
        self.reason = reason
        self.outcome_unknown = outcome_unknown


class _Plain:
    """Small value classes: keyword construction, a readable repr, equality by fields."""

    __slots__ = ()

    def _fields(self) -> tuple[str, ...]:
        # Fields may be declared by a base class (subclasses add none): walk the MRO.
        return tuple(n for cls in reversed(type(self).__mro__) for n in getattr(cls, "__slots__", ()))

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={_short_repr(getattr(self, name))}" for name in self._fields())
        return f"{type(self).__name__}({fields})"

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in self._fields())

    __hash__ = None  # type: ignore[assignment]


def _short_repr(value: object) -> str:
    if isinstance(value, bytes) and len(value) > 32:
        return f"<{len(value)} bytes>"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class _Media(_Plain):
    """Binary content with its MIME type (shared by images and audio)."""

    __slots__ = ("data", "mime_type")
    data: bytes
    mime_type: str

    def __init__(self, data: bytes, mime_type: str) -> None:
        self.data = data
        self.mime_type = mime_type


class Image(_Media):
    __slots__ = ()


class Audio(_Media):
    __slots__ = ()


class _UriBody(_Plain):
    """A resource's body: text or bytes at a URI (shared by embedded resources and read results)."""

    __slots__ = ("blob", "mime_type", "text", "uri")
    uri: str
    mime_type: str | None
    text: str | None
    blob: bytes | None

    def __init__(
        self, uri: str, mime_type: str | None = None, text: str | None = None, blob: bytes | None = None
    ) -> None:
        self.uri = uri
        self.mime_type = mime_type
        self.text = text
        self.blob = blob


class EmbeddedResource(_UriBody):
    __slots__ = ()


class ResourceLink(_Plain):
    __slots__ = ("description", "mime_type", "name", "uri")
    uri: str
    name: str
    mime_type: str | None
    description: str | None

    def __init__(
        self, uri: str, name: str, mime_type: str | None = None, description: str | None = None
    ) -> None:
        self.uri = uri
        self.name = name
        self.mime_type = mime_type
        self.description = description


class ResourceContents(_UriBody):
    __slots__ = ()


class PromptMessage(_Plain):
    __slots__ = ("content", "role")
    role: str
    content: Any

    def __init__(self, role: str, content: Any) -> None:
        self.role = role
        self.content = content


# Programs know this module as ``codemode``: tracebacks and reprs should say so.
for _cls in (
    CallError,
    ToolError,
    CallDenied,
    CallFailed,
    Image,
    Audio,
    EmbeddedResource,
    ResourceLink,
    ResourceContents,
    PromptMessage,
):
    _cls.__module__ = "codemode"
del _cls


# --------------------------------------------------------------------------------------------
# The channel (sandbox side)
# --------------------------------------------------------------------------------------------


class _RemoteError(Exception):
    """The host answered a request with a JSON-RPC error."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class _Waiter:
    __slots__ = ("error", "event", "value")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None


class _Channel:
    """JSON-RPC over one socket, shared by every thread of the program.

    Writers take one lock per frame; a single reader thread owns the socket's read side and hands
    each response to the thread waiting for its id, and each host request (``run``) to the main
    thread's inbox. So any number of threads can have stub calls in flight at once.
    """

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._write_lock = threading.Lock()
        self._pending_lock = threading.Lock()
        self._pending: dict[int, _Waiter] = {}
        self._next_id = 1
        self._closed = False
        self._owner_pid = os.getpid()
        self.max_frame = 16 * 1024 * 1024
        self.inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.snapshot: Callable[[], dict[str, Any]] = dict

    def start(self) -> None:
        threading.Thread(target=self._read_loop, name="codemode-channel", daemon=True).start()

    def send(self, message: dict[str, Any]) -> None:
        body = json.dumps(message, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()
        if len(body) > self.max_frame:
            raise ValueError(f"message of {len(body)} bytes exceeds the channel's frame limit")
        with self._write_lock:
            self._sock.sendall(_HEADER.pack(len(body)) + body)

    def request(self, method: str, params: dict[str, Any]) -> Any:
        if os.getpid() != self._owner_pid:
            # A forked child shares the socket but has no reader thread: it must not talk.
            raise CallFailed("stub calls are not available in a forked child process")
        if self._closed:
            raise CallFailed("the channel to the host is closed")
        waiter = _Waiter()
        with self._pending_lock:
            request_id = self._next_id
            self._next_id += 1
            self._pending[request_id] = waiter
        try:
            self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        except BaseException:
            with self._pending_lock:
                self._pending.pop(request_id, None)
            raise
        waiter.event.wait()
        if waiter.error is not None:
            raise waiter.error
        return waiter.value

    def _recv_exactly(self, size: int) -> bytes:
        buffer = bytearray(size)
        view = memoryview(buffer)
        got = 0
        while got < size:
            n = self._sock.recv_into(view[got:], size - got)
            if n == 0:
                raise EOFError
            got += n
        return bytes(buffer)

    def _read_loop(self) -> None:
        try:
            while True:
                (length,) = _HEADER.unpack(self._recv_exactly(_HEADER.size))
                if length > self.max_frame:
                    raise EOFError
                message = json.loads(self._recv_exactly(length))
                if not isinstance(message, dict):
                    continue
                if "method" in message:
                    self._host_request(message)
                else:
                    self._response(message)
        except (OSError, EOFError, ValueError):
            pass
        finally:
            self._closed = True
            with self._pending_lock:
                waiters = list(self._pending.values())
                self._pending.clear()
            for waiter in waiters:
                waiter.error = CallFailed("the channel to the host closed", outcome_unknown=True)
                waiter.event.set()
            # The host is gone or has finished with this sandbox: nothing may outlive it.
            os._exit(0)

    def _host_request(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        if method == "snapshot":
            # Answered from this thread so the host can collect partial output from a program that
            # is stuck (for example before killing it at the wall-time limit).
            self.send({"jsonrpc": "2.0", "id": message.get("id"), "result": self.snapshot()})
        else:
            self.inbox.put(message)

    def _response(self, message: dict[str, Any]) -> None:
        request_id = message.get("id")
        with self._pending_lock:
            waiter = self._pending.pop(request_id, None) if isinstance(request_id, int) else None
        if waiter is None:
            return
        error = message.get("error")
        if isinstance(error, dict):
            waiter.error = _RemoteError(int(error.get("code", -32000)), str(error.get("message", "error")))
        else:
            waiter.value = message.get("result")
        waiter.event.set()


_channel: _Channel | None = None


def _request(method: str, params: dict[str, Any]) -> Any:
    if _channel is None:
        raise CallFailed("codemode's runtime is not connected to a host")
    return _channel.request(method, params)


# --------------------------------------------------------------------------------------------
# Stub calls
# --------------------------------------------------------------------------------------------


def _decode_bytes(value: Any) -> bytes:
    if not isinstance(value, str):
        return b""
    try:
        return base64.b64decode(value, validate=False)
    except ValueError:
        return b""


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


_B = TypeVar("_B", bound=_UriBody)


def _uri_body(cls: type[_B], item: dict[str, Any]) -> _B:
    """A resource body from its wire dict (``uri``, ``mimeType``, ``text``, base64 ``blob``)."""
    blob = item.get("blob")
    return cls(
        str(item.get("uri", "")),
        _opt_str(item.get("mimeType")),
        _opt_str(item.get("text")),
        _decode_bytes(blob) if blob is not None else None,
    )


def _convert_block(block: Any) -> Any:
    """One MCP content block (wire dict) to the value a program sees."""
    if not isinstance(block, dict):
        return block
    kind = block.get("type")
    if kind == "text":
        text = block.get("text", "")
        if not isinstance(text, str):
            return text
        try:
            return json.loads(text)
        except ValueError:
            return text
    if kind == "image":
        return Image(_decode_bytes(block.get("data")), str(block.get("mimeType", "")))
    if kind == "audio":
        return Audio(_decode_bytes(block.get("data")), str(block.get("mimeType", "")))
    if kind == "resource":
        inner = block.get("resource")
        return _uri_body(EmbeddedResource, inner if isinstance(inner, dict) else {})
    if kind == "resource_link":
        return ResourceLink(
            str(block.get("uri", "")),
            str(block.get("name", "")),
            _opt_str(block.get("mimeType")),
            _opt_str(block.get("description")),
        )
    return block


def _content_list(content: Any) -> list[Any]:
    return [_convert_block(item) for item in content] if isinstance(content, list) else []


def _unwrap(outcome: Any) -> dict[str, Any]:
    """Raise the typed exception for a refused or failed outcome; return an ``ok`` outcome."""
    if not isinstance(outcome, dict):
        raise CallFailed("the host sent a malformed outcome")
    kind = outcome.get("kind")
    if kind == "ok":
        return outcome
    if kind == "tool_error":
        raise ToolError(str(outcome.get("message", "")), _content_list(outcome.get("content")))
    if kind == "denied":
        raise CallDenied(str(outcome.get("gate", "")), str(outcome.get("reason", "")))
    if kind == "failed":
        raise CallFailed(str(outcome.get("reason", "")), bool(outcome.get("outcome_unknown", False)))
    raise CallFailed(f"the host sent an outcome of unknown kind {kind!r}")


def _remote(method: str, params: dict[str, Any]) -> dict[str, Any]:
    try:
        return _unwrap(_request(method, params))
    except _RemoteError as exc:
        raise CallFailed(f"the host refused the request: {exc}") from None


def _json_object(value: Mapping[str, Any], what: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(f"{what} must be a mapping, not {type(value).__name__}")
    data = dict(value)
    try:
        json.dumps(data, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what} must be JSON-serialisable: {exc}") from None
    return data


def _require_str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    return value


def call_tool(
    server: str,
    tool: str,
    schema_hash: str,
    arguments: Mapping[str, Any],
    *,
    idempotency_key: str | None = None,
) -> Any:
    """Call a tool through the broker. Returns ``structuredContent`` when the server sent it;
    otherwise the content: text parsed as JSON when it parses (else the string), images, audio
    and resources as the small classes above; one item is returned bare, several as a list,
    none as ``None``. Raises ``ToolError``, ``CallDenied`` or ``CallFailed``."""
    params: dict[str, Any] = {
        "server": _require_str(server, "server"),
        "tool": _require_str(tool, "tool"),
        "schema_hash": _require_str(schema_hash, "schema_hash"),
        "arguments": _json_object(arguments, "arguments"),
    }
    if idempotency_key is not None:
        params["idempotency_key"] = _require_str(idempotency_key, "idempotency_key")
    outcome = _remote("call", params)
    if outcome.get("structured") is not None:
        return outcome["structured"]
    items = _content_list(outcome.get("content"))
    if not items:
        return None
    return items[0] if len(items) == 1 else items


def _resource_contents(item: Any) -> ResourceContents | None:
    if not isinstance(item, dict):
        return None
    if item.get("type") == "resource" and isinstance(item.get("resource"), dict):
        item = item["resource"]
    if not isinstance(item.get("uri"), str):
        return None
    return _uri_body(ResourceContents, item)


def read_resource(server: str, uri: str) -> list[ResourceContents]:
    """Read a resource through the broker: one :class:`ResourceContents` per item."""
    outcome = _remote(
        "read_resource", {"server": _require_str(server, "server"), "uri": _require_str(uri, "uri")}
    )
    structured = outcome.get("structured")
    if isinstance(structured, dict):
        structured = structured.get("contents")
    items = structured if isinstance(structured, list) else outcome.get("content") or []
    converted = (_resource_contents(item) for item in items)
    return [item for item in converted if item is not None]


def get_prompt(server: str, name: str, arguments: Mapping[str, str] | None = None) -> list[PromptMessage]:
    """Get a prompt through the broker: its messages, content converted like tool results."""
    args = dict(arguments or {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in args.items()):
        raise TypeError("prompt arguments must map str to str")
    outcome = _remote(
        "get_prompt",
        {"server": _require_str(server, "server"), "name": _require_str(name, "name"), "arguments": args},
    )
    structured = outcome.get("structured")
    if isinstance(structured, dict):
        structured = structured.get("messages")
    messages: list[PromptMessage] = []
    for item in structured if isinstance(structured, list) else []:
        if isinstance(item, dict):
            messages.append(PromptMessage(str(item.get("role", "")), _convert_block(item.get("content"))))
    return messages


class _RunState:
    """What the program set for the current run (reset before each run)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.has_result = False
        self.value: Any = None

    def reset(self) -> None:
        with self.lock:
            self.has_result = False
            self.value = None


_state = _RunState()


def result(value: Any) -> None:
    """Set the program's final result explicitly (otherwise: the last expression, else stdout)."""
    with _state.lock:
        _state.has_result = True
        _state.value = value


def _invoke(fn: Callable[..., _R], kwargs: Mapping[str, Any]) -> _R:
    return fn(**kwargs)


def parallel(fn: Callable[..., _R], calls: Iterable[Mapping[str, Any]], *, max_workers: int = 16) -> list[_R]:
    """Run ``fn(**kwargs)`` for each mapping in ``calls`` concurrently; results keep input order.
    If any call raises, the first exception (in input order) is re-raised after all finish."""
    if not isinstance(max_workers, int) or max_workers < 1:
        raise ValueError("max_workers must be a positive int")
    items = [dict(call) for call in calls]
    results: list[Any] = [None] * len(items)
    errors: list[BaseException | None] = [None] * len(items)
    next_index = iter(range(len(items)))
    index_lock = threading.Lock()

    def worker() -> None:
        while True:
            with index_lock:
                i = next(next_index, None)
            if i is None:
                return
            try:
                results[i] = _invoke(fn, items[i])
            except BaseException as exc:
                errors[i] = exc

    # Plain threads rather than an executor keep the pool's frames out of user tracebacks.
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(max_workers, len(items)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for error in errors:
        if error is not None:
            raise error
    return results


# --------------------------------------------------------------------------------------------
# Import hook: ``servers`` and ``servers.*`` come from the host, on demand
# --------------------------------------------------------------------------------------------


class _HostLoader(importlib.abc.Loader):
    def __init__(self, fullname: str, source: str, filename: str) -> None:
        self._fullname = fullname
        self._source = source
        self._filename = filename

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        lines = self._source.splitlines(keepends=True)
        linecache.cache[self._filename] = (len(self._source), None, lines, self._filename)
        module.__file__ = self._filename
        code = compile(self._source, self._filename, "exec", dont_inherit=True)
        exec(code, module.__dict__)  # noqa: S102 - a stub module served by the host

    def get_source(self, fullname: str) -> str:
        return self._source


def _no_such_tool(fullname: str) -> None:
    """``from servers.crm import nope``: say which tools the server has, and the closest names.

    A ModuleNotFoundError, as for any missing module, but named after the *package*: the import
    system then does not swallow it into its own "cannot import name" message (it hides only
    errors that name the submodule it tried).
    """
    parent, _, name = fullname.rpartition(".")
    package = sys.modules.get(parent)
    tools = getattr(package, "__all__", None) if parent.count(".") == 1 else None
    if not isinstance(tools, list) or name.startswith("_"):
        return
    known = [str(tool) for tool in tools]  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
    close = difflib.get_close_matches(name, known, n=3)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    listing = ", ".join(known[:50]) + (f" … ({len(known)} in all)" if len(known) > 50 else "")
    raise ModuleNotFoundError(
        f"{parent} has no tool {name!r}.{hint} Its tools: {listing or '(none you may use)'}.",
        name=parent,
    )


class _ServersFinder(importlib.abc.MetaPathFinder):
    """Asks the host for ``servers`` modules; the host answers only what the principal may see."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "servers" and not fullname.startswith("servers."):
            return None
        try:
            reply = _request("import", {"module": fullname})
        except (_RemoteError, CallFailed) as exc:
            raise ImportError(f"cannot import {fullname}: {exc}", name=fullname) from None
        if not isinstance(reply, dict) or not reply.get("found"):
            _no_such_tool(fullname)
            return None
        source = reply.get("source")
        if not isinstance(source, str):
            return None
        is_package = bool(reply.get("is_package"))
        parts = fullname.split(".")
        filename = "/".join(parts) + ("/__init__.py" if is_package else ".py")
        loader = _HostLoader(fullname, source, filename)
        spec = importlib.util.spec_from_loader(fullname, loader, origin=filename, is_package=is_package)
        if spec is not None:
            spec.has_location = True
        return spec


# --------------------------------------------------------------------------------------------
# Running a program
# --------------------------------------------------------------------------------------------


class _FdCapture:
    """Captures one file descriptor (1 or 2) through a pipe, keeping at most ``cap`` bytes.

    Working at the descriptor level catches ``print``, ``os.write(1, ...)`` and child processes
    alike. The reader thread drains the pipe continuously and drops what exceeds the cap, so memory
    stays flat however much a program writes.
    """

    def __init__(self, fd: int, cap: int) -> None:
        self._fd = fd
        self._cap = cap
        self._lock = threading.Lock()
        self._chunks: list[bytes] = []
        self._size = 0
        self._truncated = False
        self._recording = True
        read_end, write_end = os.pipe()
        self._saved = os.dup(fd)
        os.dup2(write_end, fd)
        os.close(write_end)
        self._read_end = read_end
        self._thread = threading.Thread(target=self._pump, name=f"codemode-capture-{fd}", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        try:
            while True:
                data = os.read(self._read_end, 65536)
                if not data:
                    return
                with self._lock:
                    if not self._recording:
                        continue
                    room = self._cap - self._size
                    if room > 0:
                        kept = data[:room]
                        self._chunks.append(kept)
                        self._size += len(kept)
                    if len(data) > room:
                        self._truncated = True
        except OSError:
            return
        finally:
            os.close(self._read_end)

    def snapshot(self) -> tuple[str, bool]:
        with self._lock:
            data = b"".join(self._chunks)
            truncated = self._truncated
        return data.decode("utf-8", errors="replace"), truncated

    def finish(self) -> tuple[str, bool]:
        os.dup2(self._saved, self._fd)
        os.close(self._saved)
        # EOF arrives once no process holds the write end; a background child may keep it open,
        # in which case what arrived so far is the output and the rest is dropped.
        self._thread.join(timeout=0.25)
        text, truncated = self.snapshot()
        with self._lock:
            self._recording = False
        return text, truncated


class _Session:
    """Interpreter state shared by the runs of one sandbox (one run, or one explicit session)."""

    def __init__(self) -> None:
        self.module = self.fresh_module()
        self.count = 0
        # Line-buffered like a terminal, so print() and os.write(1, ...) keep their order.
        for stream in (sys.stdout, sys.stderr):
            if isinstance(stream, io.TextIOWrapper):
                stream.reconfigure(line_buffering=True)
        self.out: _FdCapture | None = None
        self.err: _FdCapture | None = None


    def fresh_module(self) -> types.ModuleType:
        """A new, empty ``__main__`` (a batch worker starts each item with one)."""
        module = types.ModuleType("__main__")
        module.__dict__["__builtins__"] = builtins
        sys.modules["__main__"] = module
        self.module = module
        return module


def _cap_text(text: str, cap: int, keep_tail: bool = False) -> str:
    if len(text) <= cap:
        return text
    return "..." + text[-cap:] if keep_tail else text[:cap] + "..."


def _is_user_frame(filename: str) -> bool:
    return filename.startswith(("<program", "servers/"))


def _filter_stack(te: traceback.TracebackException, seen: set[int]) -> None:
    if id(te) in seen:
        return
    seen.add(id(te))
    kept = [
        frame
        for frame in te.stack
        if not os.path.abspath(frame.filename).startswith(_OWN_DIR)
        and not frame.filename.startswith("<frozen ")
    ]
    # Frames before the first frame of the program (asyncio's runner, threading's bootstrap) are
    # how the program was started, not what it did.
    first_user = next((i for i, frame in enumerate(kept) if _is_user_frame(frame.filename)), None)
    if first_user is None and te.exc_type is not None and issubclass(te.exc_type, SyntaxError):
        # The program did not compile: the compiler's frames mean nothing to its author.
        first_user = len(kept)
    te.stack = traceback.StackSummary.from_list(kept[first_user or 0 :])
    for linked in (te.__cause__, te.__context__):
        if linked is not None:
            _filter_stack(linked, seen)
    for inner in getattr(te, "exceptions", None) or []:
        _filter_stack(inner, seen)


def _type_name(exc: BaseException) -> str:
    cls = type(exc)
    module = cls.__module__
    if module in ("builtins", "__main__"):
        return cls.__qualname__
    return f"{module}.{cls.__qualname__}"


def _describe(exc: BaseException) -> dict[str, Any]:
    try:
        message = str(exc)
    except Exception:
        message = "<the exception's message could not be produced>"
    te = traceback.TracebackException.from_exception(exc, capture_locals=False)
    _filter_stack(te, set())
    return {
        "type": _type_name(exc),
        "message": _cap_text(message, _MESSAGE_CAP),
        "traceback": _cap_text("".join(te.format()), _TRACEBACK_CAP, keep_tail=True),
    }


def _json_depth(value: Any) -> int:
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return deepest


def _encode_value(value: Any, cap: int) -> dict[str, Any]:
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
        if _json_depth(value) > _MAX_DEPTH:
            raise ValueError("too deep")
    except (TypeError, ValueError, RecursionError):
        text = None
    if text is not None:
        data = text.encode()
        if len(data) <= cap:
            return {"result_kind": "json", "result_json": text}
        return {
            "result_kind": "json",
            "result_repr": data[:cap].decode("utf-8", errors="ignore"),
            "result_truncated": True,
        }
    try:
        shown = repr(value)
    except Exception as exc:
        shown = f"<{type(value).__name__} object; repr() failed: {type(exc).__name__}>"
    data = shown.encode()
    truncated = len(data) > cap
    return {
        "result_kind": "repr",
        "result_repr": data[:cap].decode("utf-8", errors="ignore"),
        "result_truncated": truncated,
    }


def _execute(code: str, filename: str, namespace: dict[str, Any]) -> Any:
    """Run ``code`` like a notebook cell; return the trailing expression's value (or None)."""
    tree = ast.parse(code, filename, "exec")
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = tree.body[-1]
        assign = ast.Assign(targets=[ast.Name(id=_LAST, ctx=ast.Store())], value=last.value)
        tree.body[-1] = ast.fix_missing_locations(ast.copy_location(assign, last))
    linecache.cache[filename] = (len(code), None, code.splitlines(keepends=True), filename)
    compiled = compile(tree, filename, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
    namespace.pop(_LAST, None)
    if compiled.co_flags & 0x80:  # CO_COROUTINE: the program uses top-level await
        import asyncio

        asyncio.run(eval(compiled, namespace))  # noqa: S307 - running the program is the point
    else:
        exec(compiled, namespace)  # noqa: S102 - running the program is the point
    return namespace.pop(_LAST, None)


def _flush_std() -> None:
    """Flush Python's stdout and stderr; one the program closed or broke is its own business."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass


def _run(session: _Session, params: dict[str, Any], runtime_pid: int) -> dict[str, Any]:
    code = params.get("code")
    if not isinstance(code, str):
        raise ValueError("run: 'code' must be a string")
    output_cap = int(params.get("output_bytes", 65536))
    result_cap = int(params.get("result_bytes", 65536))
    bindings = params.get("bindings") or {}
    if not isinstance(bindings, dict) or not all(isinstance(k, str) and k.isidentifier() for k in bindings):
        raise ValueError("run: 'bindings' must map identifiers to JSON values")
    if params.get("fresh"):
        session.fresh_module()
    session.module.__dict__.update(bindings)
    session.count += 1
    filename = "<program>" if session.count == 1 else f"<program #{session.count}>"
    _state.reset()
    sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    _flush_std()
    session.out = _FdCapture(1, output_cap)
    session.err = _FdCapture(2, output_cap)
    error: dict[str, Any] | None = None
    value: Any = None
    try:
        value = _execute(code, filename, session.module.__dict__)
    except SystemExit as exc:
        if exc.code not in (None, 0):
            error = _describe(exc)
            error["message"] = f"the program exited with status {exc.code!r}"
    except BaseException as exc:
        error = _describe(exc)
    finally:
        if os.getpid() != runtime_pid:
            # A child forked by the program reached the end of the program: it must not answer.
            _flush_std()
            os._exit(0 if error is None else 1)
    _flush_std()
    stdout, stdout_truncated = session.out.finish()
    stderr, stderr_truncated = session.err.finish()
    session.out = session.err = None
    reply: dict[str, Any] = {
        "status": "ok" if error is None else "error",
        "result_kind": "stdout",
        "stdout": stdout,
        "stdout_truncated": stdout_truncated,
        "stderr": stderr,
        "stderr_truncated": stderr_truncated,
        "error": error,
    }
    if error is None:
        with _state.lock:
            has_result, explicit = _state.has_result, _state.value
        if has_result:
            reply.update(_encode_value(explicit, result_cap))
        elif value is not None:
            reply.update(_encode_value(value, result_cap))
    return reply


def _snapshot(session: _Session) -> dict[str, Any]:
    out, err = session.out, session.err
    stdout, stdout_truncated = out.snapshot() if out else ("", False)
    stderr, stderr_truncated = err.snapshot() if err else ("", False)
    return {
        "stdout": stdout,
        "stdout_truncated": stdout_truncated,
        "stderr": stderr,
        "stderr_truncated": stderr_truncated,
    }


def _main() -> None:
    global _channel
    directory = os.environ.get("CODEMODE_CHANNEL_DIR", _CHANNEL_DIR)
    with open(os.path.join(directory, _SECRET_NAME), encoding="ascii") as handle:
        secret = handle.read().strip()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(os.path.join(directory, _SOCKET_NAME))
    channel = _Channel(sock)
    channel.start()
    _channel = channel
    hello = channel.request("hello", {"secret": secret, "protocol": _PROTOCOL, "pid": os.getpid()})
    del secret
    if isinstance(hello, dict) and isinstance(hello.get("max_frame_bytes"), int):
        channel.max_frame = hello["max_frame_bytes"]
    # Nothing of the launch configuration is left for the program to find.
    for name in [key for key in os.environ if key.startswith("CODEMODE_")]:
        del os.environ[name]
    sys.modules["codemode"] = sys.modules[__name__]
    sys.meta_path.insert(0, _ServersFinder())
    session = _Session()
    channel.snapshot = lambda: _snapshot(session)
    runtime_pid = os.getpid()
    while True:
        message = channel.inbox.get()
        if message is None:
            return
        request_id = message.get("id")
        if message.get("method") != "run":
            channel.send(
                {"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "unknown method"}}
            )
            continue
        params = message.get("params")
        try:
            reply = _run(session, params if isinstance(params, dict) else {}, runtime_pid)
        except Exception as exc:
            channel.send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32603, "message": str(exc)}})
            continue
        try:
            channel.send({"jsonrpc": "2.0", "id": request_id, "result": reply})
        except ValueError:
            # The capped parts still did not fit one frame (escaping can multiply their size):
            # send the reply without them rather than no reply at all.
            reply.update(stdout="", stdout_truncated=True, stderr="", stderr_truncated=True)
            if reply.get("result_json") is not None or reply.get("result_repr") is not None:
                reply.update(result_json=None, result_repr="", result_truncated=True)
            channel.send({"jsonrpc": "2.0", "id": request_id, "result": reply})
