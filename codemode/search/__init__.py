"""Tool search: rank the tools of every connected server for a natural-language query.

A field-weighted BM25 index (BM25F) over tool names, titles, descriptions, server names,
parameter names/descriptions and output fields, with identifier-aware tokenisation, a light
stemmer and a small synonym table for common tool verbs and nouns. Pure stdlib, deterministic,
built in one pass.

With the ``semantic`` extra installed, ``ToolIndex.build(docs, embedder=load_embedder())`` also ranks by
the cosine of static word embeddings shipped in a wheel (no download), fused with BM25.

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
from codemode.search._semantic import (
    MISSING_EXTRA,
    SEMANTIC_ENV,
    Embedder,
    EmbeddingCache,
    SemanticSetting,
    load_embedder,
    semantic_ranking,
    semantic_setting,
)

__all__ = [
    "MISSING_EXTRA",
    "SEMANTIC_ENV",
    "CachedRow",
    "CachedSearch",
    "Embedder",
    "EmbeddingCache",
    "SearchDocument",
    "SearchHit",
    "SemanticSetting",
    "ToolIndex",
    "cache_dir",
    "cache_key",
    "load_embedder",
    "read_sealed",
    "semantic_ranking",
    "semantic_setting",
    "write_sealed",
]
