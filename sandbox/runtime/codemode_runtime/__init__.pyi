"""The in-sandbox runtime API that generated stubs and programs use.

This file is the contract between the stub renderer (which emits calls to ``call_tool`` …) and
the runtime package beside it that implements it inside the sandbox (a test runs mypy's stubtest
to hold the two together). It is exported as ``codemode_runtime.pyi`` next to ``servers/`` by
``codemode sync --export`` so the tree type-checks on its own. Inside the sandbox the same package
is also importable as ``codemode``.
"""

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

_R = TypeVar("_R")

class CallError(Exception):
    """Base class of every error a stub call raises."""

class ToolError(CallError):
    """The tool ran and reported a failure (an MCP result with ``isError: true``)."""

    message: str
    content: list[Any]

class CallDenied(CallError):
    """The broker refused the call; nothing reached the server."""

    gate: str
    reason: str

class CallFailed(CallError):
    """The call did not complete (server unavailable, timeout, unknown outcome)."""

    reason: str
    outcome_unknown: bool

class PlannedValueError(TypeError):
    """A dry run's planned result was used as data (it does not exist until the real run)."""

class Image:
    data: bytes
    mime_type: str

class Audio:
    data: bytes
    mime_type: str

class EmbeddedResource:
    uri: str
    mime_type: str | None
    text: str | None
    blob: bytes | None

class ResourceLink:
    uri: str
    name: str
    mime_type: str | None
    description: str | None

class ResourceContents:
    uri: str
    mime_type: str | None
    text: str | None
    blob: bytes | None

class PromptMessage:
    role: str
    content: Any

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

def read_resource(server: str, uri: str) -> list[ResourceContents]: ...
def get_prompt(server: str, name: str, arguments: Mapping[str, str] | None = None) -> list[PromptMessage]: ...
def result(value: Any) -> None:
    """Set the program's final result explicitly (otherwise: the last expression, else stdout)."""

def parallel(fn: Callable[..., _R], calls: Iterable[Mapping[str, Any]], *, max_workers: int = 16) -> list[_R]:
    """Run ``fn(**kwargs)`` for each mapping in ``calls`` concurrently; results keep input order.
    If any call raises, the first exception (in input order) is re-raised after all finish."""

def propose_skill(name: str, source: str, description: str = "") -> dict[str, Any]:
    """Propose ``source`` as saved skill ``name`` (``skills/<name>.py``). Only a proposal: a person
    approves it before any run can import it. Raises ``ToolError`` saying what to fix."""
