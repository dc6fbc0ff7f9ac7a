"""Fixtures for the sandbox suite: every backend on real processes, sandboxes and containers.

The ``backend`` fixture runs a test body on the process, bwrap and docker backends. Docker tests
are marked ``docker``, bwrap tests ``bwrap``. Without ``CODEMODE_REQUIRE_DOCKER`` they are
skipped when no engine answers; with ``CODEMODE_REQUIRE_DOCKER=1`` (CI) a missing engine or an
image that cannot be built fails them instead. The image is built once per session when missing
or stale. Likewise ``CODEMODE_REQUIRE_BWRAP=1`` turns a missing or unusable bwrap into failures.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import time
import types
import uuid
from collections.abc import AsyncGenerator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import psutil
import pytest

from codemode.calls import (
    CallDenied,
    CallOutcome,
    ModuleSource,
    PromptGetRequest,
    ResourceReadRequest,
    RunBinding,
    ToolCallRequest,
    ToolError,
    ToolResult,
    content_blocks,
)
from codemode.config import SandboxConfig
from codemode.errors import SandboxUnavailableError
from codemode.sandbox import BackendName, Program, SandboxManager
from codemode.sandbox import _wire as wire
from codemode.sandbox._bwrap import probe_bwrap
from codemode.sandbox._docker import LABEL, OWNER_LABEL, POOL_ENV, POOL_LABEL
from codemode.sandbox._docker_api import docker_api
from codemode.sandbox._files import WIRE_MODULE, stage_runtime
from codemode.sandbox._process import UID_BASE, UID_SPAN
from codemode.sandbox._state import HostToken, StateDir, default_base

HERE = Path(__file__).resolve().parent
DEMO_SERVER = HERE / "demo_mcp_server.py"
REQUIRE_BWRAP = os.environ.get("CODEMODE_REQUIRE_BWRAP", "").strip() not in ("", "0", "false", "no")
SCHEMA_HASH = "sha256:demo"


# -- bwrap availability (docker_image lives in tests/conftest.py) ---------------------------


@pytest.fixture(scope="session")
def bwrap_ready() -> None:
    """bwrap can start sandboxes here (installed, user namespaces allowed, seccomp loads)."""
    layout, why = probe_bwrap(SandboxConfig())
    if layout is None:
        if REQUIRE_BWRAP:
            pytest.fail(f"CODEMODE_REQUIRE_BWRAP is set but {why}")
        pytest.skip(f"bwrap cannot run sandboxes here: {why}")


BACKENDS = [
    "process",
    pytest.param("bwrap", marks=pytest.mark.bwrap),
    pytest.param("docker", marks=pytest.mark.docker),
]


def require_backend(request: pytest.FixtureRequest, name: BackendName) -> BackendName:
    """Skip (or, when required, fail) unless ``name`` can run here."""
    if name == "docker":
        request.getfixturevalue("docker_image")
    elif name == "bwrap":
        request.getfixturevalue("bwrap_ready")
    return name


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> BackendName:
    return require_backend(request, request.param)


@pytest.fixture(params=["process", pytest.param("bwrap", marks=pytest.mark.bwrap)])
def local_backend(request: pytest.FixtureRequest) -> BackendName:
    """The backends without Docker: both rely on rlimits and the psutil watchdog."""
    return require_backend(request, request.param)


@pytest.fixture
def make_config(backend: BackendName, request: pytest.FixtureRequest) -> Callable[..., SandboxConfig]:
    """A SandboxConfig for the parametrized backend: no warm pool unless asked, tight limits."""
    image = str(request.getfixturevalue("docker_image")) if backend == "docker" else SandboxConfig().image

    def make(**overrides: Any) -> SandboxConfig:
        values: dict[str, Any] = {"backend": backend, "image": image, "pool_size": 0, "wall_time_s": 20.0}
        values.update(overrides)
        return SandboxConfig(**values)

    return make


# -- a stub tree and call handlers -------------------------------------------------------------

_STUB = '''"""{tool}: stub for demo/{tool}."""
from codemode_runtime import call_tool


def {tool}(**arguments):
    return call_tool("demo", "{tool}", "{hash}", arguments)
'''

_PACKAGE = '''"""demo server: one line per tool."""
import importlib

__all__ = {tools!r}


def __getattr__(name):
    if name in __all__:
        function = getattr(importlib.import_module(f"{{__name__}}.{{name}}"), name)
        # Importing the submodule bound the *module* to this name; the function must win.
        globals()[name] = function
        return function
    raise AttributeError(name)
'''

DEMO_TOOLS = ("add", "echo", "lookup", "fail", "pixel", "slow")


class StubTree:
    """A ModuleProvider serving ``servers/demo/<tool>.py`` stubs; records what was asked for."""

    def __init__(self, tools: tuple[str, ...] = DEMO_TOOLS) -> None:
        self.sources = {
            "servers": ModuleSource(source='"""servers index"""\n', is_package=True),
            "servers.demo": ModuleSource(source=_PACKAGE.format(tools=list(tools)), is_package=True),
        }
        for tool in tools:
            self.sources[f"servers.demo.{tool}"] = ModuleSource(
                source=_STUB.format(tool=tool, hash=SCHEMA_HASH), is_package=False
            )
        self.requested: list[str] = []

    def module_source(self, module: str) -> ModuleSource | None:
        self.requested.append(module)
        return self.sources.get(module)


@dataclass
class FakeHandler:
    """A CallHandler answering from Python functions; records requests and peak concurrency."""

    delay_s: float = 0.0
    requests: list[ToolCallRequest] = field(default_factory=lambda: [])
    bindings: list[RunBinding] = field(default_factory=lambda: [])
    in_flight: int = 0
    peak: int = 0

    async def call_tool(self, binding: RunBinding, request: ToolCallRequest) -> CallOutcome:
        self.requests.append(request)
        self.bindings.append(binding)
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            if self.delay_s:
                await anyio.sleep(self.delay_s)
            args = request.arguments
            if request.server != "demo" or request.tool not in DEMO_TOOLS:
                return CallDenied(gate="tool", reason=f"{request.server}/{request.tool} is not in the tree")
            if request.tool == "add":
                return ToolResult(structured={"total": args["a"] + args["b"]})
            if request.tool in ("lookup", "slow"):
                return ToolResult(structured={"id": args["id"], "name": f"item-{args['id']}"})
            if request.tool == "echo":
                return ToolResult(content=content_blocks([{"type": "text", "text": args["text"]}]))
            if request.tool == "fail":
                return ToolError(message=args.get("msg", "failed"))
            return ToolResult()
        finally:
            self.in_flight -= 1

    async def read_resource(self, binding: RunBinding, request: ResourceReadRequest) -> CallOutcome:
        return ToolResult(structured=[{"uri": request.uri, "mimeType": "text/plain", "text": "contents"}])

    async def get_prompt(self, binding: RunBinding, request: PromptGetRequest) -> CallOutcome:
        messages = [{"role": "user", "content": {"type": "text", "text": f"hello {request.arguments}"}}]
        return ToolResult(structured={"messages": messages})


class McpForwardingHandler:
    """A CallHandler that forwards tool calls to a real MCP server (the broker's job, minus gates)."""

    def __init__(self, client: Any, tools: set[str]) -> None:
        self._client = client
        self._tools = tools
        self.calls = 0

    async def call_tool(self, binding: RunBinding, request: ToolCallRequest) -> CallOutcome:
        if request.server != "demo" or request.tool not in self._tools:
            return CallDenied(gate="tool", reason=f"{request.server}/{request.tool} is not in the tree")
        self.calls += 1
        result = await self._client.call_tool(request.tool, request.arguments)
        blocks = content_blocks(
            [block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in result.content]
        )
        if result.is_error:
            text = " ".join(str(getattr(block, "text", "")) for block in result.content)
            return ToolError(message=text, content=blocks)
        return ToolResult(structured=result.structured_content, content=blocks)

    async def read_resource(self, binding: RunBinding, request: ResourceReadRequest) -> CallOutcome:
        return CallDenied(gate="resource", reason="not in this test")

    async def get_prompt(self, binding: RunBinding, request: PromptGetRequest) -> CallOutcome:
        return CallDenied(gate="prompt", reason="not in this test")


@pytest.fixture
def stub_tree() -> StubTree:
    return StubTree()


@pytest.fixture
def handler() -> FakeHandler:
    return FakeHandler()


@pytest.fixture
def open_mcp_handler() -> Callable[[], contextlib.AbstractAsyncContextManager[McpForwardingHandler]]:
    """Opens (inside the test's task) a stdio MCP client to ``demo_mcp_server.py``."""

    @contextlib.asynccontextmanager
    async def open_handler() -> AsyncGenerator[McpForwardingHandler]:
        from mcp import Client, StdioServerParameters

        params = StdioServerParameters(command=sys.executable, args=[str(DEMO_SERVER)])
        async with Client(params) as client:
            listed = await client.list_tools()
            yield McpForwardingHandler(client, {tool.name for tool in listed.tools})

    return open_handler


_counter = 0


def binding(principal: str = "alice", tenant: str = "acme") -> RunBinding:
    global _counter
    _counter += 1
    return RunBinding(
        run_id=f"run-{_counter}", principal=principal, tenant=tenant, trace_id=f"trace-{_counter}"
    )


@pytest.fixture
def new_binding() -> Callable[..., RunBinding]:
    return binding


@pytest.fixture
def run_program(
    make_config: Callable[..., SandboxConfig], stub_tree: StubTree, handler: FakeHandler
) -> Callable[..., Any]:
    """``await run_program(code, **config_overrides)``: one run in a fresh manager."""

    async def run(code: str, *, handler_: Any = None, **overrides: Any) -> Any:
        async with SandboxManager(make_config(**overrides)) as manager:
            return await manager.run(
                Program(code),
                binding=binding(),
                modules=stub_tree,
                handler=handler_ if handler_ is not None else handler,
            )

    return run


# -- leftovers -----------------------------------------------------------------------------------


# Other codemode processes may use the same engine and state directory at the same time (another
# run, another xdist worker, another checkout's tests): the probes below see only this test run's
# sandboxes. Containers carry this run's pool label and sandbox directories name it in their meta
# ($CODEMODE_POOL_ID, set for the session and inherited by the subprocesses tests start); a process
# of a sandbox uid is this run's unless its directory is another's.
TEST_POOL_ID = f"tests-{uuid.uuid4().hex}"


@pytest.fixture(scope="session", autouse=True)
def own_pool_label() -> Iterator[str]:
    """Every SandboxManager of this test run, here or in a subprocess, labels its containers so."""
    previous = os.environ.get(POOL_ENV)
    os.environ[POOL_ENV] = TEST_POOL_ID
    yield TEST_POOL_ID
    if previous is None:
        os.environ.pop(POOL_ENV, None)
    else:
        os.environ[POOL_ENV] = previous


def _dir_entries() -> list[tuple[Path, dict[str, Any] | None]]:
    base = default_base()
    if not base.is_dir():
        return []
    return [
        (entry, StateDir.read_meta(entry))
        for entry in base.iterdir()
        if not entry.name.startswith(("runtime-", "."))  # "." : being made or being removed
    ]


def _a_neighbours(meta: dict[str, Any] | None) -> bool:
    token = HostToken.decode(str(meta.get("owner", ""))) if meta else None
    return token is not None and token.pid != os.getpid() and token.alive()


def _this_runs(meta: dict[str, Any] | None) -> bool:
    """Whether a sandbox directory is this test run's: of its pool (another xdist worker's crashed
    hosts leave theirs until some host sweeps them), and not a live neighbour's."""
    return meta is not None and meta.get("pool") == TEST_POOL_ID and not _a_neighbours(meta)


def sandbox_processes() -> list[psutil.Process]:
    """Processes running as a process-backend sandbox uid (root host), zombies and neighbours aside."""
    theirs = {
        int(meta["uid"]) for _, meta in _dir_entries() if meta and "uid" in meta and not _this_runs(meta)
    }
    found: list[psutil.Process] = []
    for proc in psutil.process_iter(["uids", "status"]):
        uids = proc.info.get("uids")
        if (
            uids
            and UID_BASE <= uids.real < UID_BASE + UID_SPAN
            and uids.real not in theirs
            and proc.info.get("status") != psutil.STATUS_ZOMBIE
        ):
            found.append(proc)
    return found


def containers_of(pool_id: str) -> list[str]:
    """Sandbox containers (running or not) labelled with ``pool_id``."""
    try:
        api = docker_api(10.0)
    except SandboxUnavailableError:
        return []
    try:
        return [container_id for container_id, _ in api.labelled(f"{LABEL}=1", f"{POOL_LABEL}={pool_id}")]
    finally:
        api.close()


def sandbox_containers() -> list[str]:
    """This test run's sandbox containers."""
    return containers_of(TEST_POOL_ID)


def dirs_of(pid: int) -> list[Path]:
    """The sandbox directories a host process with this pid owns (alive or not)."""
    found: list[Path] = []
    for entry, meta in _dir_entries():
        token = HostToken.decode(str(meta.get("owner", ""))) if meta else None
        if token is not None and token.pid == pid:
            found.append(entry)
    return found


def containers_owned_by(pid: int) -> list[str]:
    """This test run's sandbox containers that a host process with this pid started."""
    try:
        api = docker_api(10.0)
    except SandboxUnavailableError:
        return []
    try:
        labelled = api.labelled(f"{LABEL}=1", f"{POOL_LABEL}={TEST_POOL_ID}")
    finally:
        api.close()
    owners = {
        container_id: HostToken.decode(labels.get(OWNER_LABEL, "")) for container_id, labels in labelled
    }
    return [container_id for container_id, token in owners.items() if token is not None and token.pid == pid]


def sandbox_dirs() -> list[Path]:
    """This test run's sandbox directories."""
    return [entry for entry, meta in _dir_entries() if _this_runs(meta)]


def wait_until(predicate: Callable[[], bool], *, within_s: float = 10.0, what: str = "condition") -> None:
    """Poll ``predicate`` until it holds (no bare sleeps: a deadline and a short poll interval)."""
    deadline = time.monotonic() + within_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within_s:g} s waiting for: {what}")
        time.sleep(0.02)


