"""What the tests' small deterministic embedders share: how they read a tool and a query.

A real model (:mod:`codemode.search._e5`, :mod:`codemode.search._wordllama`) has its own conventions;
these read a tool as its name, title, description and parameter names, and a query as it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from codemode.search import SearchDocument

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np
    from numpy.typing import NDArray


class ToyModel:
    """Subclasses give ``model_id`` and ``embed``; this gives the rest of an Embedder."""

    fusion_weight = 0.6

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        raise NotImplementedError

    def document_text(self, doc: SearchDocument) -> str:
        words = [
            doc.name.replace("_", " "),
            doc.title or "",
            doc.description,
            *(n for n, _ in doc.parameters),
        ]
        return " ".join(word for word in words if word)

    def embed_query(self, query: str) -> NDArray[np.float32]:
        return self.embed([query])[0]
