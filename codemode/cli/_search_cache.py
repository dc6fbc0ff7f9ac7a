"""``codemode search`` from its cached index, without validating codemode.toml again.

The cached index (:class:`codemode.search.CachedSearch`) is keyed by what a search depends on: the
lock's bytes, the configured servers, the principal's policy and the ranker. Reading those from a
:class:`~codemode.config.Config` means importing pydantic and building every config model, about
100 ms of a fresh process that otherwise answers in well under that.

So the facts a search takes from the config (the lock's path, ``[search] semantic``, the server
names, the principal's rules, where the ledger of saved skills is) are kept in a small *memo*,
keyed by the config file's real path and exact bytes (and the principal, the source of the code
that reads it and the pydantic install that validates it). The same bytes validate to the same
config, so a memo stands for a validation that already passed. It is only a shortcut to the
index's key: the lock is still read and hashed into that key on every search, so a change of pins
still names another entry. A memo is sealed with its sha256 and ignored (then rewritten) when
damaged, when another user could have written it, or when the policy file it names has changed
(or changed while it was validated); any miss falls back to loading the config, which reports
errors as before.

How an index is built from a loaded config is the caller's (``codemode search`` passes its
builder in): this module only finds, files and reads cached ones.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import marshal
import os
from dataclasses import astuple, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from collections.abc import Callable

    from codemode.config import Config
    from codemode.search import CachedSearch, Embedder, SemanticSetting

    BuildSearch = Callable[[Config, str | None, SemanticSetting, Embedder | None], CachedSearch]
    """Builds the index of what a principal may use from a loaded config, with the ranker given."""

__all__ = [
    "ConfigFacts",
    "cached_search",
    "config_file",
    "included_policy",
    "may_hold_skills",
    "ranking_for",
]

_FORMAT = "codemode-search-config-2"
_SETTINGS = ("auto", "on", "off", "wordllama", "e5")
# Mirrors codemode.config._load (DEFAULT_CONFIG_NAME, CONFIG_ENV_VAR): importing that package builds
# every config model, which is what this module avoids. tests/search/test_search_memo.py pins them.
_CONFIG_ENV_VAR = "CODEMODE_CONFIG"
_ANY_SKILL = "SELECT 1 FROM skills LIMIT 1"
"""Mirrors the ledger's table of saved skills (``codemode.ledger``), for the same reason."""
_DEFAULT_CONFIG_NAME = "codemode.toml"
# The folder of the codemode package, whose config and stubs source is part of the cache keys: found
# from this file, since importing those packages to ask them is the cost this module avoids.
_PACKAGE = Path(__file__).parents[1]


def config_file(explicit: Path | None) -> Path:
    """``codemode.config.default_config_path(explicit)``: ``explicit``, ``$CODEMODE_CONFIG`` or
    ``./codemode.toml``."""
    if explicit is not None:
        return Path(explicit)
    env = os.environ.get(_CONFIG_ENV_VAR)
    return Path(env) if env else Path(_DEFAULT_CONFIG_NAME)


def ranking_for(choice: SemanticSetting) -> tuple[SemanticSetting, Embedder | None]:
    """``[search] semantic`` as the engine reads it (same function, same override) and the model to
    rank with: None for BM25 alone, and then, if the signal was asked for, the engine's warning."""
    from codemode.search import missing_model, semantic_ranking

    setting, embedder = semantic_ranking(choice)
    warning = missing_model(setting) if embedder is None else None
    if warning is not None:
        from codemode.cli._common import warn

        warn(warning)
    return setting, embedder