@pytest.fixture
def no_leftovers() -> Callable[[], None]:
    """Call it (after the manager closed) to assert no sandbox process, container or dir remains."""

    def check() -> None:
        wait_until(lambda: not sandbox_processes(), what=f"no sandbox processes ({sandbox_processes()})")
        wait_until(lambda: not sandbox_containers(), what=f"no sandbox containers ({sandbox_containers()})")
        wait_until(lambda: not sandbox_dirs(), what=f"no sandbox directories ({sandbox_dirs()})")

    return check


@pytest.fixture
def leftovers() -> SimpleNamespace:
    """The probes behind ``no_leftovers``: ``.processes()``, ``.containers()``, ``.dirs()``;
    ``.containers_of(pool_id)`` for the containers of one pool label; ``.dirs_of(pid)`` and
    ``.containers_owned_by(pid)`` for what one host process left."""
    return SimpleNamespace(
        processes=sandbox_processes,
        containers=sandbox_containers,
        dirs=sandbox_dirs,
        containers_of=containers_of,
        dirs_of=dirs_of,
        containers_owned_by=containers_owned_by,
    )


@pytest.fixture
def staged(tmp_path: Path) -> Path:
    """The runtime as a sandbox gets it (with the wire contract copied in), staged in ``tmp_path``."""
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    stage_runtime(runtime)
    return runtime


@pytest.fixture
def runtime_wire(staged: Path) -> types.ModuleType:
    """The runtime's copy of the wire module, loaded on its own (not the host's module object)."""
    spec = importlib.util.spec_from_file_location("staged_wire", staged / WIRE_MODULE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module is not wire
    return module
