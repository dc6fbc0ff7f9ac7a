"""Servers that are down: the warning when the engine starts, and what a failed import learns.

A server that did not start (a command that is not installed, a crash, a missing module, no
answer within ``connect_timeout``) has no stubs, so a program that imports it would learn only
``No module named 'servers.time'``. The engine says which servers are down as it starts (a
warning on the ``codemode`` logger: ``codemode run`` and ``codemode batch`` print it,
``codemode serve`` logs it), and a run that failed importing one gets the reason in its error,
where the caller (a person, or the agent behind ``codemode serve``) looks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple

from codemode.broker import RunOutput
from codemode.calls import ModuleProvider, ModuleSource
from codemode.catalog import Pins, ServerCatalog, ToolStatus
from codemode.host import ConnectionState, ServerStatus
from codemode.sandbox import RunOutcome
from codemode.stubs import NameKind, assign_identifiers

IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError", "AttributeError"})
"""What a program raises when a stub it asked for is missing (``servers.time.x`` through the
package's ``__getattr__`` is an AttributeError)."""


class ServerDown(NamedTuple):
    """A configured server that cannot be used, and why (one line)."""

    server: str
    reason: str

    def notice(self) -> str:
        """The warning the engine gives as it starts."""
        stop = "" if self.reason.endswith((".", "?", "!")) else "."
        return (
            f'server "{self.server}" did not start: {self.reason}{stop} Its tools are not available '
            "until it does; 'codemode servers' shows more."
        )


def servers_down(statuses: Iterable[ServerStatus]) -> list[ServerDown]:
    """The servers among ``statuses`` that are down, with why (disabled ones are not down)."""
    return [ServerDown(s.name, failure) for s in statuses if (failure := s.failure()) is not None]


class ImportRecorder:
    """A run's stub modules (a ``ModuleProvider``) that notes every module the program asked
    for and did not get, so that a failed import can be told why."""

    def __init__(self, modules: ModuleProvider) -> None:
        self._modules = modules
        self.missed: set[str] = set()

    def module_source(self, module: str) -> ModuleSource | None:
        found = self._modules.module_source(module)
        if found is None:
            self.missed.add(module)
        return found


def unavailable_servers(
    statuses: Iterable[ServerStatus], may_see: Callable[[str], bool], waiting: Mapping[str, int] | None = None
) -> dict[str, str]:
    """Per module name (``servers.<identifier>``), why that configured server has no stubs: it is
    down, disabled, or (``waiting``: server → tools awaiting review, for servers with none
    approved) not reviewed yet. Only servers the run's principal may see (``may_see``): another
    principal's server is never named, nor its address or error told."""
    waiting = waiting or {}
    listed = list(statuses)
    # The identifiers the stub tree gives these servers when they are up (config names may hold
    # '-' or '.'; the tree's mapping is the one place that turns them into module names).
    identifiers = assign_identifiers([s.name for s in listed], NameKind.SERVER, where="configured servers")
    found: dict[str, str] = {}
    for status in listed:
        if not may_see(status.name):
            continue
        if status.state is ConnectionState.DISABLED:
            why = f'server "{status.name}" is disabled in the configuration (enabled = false)'
        elif (failure := status.failure()) is not None:
            why = f'server "{status.name}" is down: {failure}'
        elif waiting.get(status.name):
            count = waiting[status.name]
            why = (
                f'server "{status.name}" has no approved tools yet ({count} wait for review: '
                f"'codemode pin' shows them, 'codemode pin --approve {status.name}' approves them)"
            )
        else:
            continue
        found[f"servers.{identifiers[status.name]}"] = why
    return found


def explain_import_error(
    error_type: str, message: str, missed: Iterable[str], unavailable: Callable[[], Mapping[str, str]]
) -> str:
    """``message`` of a program's error, with why the servers it failed to import are not there
    (in codemode's words, set apart), or unchanged when that is not why it failed.
    ``unavailable`` (see :func:`unavailable_servers`) is asked only then."""
    asked = sorted({".".join(module.split(".")[:2]) for module in missed if module.startswith("servers.")})
    if error_type not in IMPORT_ERRORS or not asked:
        return message
    why = unavailable()
    notes = [why[module] for module in asked if module in why]
    if not notes:
        return message
    return f"{message} [codemode: {'; '.join(notes)}]"


def run_output(
    outcome: RunOutcome, missed: Iterable[str], unavailable: Callable[[], Mapping[str, str]]
) -> RunOutput:
    """What a run returns, for the final filter: a failed import of a server that is down says
    why (before the filter, like everything the run returns)."""
    error = outcome.error
    message = None if error is None else explain_import_error(error.type, error.message, missed, unavailable)
    return RunOutput(
        value=outcome.final,
        stdout=outcome.stdout,
        stderr=outcome.stderr,
        error_message=message,
        error_traceback=None if error is None else error.traceback,
    )


def pin_drift(catalogs: Iterable[ServerCatalog], pins: Pins) -> list[str]:
    """Tools whose live definition differs from its approved pin, or that the server no longer
    lists, as ``server/tool (changed)`` / ``(removed)``."""
    found: list[str] = []
    for catalog in catalogs:
        listed = {tool.name for tool in catalog.tools}
        changed = [t.name for t in catalog.tools if pins.status(t) is ToolStatus.CHANGED]
        pinned = pins.lock.servers.get(catalog.server, {})
        removed = [name for name, entry in pinned.items() if entry.approved and name not in listed]
        found += [f"{catalog.server}/{name} (changed)" for name in changed]
        found += [f"{catalog.server}/{name} (removed)" for name in removed]
    return found


def waiting_for_review(catalogs: Iterable[ServerCatalog], pins: Pins) -> dict[str, int]:
    """Servers none of whose listed tools is approved yet, with how many tools wait for review."""
    return {
        catalog.server: len(catalog.tools)
        for catalog in catalogs
        if catalog.tools and not any(pins.status(t) is ToolStatus.APPROVED for t in catalog.tools)
    }
