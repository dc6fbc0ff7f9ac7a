"""The import hook: ``servers``, ``skills`` and their modules come from the host, on demand.

Only what a program imports ever travels, and the host answers only what the run's principal may
see.
"""

from __future__ import annotations

import difflib
import importlib.abc
import importlib.machinery
import importlib.util
import linecache
import sys
import types
from collections.abc import Sequence
from typing import Any, cast

from . import _client
from . import _wire as wire
from ._fresh import remember
from ._values import CallFailed


class HostLoader(importlib.abc.Loader):
    def __init__(self, fullname: str, source: str, filename: str) -> None:
        self._fullname = fullname
        self._source = source
        self._filename = filename

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        lines = self._source.splitlines(keepends=True)
        linecache.cache[self._filename] = (len(self._source), None, lines, self._filename)
        module.__file__ = self._filename
        code = compile(self._source, self._filename, "exec", dont_inherit=True)
        exec(code, module.__dict__)  # noqa: S102 - a stub module served by the host
        remember(module)

    def get_source(self, fullname: str) -> str:
        return self._source


def _no_such_name(fullname: str) -> None:
    """``from servers.crm import nope`` (or ``from servers import nope``, ``from skills import
    nope``): say which tools the server has (or which servers or skills there are), and the
    closest names.

    A ModuleNotFoundError, as for any missing module, but named after the *package*: the import
    system then does not swallow it into its own "cannot import name" message (it hides only
    errors that name the submodule it tried). The packages' ``__getattr__`` turns it into the
    AttributeError of ``servers.crm.nope``, so both forms say the same.
    """
    parent, _, name = fullname.rpartition(".")
    depth = parent.count(".")
    package = sys.modules.get(parent) if depth <= 1 else None  # servers, or servers.<server>
    names = getattr(package, "__all__", None)
    if not isinstance(names, list) or name.startswith("_"):
        return
    kind, label = ("tool", "Its tools") if depth == 1 else ("server", "Servers")
    if parent == "skills":
        kind, label = "skill", "Skills"
    known = [str(item) for item in names]  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
    close = difflib.get_close_matches(name, known, n=3)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    listing = ", ".join(known[:50]) + (f" … ({len(known)} in all)" if len(known) > 50 else "")
    raise ModuleNotFoundError(
        f"{parent} has no {kind} {name!r}.{hint} {label}: {listing or '(none you may use)'}.",
        name=parent,
    )


def fetch(fullname: str) -> tuple[str, bool] | None:
    """Ask the host for the module ``fullname``: ``(source, is_package)``, or None when it has none
    (raising the listing of a server's tools for ``servers.<server>.<name>``)."""
    try:
        params: wire.ImportParams = {"module": fullname}
        reply = _client.request(wire.IMPORT, params)
    except (_client.RemoteError, CallFailed) as exc:
        raise ImportError(f"cannot import {fullname}: {exc}", name=fullname) from None
    answer = cast(dict[str, Any], reply) if isinstance(reply, dict) else {}
    if not answer.get("found"):
        _no_such_name(fullname)
        return None
    source = answer.get("source")
    if not isinstance(source, str):
        return None
    return source, bool(answer.get("is_package"))


def filename_for(fullname: str, is_package: bool) -> str:
    """The file name a stub module shows in tracebacks (``servers/crm/__init__.py`` …)."""
    return "/".join(fullname.split(".")) + ("/__init__.py" if is_package else ".py")


_HOST_PACKAGES = ("servers", "skills")


class ServersFinder(importlib.abc.MetaPathFinder):
    """Asks the host for ``servers`` (tool stubs) and ``skills`` (saved skills) modules; the host
    answers only what the run's principal and tenant may see."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".")[0] not in _HOST_PACKAGES:
            return None
        found = fetch(fullname)
        if found is None:
            return None
        source, is_package = found
        filename = filename_for(fullname, is_package)
        loader = HostLoader(fullname, source, filename)
        spec = importlib.util.spec_from_loader(fullname, loader, origin=filename, is_package=is_package)
        if spec is not None:
            spec.has_location = True
        return spec
