"""Tokenisation for tool search: identifier splitting, stop words, abbreviations and a light stemmer.

The same function tokenises documents and queries, so both sides agree on every term:

1. split camelCase / PascalCase / acronym boundaries (``getHTTPResponse`` -> ``get HTTP Response``);
2. lowercase and cut at everything that is not a letter or digit (``snake_case``, ``kebab-case``,
   ``dotted.names``, punctuation, whitespace);
3. read a few phrasal verbs as the verb they mean (``look for`` -> ``search``, ``get rid of`` -> ``delete``),
   then drop one-letter tokens and stop words;
4. expand a few abbreviations common in tool names (``repo`` -> ``repository``, ``k8s`` -> ``kubernetes``,
   ``pr`` -> ``pull request``);
5. stem with a small suffix stripper (:func:`stem`).
"""

from __future__ import annotations

import re

__all__ = ["STOP_WORDS", "clear_caches", "stem", "tokenize"]

# (?<=[a-z0-9])(?=[A-Z])     fooBar, v2Api     -> foo Bar, v2 Api
# (?<=[A-Z])(?=[A-Z][a-z])   HTTPResponse      -> HTTP Response
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
# Plural acronyms ("PRs", "URLs", "APIs") stay one word instead of splitting before the final "s".
_ACRONYM_PLURAL = re.compile(r"([A-Z]{2,})s(?![a-z])")

STOP_WORDS: frozenset[str] = frozenset(
    """
    a about above after again against all also am an and any are as at be because been before being
    below between both but by can could did do does doing down during each either else ever few for
    from further had has have having he her here hers him his how however i if in into is it its itself
    just let lets me might more most must my myself no nor not of off on once only or other our ours
    out over own per please same shall she should so some such than that the their theirs them then
    there these they this those through to too under until up upon us very via was we were what when
    where whether which while who whom whose why will with within without would yet you your yours
    want wants need needs like e g eg ie etc one s t
    """.split()  # noqa: SIM905 - a word table reads better as text
)

# Abbreviations seen in tool names and queries; applied before stemming, on both sides.
_ABBREVIATIONS: dict[str, tuple[str, ...]] = {
    "repo": ("repository",),
    "repos": ("repository",),
    "pr": ("pull", "request"),
    "prs": ("pull", "request"),
    "k8s": ("kubernetes",),
    "kube": ("kubernetes",),
    "db": ("database",),
    "dbs": ("database",),
    "dm": ("direct", "message"),
    "dms": ("direct", "message"),
    "msg": ("message",),
    "msgs": ("message",),
    "dir": ("directory",),
    "dirs": ("directory",),
    "env": ("environment",),
    "config": ("configuration",),
    "cfg": ("configuration",),
    "info": ("information",),
    "tz": ("timezone",),
    "img": ("image",),
    "doc": ("document",),
    "docs": ("document",),
    "pic": ("picture",),
    "ns": ("namespace",),
    "svc": ("service",),
    "perm": ("permission",),
    "perms": ("permission",),
    "attr": ("attribute",),
    "attrs": ("attribute",),
    "auth": ("authentication",),
    "stats": ("statistic",),
    "org": ("organization",),
    "orgs": ("organization",),
    "organisation": ("organization",),
    "organisations": ("organization",),
    "ci": ("continuous", "integration"),
    "apis": ("api",),
    "ids": ("id",),
}

# Phrasal verbs whose particle is a stop word, read as the verb they mean (checked before stop words go).
_PHRASES: dict[tuple[str, str], tuple[str, ...]] = {
    ("look", "for"): ("search",),
    ("look", "up"): ("lookup",),
    ("search", "for"): ("search",),
    ("get", "rid"): ("delete",),
    ("set", "up"): ("create",),
    ("sign", "in"): ("login",),
    ("log", "in"): ("login",),
    ("sign", "out"): ("logout",),
    ("log", "out"): ("logout",),
    ("sign", "up"): ("register",),
    ("turn", "on"): ("enable",),
    ("turn", "off"): ("disable",),
    ("switch", "on"): ("enable",),
    ("switch", "off"): ("disable",),
    ("shut", "down"): ("stop",),
    ("spin", "up"): ("start",),
    ("roll", "back"): ("rollback",),
    ("check", "out"): ("checkout",),
    ("clean", "up"): ("cleanup",),
    ("back", "up"): ("backup",),
    ("fill", "in"): ("fill",),
    ("fill", "out"): ("fill",),
    ("pass", "on"): ("forward",),
    ("hand", "over"): ("assign",),
}

# Words the suffix rules would mangle or merge wrongly; kept as they are.
_KEEP = frozenset(
    """
    alias always supply analysis atlas basis bias canvas chaos class gas news status kubernetes
    series species this thus various previous minus bonus campus census virus focus corpus axis
    https dns aws sms ios macos os windows jenkins redis postgres
    comment document element moment segment argument implement fragment
    during string thing nothing something anything everything morning evening ring king bring sing
    need feed seed speed indeed embed
    """.split()  # noqa: SIM905 - a word table reads better as text
)
_VOWELS = frozenset("aeiouy")
_NO_UNDOUBLE = frozenset("lsz")


