"""The one mapping from MCP names to Python identifiers.

Server names, tool names, parameter (JSON property) names, resource, resource-template
variable, prompt and prompt-argument names all become identifiers by the same rules. The
mapping is applied to all the names of one *namespace* at once (the servers of a tree, the
tools of a server, the parameters of a tool, ...) and is injective within it.

Rules, in order (``base`` identifier of one name):

1. NFKC-normalise the name (so ``ﬁle`` and ``file`` are one name, as Python itself would treat
   them in an identifier).
2. Keep ASCII letters, digits and ``_``. A non-ASCII letter or digit is transliterated when its
   NFKD decomposition is ASCII plus combining marks (``é`` -> ``e``), otherwise escaped as
   ``u<hex>``, set apart by ``_`` (``名前`` -> ``u540d_u524d``). Every other character (``-``,
   ``.``, ``/``, spaces, symbols, ...) is a separator; a run of separators becomes one ``_``.
3. Leading underscores are removed. Generated names therefore never start with ``_``: that
   keeps dunders (``__init__`` -> ``init__``, ``__import__`` -> ``import__``) and "private"
   names out, and leaves the whole ``_`` prefix to the tree itself (``_resources``,
   ``_prompts``, ``_idempotency_key``, ``_arguments``, ``_t``, ``_rt``) so nothing can collide
   with it.
4. An empty result becomes ``unnamed``; a leading digit gets the prefix ``n_`` (``1st`` ->
   ``n_1st``).
5. Reserved words get a trailing ``_`` (repeatedly, until free): Python keywords for every
   kind; for names that become module-level definitions or files (servers, tools, resources,
   prompts) also builtins (a tool function named ``list`` would shadow the ``list`` used in
   its own annotations), ``annotations`` (bound by ``from __future__ import annotations``) and
   the Windows device names (``con``, ``nul``, ``com1`` ...; case-insensitive) so an exported
   tree can be copied anywhere. Soft keywords (``match``, ``case``, ``type``) are ordinary
   identifiers in every position used here, so they stay (``type`` is a builtin, though).
6. Longer than 64 characters: cut to 55 and add ``_`` plus 8 hex digits of the SHA-256 of the
   original name.

Collisions. Two names collide when their base identifiers are equal *ignoring ASCII case* (an
exported tree may land on a case-insensitive filesystem, where ``getUser.py`` and
``getuser.py`` are one file). In a colliding group, the one name that already *is* its
identifier (``a_b`` among ``a-b`` / ``a.b`` / ``a_b``) keeps it; every other member gets
``_`` plus 8 hex digits of the SHA-256 of its original name (``a-b`` -> ``a_b_3c5e...``).
So the identifier of a name depends only on the name and on whether it collides, never on
listing order. If the suffixed identifiers still collide (only a hostile catalog manages
that), :func:`assign_identifiers` raises :class:`~codemode.errors.NameCollisionError` naming
both originals, and :func:`identifiers_apart` leaves every such name out: names are never merged
silently.

Standard-library names (``json``, ``typing``, ``os``) are allowed for tools and servers: the
modules live under the ``servers`` package and are only ever imported by absolute dotted name
(``servers.crm.json``), so they cannot shadow the standard library; only the top-level names
``servers`` and ``codemode_runtime`` are importable from the tree root.
"""

from __future__ import annotations

import builtins
import hashlib
import keyword
import unicodedata
from collections.abc import Iterable
from enum import Enum
from typing import Final

from codemode.errors import NameCollisionError

__all__ = [
    "KEYWORDS",
    "MODULE_LEVEL_RESERVED",
    "NameKind",
    "assign_identifiers",
    "base_identifier",
    "pascal_case",
]

MAX_IDENTIFIER: Final = 64
_HASH_DIGITS: Final = 8

