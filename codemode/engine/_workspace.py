"""Which workspace a run gets, and keeping what the run left in it.

The sandbox carries the files in and out (:class:`~codemode.sandbox.WorkspaceFiles`,
:attr:`RunOutcome.workspace <codemode.sandbox.RunOutcome.workspace>`); the store keeps them
(:mod:`codemode.workspace`). Here the two meet: a run's workspace is its tenant's, principal's and
session's; what comes back is kept only when the run answered and the store accepts all of it,
and every entry not kept is said in the run's stderr, so the program's author learns why.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable

import anyio

from codemode.broker import FilterReport, PiiVault, ResultFilter
from codemode.calls import RunBinding
from codemode.config import Config, ResultPolicy
from codemode.errors import CodemodeError, ConfigError
from codemode.ledger import Ledger, StoreLedger
from codemode.sandbox import RunOutcome, WorkspaceFiles, WorkspaceQuota
from codemode.workspace import WorkspaceError, WorkspaceKey, WorkspaceStore, open_store

__all__ = ["RunWorkspaces", "shown_names", "workspace_quota"]

log = logging.getLogger("codemode.workspace")

_HEADROOM = 1024 * 1024
"""Room in a channel message for everything of a reply but the workspace and the output caps."""


def workspace_quota(config: Config) -> WorkspaceQuota | None:
    """The quota every sandbox's workspace gets, or None when ``[workspace]`` is disabled.

    A workspace travels in one channel message each way (base64), beside the run's output: a
    quota that cannot fit ``[sandbox] max_frame_bytes`` is refused here, before any run."""
    settings = config.workspace
    if not settings.enabled:
        return None
    sandbox = config.sandbox
    encoded = 4 * math.ceil(settings.quota_bytes / 3)
    needed = encoded + 2 * sandbox.output_bytes + sandbox.result_bytes + _HEADROOM
    if needed > sandbox.max_frame_bytes:
        problem = (
            f"quota_bytes = {settings.quota_bytes} does not fit one channel message: a run's reply "
            f"would need {needed} bytes, and [sandbox] max_frame_bytes is {sandbox.max_frame_bytes}; "
            "lower quota_bytes or raise max_frame_bytes"
        )
        raise ConfigError(config.source, [("workspace", problem)])
    return WorkspaceQuota(bytes=settings.quota_bytes, files=settings.quota_files)


def shown_names(names: Iterable[str], results: ResultPolicy) -> tuple[str, ...]:
    """The workspace file names a run's answer or a resource listing may show: those the run's
    output filter would leave as they are. A name holding a secret or personal data is kept in
    the workspace but never shown, not even as a link."""
    names_filter = ResultFilter(results, PiiVault())
    return tuple(name for name in names if names_filter.text(name, FilterReport()) == name)


class RunWorkspaces:
    """The engine's side of workspaces: load before a run, keep after it, prune now and then."""

    def __init__(self, store: WorkspaceStore, results: ResultPolicy | None = None) -> None:
        self.store = store
        self._results = results or ResultPolicy()

    @classmethod
    def from_config(cls, config: Config, ledger: Ledger | None) -> RunWorkspaces | None:
        """Workspaces under ``[workspace] root``, their metadata in ``ledger``'s ``workspaces``
        table (shared by every replica). None, with a warning, for a ledger that keeps no such
        table (a test's own): runs then get no workspace rather than one only this process knows."""
        if not isinstance(ledger, StoreLedger):
            log.warning("runs get no workspace: this ledger (%s) keeps no workspaces", type(ledger).__name__)
            return None
        return cls(open_store(config, ledger.workspaces), config.policy.results)

    @classmethod
    async def start(cls, config: Config, ledger: Ledger | None) -> RunWorkspaces | None:
        """:meth:`from_config`, with the workspaces past their time to live pruned."""
        workspaces = cls.from_config(config, ledger)
        if workspaces is not None:
            await workspaces.prune()
        return workspaces

    @staticmethod
    def key(binding: RunBinding, session_id: str | None) -> WorkspaceKey:
        return WorkspaceKey(tenant=binding.tenant, principal=binding.principal, session=session_id)

    async def files_for(self, binding: RunBinding, session_id: str | None) -> WorkspaceFiles:
        key = self.key(binding, session_id)
        files = await anyio.to_thread.run_sync(self.store.load, key)
        quota = self.store.quota
        return WorkspaceFiles(files, quota.bytes, quota.files)

    async def keep(
        self, program: WorkspaceFiles, binding: RunBinding, session_id: str | None, outcome: RunOutcome
    ) -> tuple[RunOutcome, tuple[str, ...]]:
        """Keep what ``outcome``'s workspace holds (``program``'s workspace is what it started
        from). Returns the outcome with a note of what was not kept, and the files the run
        created or changed, when they were kept."""
        returned = outcome.workspace
        written: tuple[str, ...] = ()
        if returned is None:
            return outcome, written  # the sandbox never answered (a timeout, a crash): nothing changes
        notes: list[str] = []
        for name, what in sorted(returned.refused.items()):
            notes.append(f"codemode: workspace: {name!r} was not kept: it is {what}")
        if returned.error is not None:
            notes.append(
                "codemode: workspace: nothing this run wrote was kept (the workspace keeps its files "
                f"from before the run): {returned.error}"
            )
        elif dict(returned.files) != dict(program.files):  # unchanged: the version it had stays
            key = self.key(binding, session_id)
            try:
                await anyio.to_thread.run_sync(self.store.commit, key, dict(returned.files))
                before = program.files
                written = shown_names(
                    sorted(name for name, data in returned.files.items() if before.get(name) != data),
                    self._results,
                )
            except (WorkspaceError, OSError) as exc:
                log.warning("workspace of %s not saved: %s", key.label(), exc)
                notes.append(
                    "codemode: workspace: nothing this run wrote was kept (the workspace keeps its "
                    f"files from before the run): {exc}"
                )
        if not notes:
            return outcome, written
        stderr = outcome.stderr + ("" if not outcome.stderr or outcome.stderr.endswith("\n") else "\n")
        return outcome.model_copy(update={"stderr": stderr + "\n".join(notes) + "\n"}), written

    async def prune(self) -> None:
        """Remove workspaces past their time to live; a failure is logged, never raised."""
        try:
            gone = await anyio.to_thread.run_sync(self.store.prune)
        except (OSError, CodemodeError) as exc:  # the ledger out of reach, too
            log.warning("could not prune workspaces in %s: %s", self.store.root, exc)
            return
        if gone:
            log.info("pruned %d workspace(s) unused for %g s", len(gone), self.store.ttl_s)
