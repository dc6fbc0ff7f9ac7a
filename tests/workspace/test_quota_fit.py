"""A workspace quota must fit the channel: refused at start, never found out in a run."""

from __future__ import annotations

from pathlib import Path

import pytest

from codemode.config import config_from_mapping
from codemode.engine._workspace import workspace_quota
from codemode.errors import ConfigError
from codemode.sandbox import WorkspaceQuota


def test_a_quota_that_cannot_fit_the_channel_is_refused_at_start(tmp_path: Path) -> None:
    config = config_from_mapping(
        {"workspace": {"quota_bytes": 16 * 1024 * 1024}, "sandbox": {"max_frame_bytes": 16 * 1024 * 1024}},
        base_dir=tmp_path,
    )
    with pytest.raises(ConfigError, match=r"workspace: quota_bytes = 16777216 .* raise max_frame_bytes"):
        workspace_quota(config)


def test_the_default_quota_fits_and_a_disabled_workspace_has_none(tmp_path: Path) -> None:
    assert workspace_quota(config_from_mapping({}, base_dir=tmp_path)) == WorkspaceQuota(
        bytes=8 * 1024 * 1024, files=1000
    )
    assert workspace_quota(config_from_mapping({"workspace": {"enabled": False}}, base_dir=tmp_path)) is None


def test_unknown_workspace_keys_are_refused() -> None:
    with pytest.raises(ConfigError, match="quota_byte"):
        config_from_mapping({"workspace": {"quota_byte": 1}})
