"""Stub calls: ``call_tool``, ``read_resource``, ``get_prompt``, plus ``result`` and ``parallel``.

Each call is one channel request; the host answers with an outcome (``_wire.CallOutcome``) that
becomes a return value or a typed exception here.
"""

from __future__ import annotations

import base64
import contextvars
import json
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar, cast

from . import _client
from . import _wire as wire
from ._planned import PlannedResult, with_references
from ._skills import calling_skill, worker_context
from ._values import (
    Audio,
    CallDenied,
    CallFailed,
    EmbeddedResource,
    Image,
    PromptMessage,
    ResourceContents,
    ResourceLink,
    ToolError,
    UriBody,
)

_R = TypeVar("_R")
_B = TypeVar("_B", bound=UriBody)


def _decode_bytes(value: Any) -> bytes:
    if not isinstance(value, str):
        return b""
    try:
        return base64.b64decode(value, validate=False)
    except ValueError:
        return b""


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _uri_body(cls: type[_B], item: dict[str, Any]) -> _B:
    """A resource body from its wire dict (``uri``, ``mimeType``, ``text``, base64 ``blob``)."""
    blob = item.get("blob")
    return cls(
        str(item.get("uri", "")),
        _opt_str(item.get("mimeType")),
        _opt_str(item.get("text")),
        _decode_bytes(blob) if blob is not None else None,
    )


def _as_dict(value: Any) -> dict[str, Any] | None:
    return cast(dict[str, Any], value) if isinstance(value, dict) else None


def convert_block(block: Any) -> Any:
    """One MCP content block (wire dict) to the value a program sees."""
    item = _as_dict(block)
    if item is None:
        return block
    kind = item.get("type")
    if kind == "text":
        text = item.get("text", "")
        if not isinstance(text, str):
            return text
        try:
            return json.loads(text)
        except ValueError:
            return text
    if kind == "image":
        return Image(_decode_bytes(item.get("data")), str(item.get("mimeType", "")))
    if kind == "audio":
        return Audio(_decode_bytes(item.get("data")), str(item.get("mimeType", "")))
    if kind == "resource":
        return _uri_body(EmbeddedResource, _as_dict(item.get("resource")) or {})
    if kind == "resource_link":
        return ResourceLink(
            str(item.get("uri", "")),
            str(item.get("name", "")),
            _opt_str(item.get("mimeType")),
            _opt_str(item.get("description")),
        )
    return item


def _content_list(content: Any) -> list[Any]:
    return [convert_block(item) for item in cast(list[Any], content)] if isinstance(content, list) else []


def _unwrap(outcome: Any) -> dict[str, Any]:
    """Raise the typed exception for a refused or failed outcome; return an ``ok`` outcome."""
    fields = _as_dict(outcome)
    if fields is None:
        raise CallFailed("the host sent a malformed outcome")
    kind = fields.get("kind")
    if kind in ("ok", "planned"):
        return fields
    if kind == "tool_error":
        raise ToolError(str(fields.get("message", "")), _content_list(fields.get("content")))
    if kind == "denied":
        raise CallDenied(str(fields.get("gate", "")), str(fields.get("reason", "")))
    if kind == "failed":
        raise CallFailed(str(fields.get("reason", "")), bool(fields.get("outcome_unknown", False)))
    raise CallFailed(f"the host sent an outcome of unknown kind {kind!r}")