@dataclass(frozen=True, slots=True)
class ConfigFacts:
    """What a cached search takes from a validated codemode.toml (plain strings: see :meth:`dumps`)."""

    lock_path: str
    semantic: str
    """``[search] semantic`` as written (the environment's override is applied when it is read)."""
    servers: str
    """The configured server names, sorted, as JSON."""
    rules: str | None
    """The principal's rules as JSON, ``"refused"`` if it has none, None when no principal is given."""
    policy_file: str | None = None
    """The ``[policy] file`` the config includes, and the sha256 of its bytes when validated."""
    policy_digest: str | None = None
    ledger: str | None = None
    """The SQLite ledger's path, whose absence means no skill was ever saved; None for a database
    URL (never kept here: it may hold a password), so the ledger is always consulted then."""

    @classmethod
    def of(cls, config: Config, principal: str | None, policy: tuple[str, str] | None = None) -> ConfigFacts:
        """The facts of ``config``; ``policy`` is the policy file it includes and the sha256 of the
        bytes that ``config`` was validated from (see :func:`included_policy`)."""
        rules = None
        if principal is not None:
            found = config.policy.principal(principal)
            rules = found.model_dump_json() if found is not None else "refused"
        policy_file, policy_digest = policy if policy is not None else (None, None)
        ledger = config.ledger_location()
        return cls(
            str(config.lock_path),
            config.search.semantic,
            json.dumps(sorted(config.servers)),
            rules,
            policy_file,
            policy_digest,
            os.path.abspath(ledger) if isinstance(ledger, Path) else None,  # the memo outlives the cwd
        )

    def may_hold_skills(self) -> bool:
        """Whether the ledger may hold saved skills: False only when its SQLite file does not
        exist, or opens and has no skill at all (read-only, with sqlite3 alone: no ledger code is
        loaded for it). Anything else (a database URL, a busy or odd file) says it may."""
        if self.ledger is None:
            return True
        if not os.path.lexists(self.ledger):
            return False
        import sqlite3

        try:
            uri = Path(self.ledger).resolve().as_uri() + "?mode=ro"
            with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=1)) as db:
                return db.execute(_ANY_SKILL).fetchone() is not None
        except sqlite3.OperationalError as exc:
            return "no such table" not in str(exc)  # an older ledger holds no skill; else look properly
        except (sqlite3.Error, OSError, ValueError):
            return True

    @property
    def choice(self) -> SemanticSetting:
        return cast("SemanticSetting", self.semantic)

    def parts(self, embedder: Embedder | None, principal: str | None) -> list[bytes | str] | None:
        """What the cached index depends on, or None when it cannot be cached (no lock).

        The ranker is part of it: BM25, or hybrid with the model's id (its files' identity), so turning
        the setting on or off, or another model, names another entry.
        """
        if principal is not None and self.rules is None:
            return None  # not written by :meth:`of` for this principal: never the index of everyone
        try:
            lock = Path(self.lock_path).read_bytes()
        except OSError:
            return None
        ranker = "bm25" if embedder is None else f"hybrid:{embedder.model_id}"
        parts: list[bytes | str] = [ranker, lock, self.servers]
        if principal is not None and self.rules is not None:
            parts += [principal, self.rules]
        return parts

    def policy_unchanged(self) -> bool:
        if self.policy_file is None:
            return True
        try:
            return hashlib.sha256(Path(self.policy_file).read_bytes()).hexdigest() == self.policy_digest
        except OSError:
            return False

    def dumps(self) -> bytes:
        return marshal.dumps((_FORMAT, *astuple(self)))

    @classmethod
    def loads(cls, data: bytes | memoryview) -> ConfigFacts | None:
        """The facts :meth:`dumps` wrote, or None for anything else."""
        try:
            loaded = marshal.loads(data)  # noqa: S302 - a sealed file only this user could write
        except (EOFError, TypeError, ValueError, SystemError):  # marshal's errors for bad data
            return None
        if not isinstance(loaded, tuple) or len(loaded) != 8 or loaded[0] != _FORMAT:  # pyright: ignore[reportUnknownArgumentType]
            return None
        fields = cast("tuple[object, ...]", loaded)[1:]
        lock_path, semantic, servers, rules, policy_file, policy_digest, ledger = fields
        if not (isinstance(lock_path, str) and isinstance(servers, str) and semantic in _SETTINGS):
            return None
        optional = (rules, policy_file, policy_digest, ledger)
        if not all(value is None or isinstance(value, str) for value in optional):
            return None
        if (policy_file is None) != (policy_digest is None):
            return None
        return cls(lock_path, str(semantic), servers, *cast("tuple[str | None, ...]", fields[3:]))


