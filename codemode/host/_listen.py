"""How a 2026-07-28 server's list changes reach the host: a ``subscriptions/listen`` stream.

On the older protocol the same announcements arrive as notifications on the session; on the
stateless one the client opens a stream for them, where the server declares ``listChanged``.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
from anyio.abc import TaskStatus
from mcp import Client
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

__all__ = ["listen_for_changes", "listens_for_changes"]


def listens_for_changes(client: Client, protocol_version: str | None) -> bool:
    """Whether the server announces list changes on a stream (2026-07-28 with ``listChanged``)."""
    if protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False
    caps = client.server_capabilities
    return any(
        c is not None and bool(getattr(c, "list_changed", False))
        for c in (caps.tools, caps.resources, caps.prompts)
    )


async def listen_for_changes(
    client: Client,
    on_change: Callable[[], None],
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Call ``on_change`` for each announcement, until the stream ends."""
    started = False
    try:
        async with client.listen(
            tools_list_changed=True, resources_list_changed=True, prompts_list_changed=True
        ) as subscription:
            task_status.started()
            started = True
            async for _event in subscription:
                on_change()
    except Exception:
        # The stream only speeds up drift detection; every call still checks the pins.
        if not started:
            task_status.started()
