"""The ``[search]`` section: how the tool search ranks.

``semantic`` chooses whether BM25 is fused with static word embeddings (the ``semantic`` extra,
``pip install 'codemode[semantic]'``): ``off`` (the default: rankings do not change because a
package happens to be installed) never loads the model, ``on`` asks for it (a warning, and BM25
alone, when the extra is missing), ``auto`` uses it when the extra is installed.
The environment variable ``CODEMODE_SEARCH_SEMANTIC`` overrides this key for one process, so a
ranking can be compared without editing the file: ``1``/``true``/``yes``/``on`` switch the signal on,
``auto`` defers to the extra being installed, any other value switches it off
(:func:`codemode.search.semantic_setting` decides, for the engine's tree and for ``codemode search``
/ ``tree`` alike).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

__all__ = ["SearchConfig", "SemanticChoice"]

# Defined here, not taken from codemode.search: configuration imports no feature package. The search
# takes the value as a plain string and names the same three (codemode.search.SemanticSetting): a
# test keeps the two equal, and pyright refuses a configured value the search does not know.
SemanticChoice = Literal["auto", "on", "off"]
"""``[search] semantic``: ``auto`` uses the ``semantic`` extra when installed, ``on`` asks for it,
``off`` ranks with BM25 alone."""


class SearchConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    semantic: SemanticChoice = "off"
    """``off``, ``on`` or ``auto`` (the extra when installed); ``CODEMODE_SEARCH_SEMANTIC`` overrides it."""
