"""``[serve] replica``: the name messages give this replica among several on one ledger."""

from __future__ import annotations

import socket

import pytest
from pydantic import ValidationError

from codemode.config import ServeConfig


def test_replica_name_defaults_to_host_and_port() -> None:
    assert ServeConfig(port=9100).replica_name == f"{socket.gethostname()}:9100"


def test_a_configured_replica_name_is_used_as_given() -> None:
    assert ServeConfig(replica="serve-b", port=9100).replica_name == "serve-b"


def test_an_overlong_replica_name_is_refused() -> None:
    with pytest.raises(ValidationError, match="replica"):
        ServeConfig(replica="x" * 201)
