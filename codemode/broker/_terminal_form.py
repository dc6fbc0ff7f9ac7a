"""Answering a server's request for input at the controlling terminal (``codemode run``).

The person sees who asks (server, tool, call, principal) and the server's message, then chooses:
``y`` fills in the form, ``n`` (or Enter) declines, ``c`` cancels. Each field is asked in turn with
its type, choices, default and whether it is required; a value that does not fit is asked again
with the reason, so the server only ever gets a complete, valid form. A URL request shows the
address and its host and opens nothing: the person opens it, or not.

Lines are read in canonical mode with signals off, so Ctrl-C arrives as a byte and cancels the
request instead of killing the run; Ctrl-D, a closed terminal or no answer in time cancel too.
The terminal's settings are always restored.
"""

from __future__ import annotations

import contextlib
import os
import select
import termios
import time
from collections.abc import Mapping
from typing import Any

import anyio

from codemode._redaction import redact_secrets
from codemode.broker._inputs import (
    ElicitationAction,
    ElicitationAnswer,
    ElicitationRequest,
    FormError,
    check_field,
    choices,
    complete_form,
    form_properties,
)
from codemode.broker._terminal import NoTerminal, QuestionPause, opened_terminal

_CANCEL_BYTES = (b"\x03", b"\x04")


class _Cancelled(Exception):
    """Ctrl-C, Ctrl-D, a closed terminal, or no answer before the deadline."""


class TerminalElicitor:
    def __init__(
        self,
        tty_path: str = "/dev/tty",
        timeout_s: float = 300.0,
        *,
        pause: QuestionPause = contextlib.nullcontext,
    ) -> None:
        self.tty_path = tty_path
        self.timeout_s = timeout_s
        """How long the whole request may wait for the person; then it is cancelled."""
        self.pause = pause
        """Entered around the whole conversation (see :data:`QuestionPause`)."""
        self._lock = anyio.Lock()

    async def elicit(self, request: ElicitationRequest) -> ElicitationAnswer:
        # One request at a time: two calls' questions must not interleave on one screen.
        async with self._lock:
            return await anyio.to_thread.run_sync(self._ask, request, abandon_on_cancel=True)

    def _ask(self, request: ElicitationRequest) -> ElicitationAnswer:
        try:
            with self.pause(), opened_terminal(self.tty_path, _lines_without_signals) as fd:
                return _Conversation(fd, time.monotonic() + self.timeout_s).run(request)
        except NoTerminal:
            return ElicitationAnswer("cancel", answered_by="terminal")


def _lines_without_signals(attributes: list[Any]) -> None:
    attributes[3] &= ~termios.ISIG  # Ctrl-C becomes a byte: it cancels, it does not kill
    attributes[6][termios.VEOL] = b"\x03"  # and ends the line, so the read sees it at once


class _Conversation:
    def __init__(self, fd: int, deadline: float) -> None:
        self._fd = fd
        self._deadline = deadline

    def run(self, request: ElicitationRequest) -> ElicitationAnswer:
        try:
            return self._run(request)
        except _Cancelled:
            self._say("\r\n(cancelled)\r\n")
            return ElicitationAnswer("cancel", answered_by="terminal")

    def _run(self, request: ElicitationRequest) -> ElicitationAnswer:
        self._say(
            f"\r\n[codemode] {request.server}/{request.tool} asks for input "
            f"(call {request.call_id} for {request.principal}@{request.tenant}):\r\n"
            f"  {request.message}\r\n"
        )
        if request.mode == "url":
            self._say(f"  it asks you to open {request.url}\r\n")
            self._say(f"  (host {request.url_host}; codemode opens nothing)\r\n")
            choice = self._choose("  done? [y = done / N = decline / c = cancel] ")
            return ElicitationAnswer(choice, answered_by="terminal")
        choice = self._choose("  answer? [y = fill in the form / N = decline / c = cancel] ")
        if choice != "accept":
            return ElicitationAnswer(choice, answered_by="terminal")
        content = self._fill(request.schema)
        return ElicitationAnswer("accept", content, answered_by="terminal")

    def _choose(self, question: str) -> ElicitationAction:
        answer = self._line(question).strip().lower()
        if answer in ("y", "yes"):
            return "accept"
        if answer in ("c", "cancel"):
            return "cancel"
        return "decline"

    def _fill(self, schema: Mapping[str, Any]) -> dict[str, Any]:
        try:
            properties = form_properties(schema)
        except FormError as exc:
            self._say(f"  the server's form cannot be shown: {exc}\r\n")
            raise _Cancelled from None
        required = schema.get("required", [])
        content: dict[str, Any] = {}
        for name, spec in properties.items():
            while True:
                raw = self._line(_field_question(name, spec, name in required)).strip()
                if not raw:
                    if name in required and "default" not in spec:
                        self._say(f"    field {name!r} is required\r\n")
                        continue
                    break  # the default, if any, is filled in by complete_form
                try:
                    content[name] = check_field(name, spec, raw)
                    break
                except FormError as exc:
                    self._say(f"    {exc}\r\n")
        try:
            return complete_form(schema, content)
        except FormError as exc:  # e.g. a default that does not fit its own field
            self._say(f"  the server's form cannot be completed: {exc}\r\n")
            raise _Cancelled from None

    def _say(self, text: str) -> None:
        os.write(self._fd, redact_secrets(text)[0].encode("utf-8", "replace"))

    def _line(self, question: str) -> str:
        self._say(question)
        data = b""
        while not data.endswith(b"\n"):
            left = self._deadline - time.monotonic()
            if left <= 0:
                raise _Cancelled
            ready, _, _ = select.select([self._fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._fd, 4096)
            if not chunk or any(b in chunk for b in _CANCEL_BYTES):
                raise _Cancelled
            data += chunk
        return data.decode("utf-8", "replace").rstrip("\r\n")


def _field_question(name: str, spec: Mapping[str, Any], required: bool) -> str:
    label = str(spec.get("title") or name)
    facts = [str(spec.get("type", "string"))]
    allowed = choices(spec)
    if allowed is not None:
        facts.append("one of " + ", ".join(map(str, allowed)))
    if "default" in spec:
        facts.append(f"Enter for {spec['default']}")
    elif required:
        facts.append("required")
    description = f" - {spec['description']}" if spec.get("description") else ""
    return f"  {label}{description} ({'; '.join(facts)}): "
