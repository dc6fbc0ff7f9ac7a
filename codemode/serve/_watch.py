"""``codemode serve`` follows its config file: servers' ``roots`` apply at once, the rest at restart.

While serve runs, the config file is looked at every :data:`CONFIG_POLL_INTERVAL_S` seconds, the
way the pins notice approvals made beside a running serve: the file's identity (inode, size,
modification time; one ``stat``), then its bytes. When it changed:

* a server's ``roots`` that differ from the ones it is offered now are offered from now on, and
  the server is sent ``notifications/roots/list_changed`` where the protocol allows (see
  :meth:`codemode.CodeMode.update_roots`): its next ``roots/list`` gets the new list;
* any other change is not applied (the policy, servers, tokens … stay as serve started with
  them), and the log says so: ``config changed; only roots are applied without a restart``;
* a file that does not load (bad TOML, a value that does not validate) is reported in the log
  and ignored: the running config stays, and the next valid version is compared as usual.

Roots are hints to the server: the policy's path scopes stay the enforcement.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from codemode.catalog import file_identity
from codemode.config import Config, load_config
from codemode.errors import ConfigError

if TYPE_CHECKING:
    from codemode.engine import CodeMode

log = logging.getLogger("codemode.serve")

CONFIG_POLL_INTERVAL_S = 1.0
ONLY_ROOTS = "config changed; only roots are applied without a restart"


class ConfigWatch:
    """Applies the roots of a changed config file to a running engine (one :meth:`check` a look)."""

    def __init__(self, engine: CodeMode, config: Config, path: Path) -> None:
        self._engine = engine
        self._path = path
        self._running = config
        self._roots = {name: tuple(server.roots) for name, server in config.enabled_servers().items()}
        """Per connected server, the roots it is offered now."""
        self._seen = file_identity(path)
        self._raw = _read(path)

    @classmethod
    def of(cls, engine: CodeMode, config: Config) -> ConfigWatch | None:
        """The watch of the file ``config`` was loaded from; None when it has no file."""
        path = Path(config.source)
        return cls(engine, config, path) if path.is_file() else None

    async def run(self, interval_s: float = CONFIG_POLL_INTERVAL_S) -> None:
        """Look at the file every ``interval_s`` seconds until cancelled. Never raises otherwise."""
        while True:
            await anyio.sleep(interval_s)
            try:
                await self.check()
            except Exception:  # a watcher's bug must not take serve down
                log.exception("could not apply the changed config file %s", self._path)

    async def check(self) -> None:
        """Apply what changed in the file since the last look, if anything did."""
        seen = file_identity(self._path)
        if seen == self._seen:
            return
        self._seen = seen
        raw = _read(self._path)
        if raw is None or raw == self._raw:
            return  # removed for a moment (an editor's save) or touched: nothing to apply
        self._raw = raw
        try:
            config = await anyio.to_thread.run_sync(load_config, self._path)
        except ConfigError as exc:
            log.warning("config changed but does not load; ignored (the running config stays):\n%s", exc)
            return
        await self.apply(config)

    async def apply(self, config: Config) -> None:
        """Offer each connected server the roots ``config`` gives it; log whatever else differs."""
        for name, offered in self._roots.items():
            server = config.servers.get(name)
            if server is None or not server.enabled or tuple(server.roots) == offered:
                continue
            roots = tuple(server.roots)
            try:
                done = await self._engine.update_roots(name, roots)
            except Exception as exc:
                log.warning("could not offer server %s its new roots: %s", name, exc)
                continue
            self._roots[name] = roots
            if done == "reconnect needed":
                log.warning(
                    "server %s was connected without roots, so it cannot be offered roots on this "
                    "connection; they apply when it reconnects (restart codemode serve)",
                    name,
                )
            elif done != "unchanged":
                told = "sent roots/list_changed" if done == "notified" else "it gets them when it asks"
                log.info("server %s: roots are now %s (%s)", name, list(roots) or "none", told)
        waiting = _changed(
            _apart_from_roots(config, self._roots), _apart_from_roots(self._running, self._roots)
        )
        if waiting:
            log.warning("%s (not applied: %s)", ONLY_ROOTS, ", ".join(waiting))


def _apart_from_roots(config: Config, servers: Iterable[str]) -> dict[str, Any]:
    data = config.model_dump(mode="json")
    for name in servers:
        if name in data["servers"]:
            data["servers"][name]["roots"] = []
    return data


def _changed(new: dict[str, Any], old: dict[str, Any]) -> list[str]:
    """The sections (and servers) that differ: ``policy``, ``servers.crm`` …"""
    servers: tuple[dict[str, Any], dict[str, Any]] = (new.pop("servers"), old.pop("servers"))
    changed = [key for key in sorted(new.keys() | old.keys()) if new.get(key) != old.get(key)]
    names = sorted(servers[0].keys() | servers[1].keys())
    return changed + [f"servers.{n}" for n in names if servers[0].get(n) != servers[1].get(n)]


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None
