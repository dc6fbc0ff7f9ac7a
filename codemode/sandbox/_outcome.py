"""What a run returns, and the validation of what the sandbox's runtime says about it.

The runtime's reply and snapshot have the shapes of :mod:`codemode.sandbox._wire`
(``RunReply``, ``Snapshot``, ``ReplyError``); the models here check those shapes strictly, since
the sandbox is untrusted (a test holds their fields to the wire's).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
)

from codemode._run_usage import RunUsage
from codemode.sandbox import _wire as wire
from codemode.sandbox._framing import MalformedMessage, decode

__all__ = ["BackendName", "ErrorKind", "ResultKind", "RunError", "RunOutcome", "WorkspaceReturn"]

BackendName = Literal["docker", "bwrap", "process", "in_process"]
"""``in_process`` is ``codemode.testing``'s backend for unit tests (no isolation); no
configuration selects it."""

ErrorKind = Literal["exception", "timeout", "oom", "killed", "sandbox", "channel"]
"""Why a run failed: the program raised (``exception``), ran out of wall time (``timeout``) or
memory (``oom``), was killed for another limit (``killed``), the sandbox itself failed
(``sandbox``), or the sandbox broke the channel protocol (``channel``)."""

ResultKind = wire.ResultKind
"""``json``: ``result`` holds the value (or, when ``result_truncated``, ``result_repr`` holds the
start of its JSON text); ``repr``: the value was not JSON-serialisable and ``result_repr`` holds
its ``repr()``; ``stdout``: the program produced no value, its printed output is the result."""


class RunError(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: ErrorKind
    type: str
    """Exception type as the program would name it (``ValueError``, ``codemode.CallDenied`` …), or
    the limit that was hit (``Timeout``, ``OutOfMemory`` …)."""
    message: str
    traceback: str = ""
    """Traceback trimmed to the program's own frames (and stub modules); empty for limits."""


class WorkspaceReturn(BaseModel):
    """The workspace as the sandbox says it was when the program ended (untrusted: names and sizes
    are checked by whoever keeps it)."""

    model_config = ConfigDict(frozen=True)

    files: dict[str, bytes] = Field(default_factory=dict[str, bytes])
    refused: dict[str, str] = Field(default_factory=dict[str, str])
    """Entries that were not files or directories (links, FIFOs, devices), each with what it was."""
    error: str | None = None
    """Why nothing of it may be kept (the quota was hit); ``files`` is then empty."""


class RunOutcome(BaseModel):
    """The outcome of one program run."""

    model_config = ConfigDict(frozen=True)

    status: wire.Status
    result: JsonValue = None
    result_kind: ResultKind = "stdout"
    result_repr: str | None = None
    result_truncated: bool = False
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    error: RunError | None = None
    calls: int = 0
    """Tool calls, resource reads and prompt requests the program made through the channel."""
    duration_ms: float = 0.0
    run_id: str
    backend: BackendName
    sandbox_id: str = ""
    usage: RunUsage | None = None
    """What the run used of its sandbox (None when it never reached one: a closed session)."""
    workspace: WorkspaceReturn | None = Field(default=None, exclude=True, repr=False)
    """The workspace at the program's end, when the run had one and the sandbox answered."""

    @property
    def final(self) -> Any:
        """The final result as the model should see it: the value, else its repr, else stdout."""
        if self.result_kind == "stdout":
            return self.stdout
        if self.result_kind == "json" and not self.result_truncated:
            return self.result
        return self.result_repr


# -- the runtime's reply (untrusted) ---------------------------------------------------------


class ReplyError(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    type: StrictStr = Field(max_length=wire.ERROR_TYPE_MAX)
    message: StrictStr
    traceback: StrictStr = ""


class Snapshot(BaseModel):
    """Partial output the runtime reports while a program is still running."""

    model_config = ConfigDict(extra="forbid", strict=True)
    stdout: StrictStr = ""
    stdout_truncated: StrictBool = False
    stderr: StrictStr = ""
    stderr_truncated: StrictBool = False

    def capped(self, cap: int) -> dict[str, Any]:
        """The output fields of a :class:`RunOutcome`, cut to ``cap`` bytes each here as well."""
        stdout, out_cut = cap_text(self.stdout, cap)
        stderr, err_cut = cap_text(self.stderr, cap)
        return {
            "stdout": stdout,
            "stderr": stderr,
            "stdout_truncated": self.stdout_truncated or out_cut,
            "stderr_truncated": self.stderr_truncated or err_cut,
        }


class WorkspaceReply(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    files: dict[StrictStr, StrictStr]
    refused: dict[StrictStr, StrictStr]
    error: StrictStr | None

    def decoded(self) -> WorkspaceReturn:
        try:
            files = {name: base64.b64decode(text, validate=True) for name, text in self.files.items()}
        except (binascii.Error, ValueError):
            raise MalformedMessage("malformed run reply: a workspace file is not base64") from None
        return WorkspaceReturn(files=files, refused=dict(self.refused), error=self.error)


class RuntimeReply(Snapshot):
    """The ``run`` answer exactly as the runtime must shape it; anything else is a protocol violation."""

    status: wire.Status
    result_kind: ResultKind = "stdout"
    result_json: StrictStr | None = None
    result_repr: StrictStr | None = None
    result_truncated: StrictBool = False
    error: ReplyError | None = None
    leftover: StrictInt = Field(default=0, ge=0)
    """Threads and child processes the program left running (the sandbox must not be reused)."""
    workspace: WorkspaceReply | None = None


def parse_reply(raw: Any) -> RuntimeReply:
    try:
        return RuntimeReply.model_validate(raw)
    except ValidationError as exc:
        raise MalformedMessage(f"malformed run reply: {exc.errors()[0]['msg']}") from None


def parse_snapshot(raw: Any) -> Snapshot:
    try:
        return Snapshot.model_validate(raw)
    except ValidationError:
        return Snapshot()


def cap_text(text: str, cap: int) -> tuple[str, bool]:
    """Cut ``text`` to ``cap`` UTF-8 bytes (the sandbox's own cap is not trusted)."""
    data = text.encode("utf-8", errors="replace")
    if len(data) <= cap:
        return text, False
    return data[:cap].decode("utf-8", errors="ignore"), True


def decode_result(text: str, cap: int) -> tuple[JsonValue, str | None, bool]:
    """Parse the runtime's JSON result text: ``(value, repr, truncated)``.

    Over the cap, or unparseable/too deep despite the runtime's checks, the text itself is kept
    (cut to the cap) instead of the value.
    """
    data = text.encode("utf-8", errors="replace")
    if len(data) > cap:
        return None, data[:cap].decode("utf-8", errors="ignore"), True
    try:
        value: JsonValue = decode(data)
    except MalformedMessage:
        return None, text, False
    return value, None, False
