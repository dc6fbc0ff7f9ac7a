"""The ``[workspace]`` section: where the files that outlive a run are kept, and how many.

Each run sees a ``/workspace`` directory keyed by its tenant, principal and session (one per
principal without a session). Its files are copied into the sandbox when the run starts and back,
whole or not at all, when it ends; these settings bound what one workspace may hold and how long
an unused one is kept. What they mean is decided by :mod:`codemode.workspace`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["WorkspaceConfig"]


class WorkspaceConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    """Give each run a ``/workspace`` that outlives it. ``false``: runs see no workspace."""
    root: str = "workspaces"
    """The directory holding every workspace, relative to the config file. Its bytes stay on this
    machine: replicas that must share workspaces need it on shared storage."""
    quota_bytes: int = Field(default=8 * 1024 * 1024, ge=1024, le=1024 * 1024 * 1024)
    """The most bytes of file content one workspace holds. A write past it fails in the program;
    the workspace as it was before the run is kept. A workspace travels inside one channel message
    each way, so it must fit ``[sandbox] max_frame_bytes`` (checked at start)."""
    quota_files: int = Field(default=1000, ge=1, le=1_000_000)
    """The most files and directories one workspace holds."""
    ttl_s: float = Field(default=30 * 86_400, gt=0)
    """A workspace unused for this many seconds is removed (``codemode workspace prune``, and at
    each engine start). Default: 30 days."""
