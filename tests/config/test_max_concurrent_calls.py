"""``[servers.X] max_concurrent_calls`` is a whole number of requests, 1 to 1024, or unset."""

from __future__ import annotations

from typing import Any

import pytest

from codemode.config import Config, config_from_mapping
from codemode.errors import ConfigError


def _config(**server: Any) -> Config:
    return config_from_mapping({"servers": {"crowd": {"command": "crowd-server", **server}}})


@pytest.mark.parametrize("bad", [0, -2, 2.5, 2.0, True, "4", 1025])
def test_anything_but_a_count_from_1_to_1024_is_refused_with_what_to_write(bad: object) -> None:
    with pytest.raises(ConfigError) as caught:
        _config(max_concurrent_calls=bad)
    assert "servers.crowd.max_concurrent_calls: must be a whole number of requests from 1 to 1024" in str(
        caught.value
    )
    assert "leave it out for no limit" in str(caught.value)


def test_a_count_is_kept_and_unset_means_no_limit() -> None:
    assert _config(max_concurrent_calls=4).servers["crowd"].max_concurrent_calls == 4
    assert _config(max_concurrent_calls=1024).servers["crowd"].max_concurrent_calls == 1024
    assert _config().servers["crowd"].max_concurrent_calls is None
