"""Programs import stubs on demand and call tools through the channel into a CallHandler."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
import uvloop

from codemode.sandbox import Program, SandboxManager

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


async def test_a_stub_call_reaches_a_real_mcp_server_and_returns_typed_results(
    make_config: Callable[..., Any],
    stub_tree: Any,
    open_mcp_handler: Callable[[], Any],
    new_binding: Callable[..., Any],
    no_leftovers: Callable[[], None],
) -> None:
    code = """
import codemode
from servers.demo import add
from servers.demo.echo import echo
from servers.demo.pixel import pixel

total = add(a=2, b=40)
image = pixel()
try:
    from servers.demo.fail import fail
    fail(msg="boom")
except codemode.ToolError as exc:
    failure = [type(exc).__name__, exc.message]
{
    "total": total,
    "echo": echo(text="hello"),
    "echo_json": echo(text='{"n": [1, 2]}'),
    "image": [type(image).__name__, image.mime_type, image.data[:4].hex()],
    "failure": failure,
}
"""
    async with open_mcp_handler() as mcp_handler, SandboxManager(make_config()) as manager:
        outcome = await manager.run(
            Program(code), binding=new_binding(), modules=stub_tree, handler=mcp_handler
        )
    assert outcome.status == "ok", outcome.error
    assert outcome.result_kind == "json"
    assert isinstance(outcome.result, dict)
    assert outcome.result["total"] == {"total": 42}
    assert outcome.result["echo"] == "hello"
    assert outcome.result["echo_json"] == {"n": [1, 2]}
    assert outcome.result["failure"] == ["ToolError", "Error executing tool fail: boom"]
    assert outcome.result["image"] == ["Image", "image/png", "89504e47"]
    assert outcome.calls == 5
    # Only what the program imported travelled (no `lookup`, no `slow`).
    assert set(stub_tree.requested) == {
        "servers",
        "servers.demo",
        "servers.demo.add",
        "servers.demo.echo",
        "servers.demo.pixel",
        "servers.demo.fail",
    }
    no_leftovers()


async def test_stub_calls_fan_out_from_threads_asyncio_and_parallel(
    make_config: Callable[..., Any],
    stub_tree: Any,
    open_mcp_handler: Callable[[], Any],
    new_binding: Callable[..., Any],
) -> None:
    code = """
import asyncio
from concurrent.futures import ThreadPoolExecutor
import codemode
from servers.demo import lookup

with ThreadPoolExecutor(max_workers=16) as pool:
    by_threads = [r["id"] for r in pool.map(lambda i: lookup(id=i), range(100))]

async def fan_out():
    return await asyncio.gather(*(asyncio.to_thread(lookup, id=i) for i in range(100)))

by_asyncio = [r["id"] for r in await fan_out()]
by_parallel = [r["name"] for r in codemode.parallel(lookup, [{"id": i} for i in range(100)])]
[by_threads == list(range(100)), by_asyncio == list(range(100)), by_parallel[:3], len(by_parallel)]
"""
    async with open_mcp_handler() as mcp_handler, SandboxManager(make_config()) as manager:
        outcome = await manager.run(
            Program(code), binding=new_binding(), modules=stub_tree, handler=mcp_handler
        )
    assert outcome.status == "ok", outcome.error
    assert outcome.result == [True, True, ["item-0", "item-1", "item-2"], 100]
    assert outcome.calls == 300
    assert mcp_handler.calls == 300


async def test_concurrent_stub_calls_are_in_flight_at_the_same_time(
    make_config: Callable[..., Any], stub_tree: Any, handler: Any, new_binding: Callable[..., Any]
) -> None:
    handler.delay_s = 0.05
    code = """
import asyncio, time
import codemode
from servers.demo import slow
start = time.monotonic()
threads = codemode.parallel(slow, [{"id": i} for i in range(100)], max_workers=20)
async def gather():
    return await asyncio.gather(*(asyncio.to_thread(slow, id=i) for i in range(100)))
via_asyncio = asyncio.run(gather())
[len(threads), len(via_asyncio), round(time.monotonic() - start, 2)]
"""
    async with SandboxManager(make_config()) as manager:
        outcome = await manager.run(Program(code), binding=new_binding(), modules=stub_tree, handler=handler)
    assert outcome.status == "ok", outcome.error
    assert isinstance(outcome.result, list)
    count_threads, count_asyncio, elapsed = outcome.result
    assert (count_threads, count_asyncio) == (100, 100)
    # 200 calls of 50 ms each: serially 10 s.
    assert isinstance(elapsed, int | float)
    assert elapsed < 5.0
    assert handler.peak > 4
    assert [r.seq for r in handler.requests] == list(range(200))
    assert {b.principal for b in handler.bindings} == {"alice"}


async def test_parallel_reraises_the_first_failure_in_input_order_after_all_finish(
    run_program: Callable[..., Any],
) -> None:
    code = """
import codemode
done = []
def work(i):
    done.append(i)
    if i in (3, 7):
        raise ValueError(f"bad {i}")
    return i