def included_policy(source: bytes, base_dir: Path) -> tuple[str, str | None] | None:
    """The file ``[policy] file = "..."`` names in ``source`` (as load_config resolves it) and the
    sha256 of its bytes now (None when it cannot be read), or None when ``source`` includes none."""
    import tomllib  # here: only a search that loads the config gets this far

    try:
        data = tomllib.loads(source.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    policy = data.get("policy")
    name = cast("dict[str, object]", policy).get("file") if isinstance(policy, dict) else None
    if not isinstance(name, str):
        return None
    included = base_dir / name
    try:
        return str(included), hashlib.sha256(included.read_bytes()).hexdigest()
    except OSError:
        return str(included), None


def _memo_path(config_path: Path, source: bytes, principal: str | None) -> Path:
    from codemode.search import cache_dir, cache_key

    parts: list[bytes | str] = [_FORMAT, os.path.realpath(config_path), source]
    parts += ["principal", principal] if principal is not None else ["everyone"]
    # The code that validates the config and derives the facts is part of the key: a memo written
    # by another version of it, or of the validator under it, is never read.
    parts.append(_installed("pydantic", "pydantic_core"))
    key = cache_key(parts, [_PACKAGE / "config", Path(__file__).parent])
    return cache_dir() / "config" / f"{key}.bin"


def _installed(*packages: str) -> str:
    """Which install of ``packages`` is in use, without importing them (about 0.2 ms): each one's
    folder, inode and change time, which an upgrade or a reinstall changes."""
    import importlib.util

    seen: list[str] = []
    for name in packages:
        spec = importlib.util.find_spec(name)
        folders = spec.submodule_search_locations if spec is not None else None
        if not folders:
            seen.append(f"{name}:missing")
            continue
        folder = next(iter(folders))
        try:
            info = os.stat(folder)
        except OSError:
            seen.append(f"{name}:unreadable")
            continue
        seen.append(f"{name}:{folder}:{info.st_ino}:{info.st_mtime_ns}")
    return "\n".join(seen)


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def may_hold_skills(explicit: Path | None, principal: str | None) -> bool:
    """Whether a search may have saved skills to show, from the config memo alone: False only when
    the memo is sound and names a SQLite ledger that does not exist (no skill was ever saved), so
    such a search answers from the cached index without loading the config or the ledger. Skills
    are never in the cached index: they are a tenant's, changed by every approval or revocation."""
    path = config_file(explicit)
    source = _read(path)
    if source is None:
        return True  # no memo to go by: the caller loads the config and looks
    from codemode.search import read_sealed

    payload = read_sealed(_memo_path(path, source, principal))
    facts = ConfigFacts.loads(payload) if payload is not None else None
    return facts is None or not facts.policy_unchanged() or facts.may_hold_skills()


def cached_search(
    explicit: Path | None,
    principal: str | None,
    build: BuildSearch,
    *,
    load: Callable[[Path | None], Config] | None = None,
) -> CachedSearch:
    """The index of what ``principal`` may use: from the cache, through the config memo, when the
    config, the lock, the policy and the ranker are unchanged; else made by ``build`` (from the lock:
    a hybrid one embeds only tools its vector cache lacks) after loading the config with ``load``
    (default: :func:`codemode.cli._common.load`; the caller may keep what it loaded)."""
    from codemode.search import CachedSearch, cache_key, read_sealed, write_sealed

    stubs = [_PACKAGE / "stubs"]
    path = config_file(explicit)
    source = _read(path)
    memo = _memo_path(path, source, principal) if source is not None else None
    ranked: tuple[SemanticSetting, Embedder | None] | None = None
    payload = read_sealed(memo) if memo is not None else None
    facts = ConfigFacts.loads(payload) if payload is not None else None
    if facts is not None and facts.policy_unchanged():
        ranked = ranking_for(facts.choice)
        parts = facts.parts(ranked[1], principal)
        found = CachedSearch.load(cache_key(parts, stubs), embedder=ranked[1]) if parts is not None else None
        if found is not None:
            return found
    if load is None:
        from codemode.cli._common import load

    # The policy file is hashed before and after loading: only when both agree (and it could be read)
    # do the rules that load_config validated belong to that hash. A policy edited while loading
    # would otherwise file the old rules under the new file's hash, and they would stand until the
    # next edit.
    before = included_policy(source, path.resolve().parent) if source is not None else None
    config = load(explicit)
    after = included_policy(source, config.base_dir) if source is not None else None
    policy = (after[0], after[1]) if after is not None and after[1] is not None else None
    validated = ConfigFacts.of(config, principal, policy)
    policy_settled = before == after and (after is None or policy is not None)
    # Filed under the bytes read before loading only if the file still holds them (not edited since);
    # not rewritten when it says the same (a workspace without a lock never hits the index cache).
    if memo is not None and policy_settled and validated != facts and _read(path) == source:
        write_sealed(memo, validated.dumps())
    if ranked is None or facts is None or facts.semantic != validated.semantic:
        ranked = ranking_for(config.search.semantic)
    setting, embedder = ranked
    parts = validated.parts(embedder, principal)
    key = cache_key(parts, stubs) if parts is not None else None
    if key is not None:
        found = CachedSearch.load(key, embedder=embedder)
        if found is not None:
            return found
    built = build(config, principal, setting, embedder)
    # Never filed under another ranker; a cache that cannot be written makes every search slow, so
    # the person is told once per search instead of finding out from the clock.
    if key is not None and built.index.hybrid == (embedder is not None) and not built.save(key):
        from codemode.cli._common import warn
        from codemode.search import cache_dir

        warn(
            f"the search cache could not be written to {cache_dir()} (a full or read-only disk, or a "
            "folder that someone else owns or can write); every search builds its index again",
            hint="set CODEMODE_CACHE_DIR to a folder of your own",
        )
    return built