def _has_vowel(s: str) -> bool:
    return any(c in _VOWELS for c in s)


def _undouble(s: str) -> str:
    if len(s) >= 3 and s[-1] == s[-2] and s[-1] not in _VOWELS and s[-1] not in _NO_UNDOUBLE:
        return s[:-1]
    return s


def _stem(word: str) -> str:
    if len(word) <= 3 or word in _KEEP or not word.isalpha():
        return word
    w = word
    # 1. plurals and third person
    if w.endswith("sses"):
        w = w[:-2]
    elif w.endswith("ies") and len(w) > 4:
        w = w[:-3] + "y"
    elif w.endswith(("ches", "shes", "xes", "zzes")):
        w = w[:-2]
    elif w.endswith("s") and not w.endswith(("ss", "us", "is")) and len(w) > 3:
        w = w[:-1]
    # 2. past tense and progressive
    if w.endswith("ied") and len(w) > 4:
        w = w[:-3] + "y"
    elif w.endswith("ed") and not w.endswith("eed") and len(w) > 4 and _has_vowel(w[:-2]):
        w = _undouble(w[:-2])
    elif w.endswith("ing") and len(w) > 5 and _has_vowel(w[:-3]):
        w = _undouble(w[:-3])
    # 3. a few derivational endings that separate nouns from their verbs
    if w.endswith("ment") and len(w) > 6 and w not in _KEEP:
        w = w[:-4]
    elif w.endswith(("tion", "sion")) and len(w) > 7:
        w = w[:-3]
    elif w.endswith("ly") and len(w) > 5:
        w = w[:-2]
    # 4. silent e, so create/created/creating/creation meet at "creat"
    if w.endswith("e") and len(w) > 3:
        w = w[:-1]
    return w


_STEM_CACHE: dict[str, str] = {}
_STEM_CACHE_MAX = 200_000


def stem(word: str) -> str:
    """Crude stem of a lowercase word: ``"deployments"`` -> ``"deploy"``, ``"created"`` -> ``"creat"``.

    A small, deterministic suffix stripper (plural, past tense, -ing, -ment, -tion, -ly, silent e). It is
    not a linguistic stemmer; it only has to map the forms of a word that tool descriptions and queries use
    onto one term, identically on both sides.
    """
    cached = _STEM_CACHE.get(word)
    if cached is None:
        cached = _stem(word)
        if len(_STEM_CACHE) < _STEM_CACHE_MAX:
            _STEM_CACHE[word] = cached
    return cached


_RUN = re.compile(r"[^\W_]+")
_PHRASE_HEADS = frozenset(head for head, _ in _PHRASES)
_PHRASE_TERMS: dict[tuple[str, str], tuple[str, ...]] = {
    pair: tuple(stem(word) for word in words) for pair, words in _PHRASES.items()
}

# One entry per distinct alphanumeric run: its finished terms, and its lowercase form when it can start
# a phrasal verb. Tokenising a text is then one findall plus a dictionary lookup per run.
_WordInfo = tuple[tuple[str, ...], str | None]
_WORD_CACHE: dict[str, _WordInfo] = {}
_WORD_CACHE_MAX = 200_000


def _terms_of(word: str) -> tuple[str, ...]:
    if len(word) < 2 or word in STOP_WORDS:
        return ()
    expanded = _ABBREVIATIONS.get(word)
    if expanded is None:
        return (stem(word),)
    return tuple(stem(part) for part in expanded)


def _analyse(run: str) -> _WordInfo:
    parts = _CAMEL.sub(" ", _ACRONYM_PLURAL.sub(r"\1S", run)).lower().split()
    terms: list[str] = []
    i, n = 0, len(parts)
    while i < n:
        part = parts[i]
        i += 1
        if i < n:
            phrase = _PHRASE_TERMS.get((part, parts[i]))
            if phrase is not None:
                terms.extend(phrase)
                i += 1
                continue
        terms.extend(_terms_of(part))
    head = parts[0] if n == 1 and parts[0] in _PHRASE_HEADS else None
    info = (tuple(terms), head)
    if len(_WORD_CACHE) < _WORD_CACHE_MAX:
        _WORD_CACHE[run] = info
    return info


def tokenize(text: str) -> list[str]:
    """Split ``text`` into search terms (lowercased, stop words dropped, abbreviations expanded, stemmed)."""
    out: list[str] = []
    runs: list[str] = _RUN.findall(text)
    cache = _WORD_CACHE
    i, n = 0, len(runs)
    while i < n:
        run = runs[i]
        i += 1
        info = cache.get(run)
        if info is None:
            info = _analyse(run)
        head = info[1]
        if head is not None and i < n:
            phrase = _PHRASE_TERMS.get((head, runs[i].lower()))
            if phrase is not None:
                out.extend(phrase)
                i += 1
                continue
        out.extend(info[0])
    return out


def clear_caches() -> None:
    """Forget memoised stems and word analyses (for cold-start measurements and tests)."""
    _STEM_CACHE.clear()
    _WORD_CACHE.clear()