KEYWORDS: Final = frozenset(keyword.kwlist)
MODULE_LEVEL_RESERVED: Final = KEYWORDS | frozenset(dir(builtins)) | {"annotations"}
_WINDOWS_DEVICES: Final = frozenset(
    ["con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)), *(f"lpt{i}" for i in range(10))]
)


class NameKind(Enum):
    """What a name becomes; decides which words are reserved (rule 5)."""

    SERVER = "server"
    TOOL = "tool"
    RESOURCE = "resource"
    PROMPT = "prompt"
    PARAMETER = "parameter"

    @property
    def module_level(self) -> bool:
        return self is not NameKind.PARAMETER


def _hash_suffix(original: str) -> str:
    digest = hashlib.sha256(original.encode("utf-8", "surrogatepass")).hexdigest()
    return digest[:_HASH_DIGITS]


def _transliterate(char: str) -> tuple[str, bool] | None:
    """``(ascii text, is_escape)`` for a non-ASCII letter or digit; None if it is a separator."""
    if not unicodedata.category(char).startswith(("L", "N")):
        return None
    decomposed = "".join(c for c in unicodedata.normalize("NFKD", char) if not unicodedata.combining(c))
    if decomposed and decomposed.isascii() and decomposed.isalnum():
        return decomposed, False
    return f"u{ord(char):04x}", True


def _is_reserved(ident: str, kind: NameKind) -> bool:
    if ident in KEYWORDS:
        return True
    return kind.module_level and (ident in MODULE_LEVEL_RESERVED or ident.lower() in _WINDOWS_DEVICES)


def base_identifier(name: str, kind: NameKind) -> str:
    """Rules 1-6 for one name (without collision handling)."""
    parts: list[str] = []
    separator = False  # a separator was seen since the last piece
    after_escape = False  # the last piece was a u<hex> escape
    for char in unicodedata.normalize("NFKC", name):
        if char.isascii():
            mapped = (char, False) if char.isalnum() or char == "_" else None
        else:
            mapped = _transliterate(char)
        if mapped is None:
            separator = True
            continue
        piece, escape = mapped
        if (separator or escape or after_escape) and parts and parts[-1] != "_":
            parts.append("_")  # escapes are set apart: "名前" -> "u540d_u524d"
        parts.append(piece)
        separator, after_escape = False, escape
    if separator and parts and parts[-1] != "_":
        parts.append("_")
    ident = "".join(parts).lstrip("_")
    if not ident:
        ident = "unnamed"
    if ident[0].isdigit():
        ident = "n_" + ident
    while _is_reserved(ident, kind):
        ident += "_"
    if len(ident) > MAX_IDENTIFIER:
        ident = _with_suffix(ident, name)
    return ident


def _with_suffix(ident: str, original: str) -> str:
    keep = MAX_IDENTIFIER - _HASH_DIGITS - 1
    return ident[:keep].rstrip("_") + "_" + _hash_suffix(original)


def assign_identifiers(names: Iterable[str], kind: NameKind, *, where: str) -> dict[str, str]:
    """Map every name of one namespace to its identifier (see the module docstring).

    ``where`` names the namespace in error messages (e.g. ``"tools of server 'crm'"``).
    Duplicate names are an error: a namespace lists each name once.
    """
    result, clashes = _identifiers(names, kind, where)
    if clashes:
        other, name = clashes[0]
        raise NameCollisionError(
            f"{_clash(where, other, name, result[name])} (even after disambiguation); "
            "rename one of them on the server"
        )
    return result


def _clash(where: str, other: str, name: str, ident: str) -> str:
    return f"{where}: {other!r} and {name!r} both map to the Python name {ident!r}"


def identifiers_apart(
    names: Iterable[str], kind: NameKind, *, where: str
) -> tuple[dict[str, str], dict[str, str]]:
    """``(identifiers, left out)``: like :func:`assign_identifiers`, but a name that cannot be
    told apart from another (listed twice, or clashing after disambiguation) is left out with
    the reason, with every name it clashes with, instead of failing the whole namespace: one
    hostile tool list must not take its server's other tools, or other servers, down with it."""
    originals = list(names)
    counts: dict[str, int] = {}
    for name in originals:
        counts[name] = counts.get(name, 0) + 1
    left_out = {name: f"{where}: the name {name!r} is listed twice" for name, n in counts.items() if n > 1}
    result, clashes = _identifiers((name for name in counts if name not in left_out), kind, where)
    for other, name in clashes:
        left_out[other] = left_out[name] = _clash(where, other, name, result[name])
    return {name: ident for name, ident in result.items() if name not in left_out}, left_out


def _identifiers(
    names: Iterable[str], kind: NameKind, where: str
) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """Every name's identifier, and the pairs of names whose identifiers are still equal."""
    originals: list[str] = []
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise NameCollisionError(f"{where}: the name {name!r} is listed twice")
        seen.add(name)
        originals.append(name)

    base = {name: base_identifier(name, kind) for name in originals}
    groups: dict[str, list[str]] = {}
    for name in originals:
        groups.setdefault(base[name].lower(), []).append(name)

    result: dict[str, str] = {}
    for members in groups.values():
        if len(members) == 1:
            result[members[0]] = base[members[0]]
            continue
        exact = [name for name in members if name == base[name]]
        keeper = exact[0] if len(exact) == 1 else None
        for name in members:
            result[name] = base[name] if name == keeper else _with_suffix(base[name], name)

    owners: dict[str, str] = {}
    clashes: list[tuple[str, str]] = []
    for name in originals:
        key = result[name].lower()
        other = owners.get(key)
        if other is not None:
            clashes.append((other, name))
        else:
            owners[key] = name
    return result, clashes


def pascal_case(ident: str) -> str:
    """``get_customer`` -> ``GetCustomer`` (for generated TypedDict names)."""
    return "".join(part[:1].upper() + part[1:] for part in ident.split("_") if part) or "Unnamed"
