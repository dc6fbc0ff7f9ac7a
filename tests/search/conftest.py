"""Fixtures shared by the search tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def private_search_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache folder of the test's own, with ``[search] semantic`` as the config says."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("CODEMODE_CACHE_DIR", raising=False)
    monkeypatch.delenv("CODEMODE_SEARCH_SEMANTIC", raising=False)
    return tmp_path / "cache"
