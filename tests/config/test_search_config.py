"""The ``[search]`` section: ``semantic = "off" | "e5" | "wordllama" | "on" | "auto"``, overridden by
CODEMODE_SEARCH_SEMANTIC."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

import pytest

from codemode.catalog import ServerCatalog, ToolSpec, tool_hash
from codemode.config import SearchConfig, SemanticChoice, load_config
from codemode.errors import ConfigError
from codemode.search import SemanticSetting
from codemode.stubs import _tree_search, render_tree
from tests.search.toy_model import ToyModel

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "codemode.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_the_default_is_off(tmp_path: Path) -> None:
    """Installing the extra alone does not change rankings: the configuration asks for it."""
    assert load_config(write(tmp_path, "")).search == SearchConfig(semantic="off")


@pytest.mark.parametrize("value", ["auto", "on", "off", "wordllama", "e5"])
def test_each_choice_loads(tmp_path: Path, value: str) -> None:
    assert load_config(write(tmp_path, f'[search]\nsemantic = "{value}"\n')).search.semantic == value


def test_a_misspelt_key_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, '[search]\nsemantik = "on"\n'))
    assert "search.semantik: unknown key" in str(info.value)
    assert "did you mean 'semantic'" in str(info.value)


@pytest.mark.parametrize("value", ['"of"', '"yes"', "true"])
def test_a_value_that_is_not_a_choice_is_refused_with_the_choices(tmp_path: Path, value: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, f"[search]\nsemantic = {value}\n"))
    message = str(info.value)
    assert "search.semantic" in message
    assert "'auto', 'on', 'off', 'wordllama' or 'e5'" in message


def test_the_stub_tree_knows_the_same_choices() -> None:
    assert get_args(SemanticChoice) == get_args(_tree_search.SemanticChoice)


def test_the_search_takes_the_choices_the_configuration_offers() -> None:
    # One definition per layer (configuration imports no feature package), kept equal here.
    assert get_args(SemanticChoice) == get_args(SemanticSetting)


@pytest.mark.parametrize(
    ("env", "choice", "wanted"),
    [
        (None, "auto", True),
        (None, "on", True),
        (None, "off", False),
        (None, None, False),  # callers without a configuration: the historical default
        ("1", "off", True),
        ("true", None, True),
        ("on", "off", True),
        ("auto", "off", True),
        ("0", "on", False),
        ("off", "auto", False),
        ("no", None, False),
        ("", "on", True),  # an empty variable is no override
        (None, "e5", True),
        ("e5", "off", True),
        ("wordllama", None, True),
    ],
)
def test_the_environment_variable_overrides_the_setting(
    monkeypatch: pytest.MonkeyPatch, env: str | None, choice: SemanticChoice | None, wanted: bool
) -> None:
    if env is None:
        monkeypatch.delenv("CODEMODE_SEARCH_SEMANTIC", raising=False)
    else:
        monkeypatch.setenv("CODEMODE_SEARCH_SEMANTIC", env)
    assert _tree_search.semantic_wanted(choice) is wanted


class OneAxisEmbedder(ToyModel):
    @property
    def model_id(self) -> str:
        return "test/one-axis"

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        import numpy as np

        return np.ones((len(texts), 1), dtype=np.float32)


def _catalog() -> list[ServerCatalog]:
    definition: dict[str, Any] = {
        "name": "get_weather",
        "title": None,
        "description": "Weather now.",
        "input_schema": {"type": "object"},
        "output_schema": None,
        "annotations": None,
    }
    spec = ToolSpec(server="w", schema_hash=tool_hash(**definition), **definition)
    return [ServerCatalog(server="w", tools=(spec,))]


@pytest.mark.parametrize(
    ("choice", "env", "installed", "hybrid"),
    [
        ("auto", None, True, True),
        ("auto", None, False, False),
        ("on", None, False, False),  # asked for but missing: BM25 alone, with a warning
        ("off", None, True, False),
        ("off", "1", True, True),
        ("on", "0", True, False),
        ("e5", None, True, True),
        ("e5", None, False, False),  # asked for but missing: BM25 alone, with a warning
        ("off", "e5", True, True),
        ("wordllama", None, True, True),
    ],
)
def test_render_tree_threads_the_setting_to_the_index(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    choice: SemanticChoice,
    env: str | None,
    installed: bool,
    hybrid: bool,
) -> None:
    pytest.importorskip("numpy")
    monkeypatch.setenv("CODEMODE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(_tree_search, "_embeddings", None)
    asked: list[str] = []

    def load_embedder(setting: str) -> OneAxisEmbedder | None:
        asked.append(setting)
        return OneAxisEmbedder() if installed and setting != "off" else None

    monkeypatch.setattr(_tree_search, "load_embedder", load_embedder)
    if env is None:
        monkeypatch.delenv("CODEMODE_SEARCH_SEMANTIC", raising=False)
    else:
        monkeypatch.setenv("CODEMODE_SEARCH_SEMANTIC", env)
    index, _ = render_tree(_catalog(), semantic=choice).search_snapshot()
    assert index.hybrid is hybrid
    assert asked == [{"1": "on", "0": "off"}.get(env or "", env or choice)]  # the setting in force