def remote(method: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """One call request; the ``ok`` outcome's fields, or the outcome's exception."""
    try:
        return _unwrap(_client.request(method, params))
    except _client.RemoteError as exc:
        raise CallFailed(f"the host refused the request: {exc}") from None


def _json_object(value: Mapping[str, Any], what: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):  # pyright: ignore[reportUnnecessaryIsInstance] - programs pass anything
        raise TypeError(f"{what} must be a mapping, not {type(value).__name__}")
    try:
        # Planned results (a dry run's) travel as references; the encoding checks the rest.
        data = with_references(dict(value))
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
    params: wire.CallParams = {
        "server": _require_str(server, "server"),
        "tool": _require_str(tool, "tool"),
        "schema_hash": _require_str(schema_hash, "schema_hash"),
        "arguments": _json_object(arguments, "arguments"),
    }
    if idempotency_key is not None:
        params["idempotency_key"] = _require_str(idempotency_key, "idempotency_key")
    skill = calling_skill()
    if skill is not None:
        params["skill"] = skill
    outcome = remote(wire.CALL, params)
    if outcome.get("kind") == "planned":
        return PlannedResult(int(outcome.get("index", -1)), f"{server}/{tool}")
    if outcome.get("structured") is not None:
        return outcome["structured"]
    items = _content_list(outcome.get("content"))
    if not items:
        return None
    return items[0] if len(items) == 1 else items


def _resource_contents(raw: Any) -> ResourceContents | None:
    item = _as_dict(raw)
    if item is None:
        return None
    inner = _as_dict(item.get("resource"))
    if item.get("type") == "resource" and inner is not None:
        item = inner
    if not isinstance(item.get("uri"), str):
        return None
    return _uri_body(ResourceContents, item)


def read_resource(server: str, uri: str) -> list[ResourceContents]:
    """Read a resource through the broker: one :class:`ResourceContents` per item."""
    params: wire.ReadResourceParams = {
        "server": _require_str(server, "server"),
        "uri": _require_str(uri, "uri"),
    }
    outcome = remote(wire.READ_RESOURCE, params)
    structured = outcome.get("structured")
    if isinstance(structured, dict):
        structured = cast(dict[str, Any], structured).get("contents")
    items: list[Any] = []
    if isinstance(structured, list):
        items = cast(list[Any], structured)
    elif isinstance(content := outcome.get("content"), list):
        items = cast(list[Any], content)
    converted = (_resource_contents(item) for item in items)
    return [item for item in converted if item is not None]


def get_prompt(server: str, name: str, arguments: Mapping[str, str] | None = None) -> list[PromptMessage]:
    """Get a prompt through the broker: its messages, content converted like tool results."""
    args = dict(arguments or {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in args.items()):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise TypeError("prompt arguments must map str to str")
    params: wire.GetPromptParams = {
        "server": _require_str(server, "server"),
        "name": _require_str(name, "name"),
        "arguments": args,
    }
    outcome = remote(wire.GET_PROMPT, params)
    structured = outcome.get("structured")
    if isinstance(structured, dict):
        structured = cast(dict[str, Any], structured).get("messages")
    messages: list[PromptMessage] = []
    for raw in cast(list[Any], structured) if isinstance(structured, list) else []:
        item = _as_dict(raw)
        if item is not None:
            messages.append(PromptMessage(str(item.get("role", "")), convert_block(item.get("content"))))
    return messages


class RunState:
    """What the program set for the current run (reset before each run)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.has_result = False
        self.value: Any = None

    def reset(self) -> None:
        with self.lock:
            self.has_result = False
            self.value = None


_process_state = RunState()
"""The sandbox's run state (one program runs at a time)."""
_bound_state: contextvars.ContextVar[RunState | None] = contextvars.ContextVar(
    "codemode_run_state", default=None
)
"""An in-process test runtime's own, bound in its serve thread's context."""


def run_state() -> RunState:
    """The state of the run executing in this context."""
    bound = _bound_state.get()
    return bound if bound is not None else _process_state


def bind_run_state(state: RunState) -> None:
    """Give the current context (an in-process test runtime's serve thread) its own run state."""
    _bound_state.set(state)


def result(value: Any) -> None:
    """Set the program's final result explicitly (otherwise: the last expression, else stdout)."""
    state = run_state()
    with state.lock:
        state.has_result = True
        state.value = value


def _invoke(fn: Callable[..., _R], kwargs: Mapping[str, Any]) -> _R:
    return fn(**kwargs)


def parallel(fn: Callable[..., _R], calls: Iterable[Mapping[str, Any]], *, max_workers: int = 16) -> list[_R]:
    """Run ``fn(**kwargs)`` for each mapping in ``calls`` concurrently; results keep input order.
    If any call raises, the first exception (in input order) is re-raised after all finish."""
    if not isinstance(max_workers, int) or max_workers < 1:  # pyright: ignore[reportUnnecessaryIsInstance]
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

    # Plain threads rather than an executor keep the pool's frames out of user tracebacks. Each
    # runs in a copy of the caller's context, so it talks through the caller's channel (and its
    # calls name the skill that called parallel, if one did).
    threads = [
        threading.Thread(target=worker_context().run, args=(worker,), daemon=True)
        for _ in range(min(max_workers, len(items)))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for error in errors:
        if error is not None:
            raise error
    return results
