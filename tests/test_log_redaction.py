"""Log records are redacted as they are made: whichever logger, handler or formatter they meet."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from codemode._redaction import forget_secrets, install_log_redaction, remember_secret
from codemode.cli import _common

SECRET = "log-secret-5f4dcc3b5aa7"


@pytest.fixture
def output() -> Iterator[io.StringIO]:
    """Redaction installed, and a plain handler on the root logger writing to a buffer."""
    forget_secrets()
    remember_secret(SECRET, "LOG_SECRET")
    factory = logging.getLogRecordFactory()
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    install_log_redaction()
    installed = logging.getLogRecordFactory()
    install_log_redaction()
    assert logging.getLogRecordFactory() is installed, "installing twice changes nothing"
    try:
        yield buffer
    finally:
        root.removeHandler(handler)
        logging.setLogRecordFactory(factory)
        forget_secrets()


def test_messages_arguments_and_exceptions_of_any_logger_are_redacted(output: io.StringIO) -> None:
    logger = logging.getLogger("mcp.client.stdio")  # not codemode's: a library's child logger
    logger.warning("Failed to parse JSONRPC message from server: %s", f'{{"error": "{SECRET}"}}')
    logger.warning("config: API_KEY=%s", "abcd1234efgh5678")
    logger.error("bad format %d", f"password={SECRET}")
    try:
        raise RuntimeError(f"server said postgres://app:{SECRET}@db/x")
    except RuntimeError:
        logger.exception("connection failed")
    text = output.getvalue()
    assert SECRET not in text and "abcd1234efgh5678" not in text
    assert text.count("[REDACTED:${LOG_SECRET}]") >= 3 and "[REDACTED:apikey]" in text
    assert "connection failed" in text and "RuntimeError" in text, "the record keeps what it says"


def test_a_record_without_secrets_is_formatted_as_usual(output: io.StringIO) -> None:
    logging.getLogger("codemode.host").warning("server %s exited with %d", "docs", 3)
    assert output.getvalue() == "codemode.host WARNING server docs exited with 3\n"


def test_a_cli_command_that_loads_its_config_redacts_the_secrets_it_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "codemode.toml"
    config.write_text('[servers.x]\ncommand = "x"\nenv = { K = "${LOG_TEST_KEY}" }\n', encoding="utf-8")
    monkeypatch.setenv("LOG_TEST_KEY", "named-in-the-config-42")
    factory = logging.getLogRecordFactory()
    forget_secrets()
    try:
        _common.load(config)
        record = logging.getLogRecordFactory()(
            "x", logging.WARNING, __file__, 1, "got %s", ("named-in-the-config-42",), None
        )
        assert record.getMessage() == "got [REDACTED:${LOG_TEST_KEY}]"
    finally:
        logging.setLogRecordFactory(factory)
        forget_secrets()
