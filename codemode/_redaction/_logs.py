"""Secrets hidden in log records, whichever logger and handler they pass.

Log messages quote what servers said (the MCP SDK logs a JSON-RPC message it could not parse, an
error a server answered with) and a server may say its own credential. Handlers are the
application's or Python's last resort, and a ``logging.Filter`` on a logger sees only the records
of that very logger, not its children's; a record factory sees every record as it is made, before
any handler, so that is where codemode hides secrets (:func:`redact_record`). The CLI installs it
when a command loads its config (:func:`install_log_redaction`); an application that embeds
codemode may too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from codemode._redaction._rules import redact_secrets

_installed: set[Callable[..., logging.LogRecord]] = set()
"""The factories this module made (installing twice would redact every record twice)."""


def redact_record(record: logging.LogRecord) -> None:
    """Hide secrets in ``record``'s message, exception text and stack, in place.

    The message is formatted here (once; handlers then get the result with no arguments). A
    message that cannot be formatted is kept as its parts' text, redacted: logging would
    otherwise print the raw arguments in its own error report.
    """
    try:
        message = record.getMessage()
    except Exception:  # logging's own report of a bad format string would print the arguments raw
        message = f"{record.msg!r} (arguments that do not fit it: {record.args!r})"
        record.msg, record.args = redact_secrets(message)[0], None
    else:
        hidden, found = redact_secrets(message)
        if found:
            record.msg, record.args = hidden, None
    if record.exc_info is not None and record.exc_text is None:
        # Cached where every Formatter looks before formatting the exception itself.
        formatted = logging.Formatter().formatException(record.exc_info)
        hidden, found = redact_secrets(formatted)
        if found:
            record.exc_text = hidden
    if record.stack_info:
        record.stack_info = redact_secrets(record.stack_info)[0]


def install_log_redaction() -> None:
    """Make every log record of this process pass :func:`redact_record` (idempotent)."""
    previous = logging.getLogRecordFactory()
    if previous in _installed:
        return

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        redact_record(record)
        return record

    _installed.add(factory)
    logging.setLogRecordFactory(factory)
