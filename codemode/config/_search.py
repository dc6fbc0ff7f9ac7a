"""The ``[search]`` section: how the tool search ranks.

``semantic`` chooses whether BM25 is fused with static word embeddings (the ``semantic`` extra,
``pip install 'codemode[semantic]'``): ``off`` (the default: rankings do not change because a
package happens to be installed) never loads the model, ``on`` asks for it (a warning, and BM25
alone, when the extra is missing), ``auto`` uses it when the extra is installed.
The environment variable ``CODEMODE_SEARCH_SEMANTIC`` overrides this key for one process, so a
ranking can be compared without editing the file: ``1``/``true``/``yes``/``on`` switch the signal on,
``auto`` defers to the extra being installed, any other value switches it off
(:func:`~codemode.search._semantic.semantic_setting` decides).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

# One definition, beside the one function that reads it with its override (semantic_setting), which
# the engine's tree and ``codemode search`` / ``tree`` both call.
from codemode.search._semantic import Setting as SemanticChoice
from codemode.search._semantic import semantic_setting

__all__ = ["SearchConfig", "SemanticChoice", "semantic_setting"]


class SearchConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    semantic: SemanticChoice = "off"
    """``off``, ``on`` or ``auto`` (the extra when installed); ``CODEMODE_SEARCH_SEMANTIC`` overrides it."""
