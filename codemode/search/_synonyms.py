"""A small synonym table for the verbs and nouns that tool names and requests use differently.

Query terms are expanded with their synonyms at a reduced weight (see ``_index``); documents are not
expanded, so an exact match always outranks a synonym match. Groups are written as plain words and
stemmed once at import, so they line up with the tokeniser. A word may sit in several groups.

The table is deliberately generic — vocabulary of tools in general, not of one benchmark.
"""

from __future__ import annotations

from codemode.search._tokenize import tokenize

__all__ = ["SYNONYMS"]

_GROUPS: tuple[str, ...] = (
    # actions
    "get fetch read retrieve obtain load lookup view open",
    "list enumerate show display browse exist available",
    "create add new make insert register generate open",
    "delete remove erase destroy drop purge trash discard unlink cancel",
    "update edit modify change patch set alter adjust correct rename",
    "search find query lookup look locate filter seek grep match",
    "send post publish deliver message dispatch",
    "reply respond answer",
    "close resolve finish complete done fix",
    "run execute invoke trigger launch",
    "start begin launch",
    "stop cancel halt terminate kill abort end",
    "copy duplicate clone",
    "move relocate transfer rename",
    "download export save",
    "upload import attach",
    "write save store put",
    "invite add join",
    "assign delegate give owner",
    "schedule plan book",
    "restart reboot reload",
    "enable activate",
    "disable deactivate",
    "login authenticate",
    "backup snapshot",
    "cleanup clean prune vacuum",
    "forward relay",
    "approve accept",
    "decline reject refuse",
    "merge combine land",
    "undo revert rollback",
    "describe inspect detail info information",
    "count total number many",
    "archive hide",
    "share grant permission access",
    "revoke unshare",
    "subscribe follow watch watcher notify",
    "check verify status",
    "remember memorize memory recall",
    "click press tap",
    "type enter input fill",
    "select choose pick option dropdown",
    "switch checkout",
    "stage index",
    "compare diff difference",
    "transition status state workflow",
    "link relate relation relationship connect reference",
    "capture snapshot screenshot",
    # things
    "user member person people account profile",
    "role permission privilege",
    "issue ticket bug task",
    "message chat note",
    "email mail inbox",
    "spam junk",
    "file document",
    "folder directory",
    "tree hierarchy recursive nested",
    "meeting event appointment invite invitation",
    "calendar agenda schedule",
    "available free busy availability",
    "customer client",
    "payment charge transaction card",
    "invoice bill billing",
    "money balance funds",
    "refund reimburse",
    "dispute chargeback",
    "discount coupon promo",
    "repository project",
    "comment note remark",
    "label tag flag",
    "log output",
    "error exception crash failure",
    "picture image photo screenshot png jpeg jpg gif",
    "website web page site url link",
    "html markdown content",
    "text content body",
    "size space disk bytes big",
    "table column schema",
    "sql query statement",
    "slow performance plan explain",
    "active running current",
    "recent latest newest last",
    "history log",
    "spreadsheet sheet cell",
    "channel room",
    "reaction emoji",
    "container pod",
    "replica instance scale",
    "shell command terminal",
    "popup dialog alert modal",
    "javascript script js",
    "console devtools",
    "time clock",
    "timezone zone",
    "weather forecast temperature rain snow wind hot cold warm humid",
    "current now today currently present",
    "song music track tune",
    "play stream listen",
    "movie film cinema",
    "buy purchase order",
    "rent hire rental",
    "book reserve reservation",
    "doctor physician therapist psychiatrist dentist provider",
    "restaurant food meal dine",
    "flight airline fly",
    "hotel accommodation lodging stay",
    "distance far mile kilometer",
    "location place city address coordinates latitude longitude",
    "price cost amount",
    "subscription plan",
)


def _build() -> dict[str, tuple[str, ...]]:
    table: dict[str, set[str]] = {}
    for group in _GROUPS:
        stems = {term for word in group.split() for term in tokenize(word)}
        for term in stems:
            table.setdefault(term, set()).update(stems - {term})
    return {term: tuple(sorted(others)) for term, others in table.items() if others}


SYNONYMS: dict[str, tuple[str, ...]] = _build()
"""Stemmed term -> its synonyms (stemmed, sorted, without the term itself)."""
