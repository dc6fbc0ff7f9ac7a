"""The README's configuration example is valid configuration."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from codemode.config import config_from_mapping

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_configuration_example_validates() -> None:
    blocks = re.findall(r"```toml\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
    assert blocks, "the README shows a configuration example"
    for block in blocks:
        config = config_from_mapping(tomllib.loads(block))
        assert config.servers
