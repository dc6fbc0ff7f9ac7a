"""The README's configuration examples are valid configuration."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from codemode.config import ScopeRule, config_from_mapping

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_configuration_examples_validate() -> None:
    blocks = re.findall(r"```toml\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
    assert blocks, "the README shows a configuration example"
    whole = [block for block in blocks if "[servers." in block]
    assert whole and config_from_mapping(tomllib.loads(whole[0])).servers, "one is a whole codemode.toml"
    for block in blocks:
        data = tomllib.loads(block)
        if "scopes" in data:  # a fragment: the scope rules of a principal
            assert [ScopeRule.model_validate(rule) for rule in data["scopes"]]
        else:
            config_from_mapping(data)
