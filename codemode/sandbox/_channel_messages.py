"""The messages of a sandbox channel, as the host reads and writes them.

Everything read comes from the sandbox and is untrusted: a message is classified as a JSON-RPC
2.0 request or response (anything else breaks the protocol), and a request's parameters are
validated strictly into the models below (unknown keys, wrong types and over-long strings are
refused with ``INVALID_PARAMS``). Replies are written as whole frames (:func:`response_frame`).
Shapes, names and limits are the wire contract's (:mod:`codemode.sandbox._wire`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError

from codemode.errors import ChannelError
from codemode.sandbox import _wire as wire
from codemode.sandbox._framing import encode

__all__ = [
    "CallParams",
    "HelloParams",
    "ImportParams",
    "Message",
    "PromptParams",
    "ReadParams",
    "RpcError",
    "classify",
    "parse_params",
    "response_frame",
]


class RpcError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# -- what the sandbox may send (validated strictly; unknown keys are refused) ------------------


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class HelloParams(Params):
    secret: StrictStr = Field(max_length=wire.NAME_MAX)
    protocol: int
    pid: int | None = None


class ImportParams(Params):
    module: StrictStr = Field(max_length=wire.MODULE_NAME_MAX)


class CallParams(Params):
    server: StrictStr = Field(max_length=wire.NAME_MAX)
    tool: StrictStr = Field(max_length=wire.NAME_MAX)
    schema_hash: StrictStr = Field(max_length=wire.NAME_MAX)
    arguments: dict[str, Any] = Field(default_factory=dict)
    idempotency_key: StrictStr | None = Field(default=None, max_length=wire.NAME_MAX)
    skill: StrictStr | None = Field(default=None, max_length=wire.NAME_MAX)


class ReadParams(Params):
    server: StrictStr = Field(max_length=wire.NAME_MAX)
    uri: StrictStr = Field(max_length=wire.URI_MAX)


class ProposeParams(Params):
    name: StrictStr = Field(max_length=wire.NAME_MAX)
    source: StrictStr = Field(max_length=wire.SKILL_SOURCE_MAX)
    description: StrictStr = Field(default="", max_length=wire.SKILL_SOURCE_MAX)


class PromptParams(Params):
    server: StrictStr = Field(max_length=wire.NAME_MAX)
    name: StrictStr = Field(max_length=wire.NAME_MAX)
    arguments: dict[str, StrictStr] = Field(default_factory=dict)


_P = TypeVar("_P", bound=Params)


def parse_params(model: type[_P], raw: Any) -> _P:
    try:
        return model.model_validate(raw if raw is not None else {})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'params'}: {err['msg']}" for err in exc.errors()[:5]
        )
        raise RpcError(wire.INVALID_PARAMS, f"invalid params: {problems}") from None


@dataclass
class Message:
    kind: Literal["request", "response"]
    id: int | str | None
    method: str = ""
    params: Any = None
    result: Any = None
    error: Any = None


def classify(raw: Any) -> Message:
    if not isinstance(raw, dict) or raw.get("jsonrpc") != wire.JSONRPC:  # pyright: ignore[reportUnknownMemberType]
        raise ChannelError("not a JSON-RPC 2.0 message")
    message: dict[str, Any] = raw  # pyright: ignore[reportUnknownVariableType]
    msg_id = message.get("id")
    if isinstance(msg_id, bool) or not isinstance(msg_id, int | str | None):
        raise ChannelError("invalid JSON-RPC id")
    if "method" in message:
        method = message["method"]
        if not isinstance(method, str) or msg_id is None:
            # Notifications are not part of this protocol.
            raise ChannelError("invalid JSON-RPC request")
        return Message("request", msg_id, method=method, params=message.get("params"))
    if ("result" in message) == ("error" in message):
        raise ChannelError("invalid JSON-RPC response")
    return Message("response", msg_id, result=message.get("result"), error=message.get("error"))


_REPLY_HEAD = b'{"jsonrpc":' + wire.encode_body(wire.JSONRPC) + b',"id":'


def response_frame(request_id: int | str | None, result: BaseModel | wire.ImportResult) -> bytes:
    """The whole reply frame. A call's outcome is serialised by pydantic straight into the
    envelope (the same compact UTF-8 JSON as :func:`wire.encode_body`, made without an
    intermediate dict); anything else goes through the wire's encoder."""
    if not isinstance(result, BaseModel):
        return encode(wire.response(request_id, result))
    body = b"".join(
        (
            _REPLY_HEAD,
            wire.encode_body(request_id),
            b',"result":',
            result.model_dump_json().encode(),
            b"}",
        )
    )
    return wire.HEADER.pack(len(body)) + body
