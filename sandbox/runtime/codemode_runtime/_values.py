"""The exceptions a stub call raises and the content classes it returns (the public API's values)."""

from __future__ import annotations

from typing import Any


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


class Plain:
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


class Media(Plain):
    """Binary content with its MIME type (shared by images and audio)."""

    __slots__ = ("data", "mime_type")
    data: bytes
    mime_type: str

    def __init__(self, data: bytes, mime_type: str) -> None:
        self.data = data
        self.mime_type = mime_type


class Image(Media):
    __slots__ = ()


class Audio(Media):
    __slots__ = ()


class UriBody(Plain):
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


class EmbeddedResource(UriBody):
    __slots__ = ()


class ResourceLink(Plain):
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


class ResourceContents(UriBody):
    __slots__ = ()


class PromptMessage(Plain):
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
