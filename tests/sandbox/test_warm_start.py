"""A run sent to a ready sandbox is read at once, not after the runtime's reader grace (issue 37).

In the sandbox, a thread waiting for a stub call's answer reads the socket itself, and the
background reader takes the read side back only ``READER_GRACE_S`` after such a caller freed it.
A warm sandbox's first run comes right after its hello, a session's next run right after the
last call of the run before: each waited out that grace unread, 20 ms on every warm run. Here
the grace is an hour, so a run that waited for it would never be answered (its wall-time limit
would end it): the tests fail on the wait itself, not on a time measured on a noisy machine.

The in-process backend runs the runtime's own serve loop and channel in a thread of this
process, which lets the tests set the grace (a sandbox process imports its own copy).
"""

from __future__ import annotations

import importlib
import types
from collections.abc import Callable
from pathlib import Path

import pytest

from codemode.calls import RunBinding
from codemode.config import SandboxConfig
from codemode.sandbox import Program, SandboxManager
from codemode.sandbox._inprocess import load_runtime
from codemode.testing import in_process_sandbox
from tests.sandbox.conftest import FakeHandler, StubTree

# A run that waits for the grace fails at its wall-time limit (20 s); nothing takes longer.
pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

FOREVER_S = 3600.0


@pytest.fixture
def grace_for_ever(staged: Path, monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """The in-process runtime's channel module, with the background reader's grace at an hour."""
    load_runtime(staged)
    client = importlib.import_module("codemode_runtime._client")
    monkeypatch.setattr(client, "READER_GRACE_S", FOREVER_S)
    return client


def config(pool_size: int) -> SandboxConfig:
    return SandboxConfig(pool_size=pool_size, wall_time_s=20.0)


@pytest.mark.usefixtures("grace_for_ever")
async def test_a_warm_sandbox_answers_its_first_run_without_waiting_for_the_reader(
    stub_tree: StubTree, handler: FakeHandler, new_binding: Callable[..., RunBinding]
) -> None:
    async with SandboxManager(config(pool_size=1), backend=in_process_sandbox()) as manager:
        for _ in range(3):
            await manager.wait_ready()  # the run goes out as soon as the sandbox has said hello
            outcome = await manager.run(
                Program("print(sum(range(10)))"), binding=new_binding(), modules=stub_tree, handler=handler
            )
            assert outcome.error is None, outcome.error
            assert (outcome.status, outcome.stdout) == ("ok", "45\n")


@pytest.mark.usefixtures("grace_for_ever")
async def test_a_sessions_next_run_after_a_stub_call_is_answered_without_waiting_for_the_reader(
    stub_tree: StubTree, handler: FakeHandler, new_binding: Callable[..., RunBinding]
) -> None:
    """Each run ends with a stub call, whose answer a caller reads; the next run comes at once."""
    async with (
        SandboxManager(config(pool_size=0), backend=in_process_sandbox()) as manager,
        await manager.open_session(principal="alice", tenant="acme") as session,
    ):
        for n in range(3):
            outcome = await session.run(
                Program(f"from servers.demo import add\nadd(a={n}, b=1)['total']"),
                binding=new_binding(),
                modules=stub_tree,
                handler=handler,
            )
            assert outcome.error is None, outcome.error
            assert (outcome.status, outcome.result) == ("ok", n + 1)
    assert len(handler.requests) == 3
