"""Tool search: rank the tools of every connected server for a natural-language query.

A field-weighted BM25 index (BM25F) over tool names, titles, descriptions, server names and
parameter names/descriptions, with identifier-aware tokenisation, a light stemmer and a small
synonym table for common tool verbs and nouns. Pure stdlib, deterministic, built in one pass.

>>> doc = SearchDocument("crm/get_customer", "crm", "get_customer", None, "Fetch one customer.")
>>> index = ToolIndex.build([doc])
>>> [hit.key for hit in index.search("look up a customer")]
['crm/get_customer']
"""

from codemode.search._index import ToolIndex
from codemode.search._model import SearchDocument, SearchHit

__all__ = ["SearchDocument", "SearchHit", "ToolIndex"]