try:
    codemode.parallel(work, [{"i": i} for i in range(10)], max_workers=4)
except ValueError as exc:
    result = [str(exc), sorted(done)]
result
"""
    outcome = await run_program(code)
    assert outcome.status == "ok", outcome.error
    assert outcome.result == ["bad 3", list(range(10))]


async def test_resources_and_prompts_come_back_as_runtime_classes(run_program: Callable[..., Any]) -> None:
    code = """
import codemode
[contents] = codemode.read_resource("demo", "file:///notes.txt")
[message] = codemode.get_prompt("demo", "greet", {"name": "Ada"})
[type(contents).__name__, contents.uri, contents.text, message.role, message.content]
"""
    outcome = await run_program(code)
    assert outcome.status == "ok", outcome.error
    assert outcome.result == [
        "ResourceContents",
        "file:///notes.txt",
        "contents",
        "user",
        "hello {'name': 'Ada'}",
    ]
    assert outcome.calls == 2


async def test_a_denied_call_traceback_shows_the_program_and_the_stub_but_not_the_runtime(
    run_program: Callable[..., Any],
) -> None:
    code = "import codemode\n\ndef go():\n    return codemode.call_tool('other', 'x', 'h', {})\n\ngo()\n"
    outcome = await run_program(code)
    assert outcome.status == "error"
    assert outcome.error.kind == "exception"
    assert outcome.error.type == "codemode.CallDenied"
    assert "denied by the tool gate" in outcome.error.message
    trace = outcome.error.traceback
    assert 'File "<program>", line 6' in trace
    assert 'File "<program>", line 4, in go' in trace
    assert "codemode_runtime" not in trace
    assert "codemode_boot" not in trace


async def test_the_host_bounds_the_calls_it_handles_at_once(
    make_config: Callable[..., Any], stub_tree: Any, handler: Any, new_binding: Callable[..., Any]
) -> None:
    handler.delay_s = 0.02
    code = (
        "import codemode\nfrom servers.demo import slow\n"
        "len(codemode.parallel(slow, [{'id': i} for i in range(60)], max_workers=30))\n"
    )
    async with SandboxManager(make_config(max_inflight_calls=4)) as manager:
        outcome = await manager.run(Program(code), binding=new_binding(), modules=stub_tree, handler=handler)
    assert (outcome.status, outcome.result) == ("ok", 60)
    assert handler.peak == 4


async def test_stubs_rendered_by_codemode_call_the_real_server_through_the_sandbox(
    make_config: Callable[..., Any],
    open_mcp_handler: Callable[[], Any],
    new_binding: Callable[..., Any],
    no_leftovers: Callable[[], None],
) -> None:
    stubs = pytest.importorskip("codemode.stubs")
    from codemode.catalog import ServerCatalog
    from codemode.catalog._convert import tool_from_mcp
    from codemode.catalog._model import ToolSpec

    code = (
        "import servers\n"
        "from servers.demo import add, echo\n"
        "from servers.demo.lookup import lookup\n"
        "[add(a=1, b=2), echo(text='x'), lookup(id=4), 'demo' in servers.__doc__]\n"
    )
    async with open_mcp_handler() as mcp_handler, SandboxManager(make_config()) as manager:
        listed = await mcp_handler._client.list_tools()
        specs = [
            spec
            for spec in (tool_from_mcp("demo", tool) for tool in listed.tools)
            if isinstance(spec, ToolSpec)
        ]
        tree = stubs.render_tree([ServerCatalog(server="demo", tools=tuple(specs))])
        outcome = await manager.run(Program(code), binding=new_binding(), modules=tree, handler=mcp_handler)
    assert outcome.status == "ok", outcome.error
    assert outcome.result == [{"total": 3}, "x", {"id": 4, "name": "item-4"}, True]
    no_leftovers()


@pytest.mark.parametrize(
    "loop_factory", [asyncio.new_event_loop, uvloop.new_event_loop], ids=["asyncio", "uvloop"]
)
def test_stub_calls_work_on_an_event_loop_that_anyio_did_not_start(
    make_config: Callable[..., Any],
    stub_tree: Any,
    handler: Any,
    new_binding: Callable[..., Any],
    loop_factory: Callable[[], asyncio.AbstractEventLoop],
) -> None:
    """Ray's async actors and callers using ``asyncio.run`` run the engine on a bare asyncio loop,
    where nothing names the async library; web apps served by uvicorn run it on uvloop, whose
    transports are not ``asyncio.Transport`` instances. The channel must answer the program on both."""
    code = "from servers.demo import add\n[add(a=i, b=1)['total'] for i in range(3)]"

    async def main() -> Any:
        async with SandboxManager(make_config()) as manager:
            return await manager.run(Program(code), binding=new_binding(), modules=stub_tree, handler=handler)

    with asyncio.Runner(loop_factory=loop_factory) as runner:
        outcome = runner.run(main())
    assert outcome.status == "ok", outcome.error
    assert outcome.result == [1, 2, 3]
    assert outcome.calls == 3
