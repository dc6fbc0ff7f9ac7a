"""What one piece of the read path costs: two identical engines, one with the piece switched off.

    .venv/bin/python benchmarks/broker_ablation.py --without deferred-record
    .venv/bin/python benchmarks/broker_ablation.py --without output-validation -n 300 --rounds 6 --json
    .venv/bin/python benchmarks/broker_ablation.py --without compiled-output-check -n 200 --rounds 30

Both engines read ``crm/list_writes`` from a program in a sandbox (the ``read`` path of
``broker_bench.py``); a direct ``mcp.Client`` call is timed in the same rounds, which alternate
the engines' order. The piece is switched off on engine ``B`` only, by patching the running
objects; so this measures, it does not ship. Pieces:

* ``deferred-record`` - the read's ledger record, queued for the writer thread (the record is
  dropped: what the writer's share of the interpreter's lock costs the program's wait);
* ``output-validation`` - the check of the answer against the tool's output schema (codemode's
  compiled validator, with the SDK's ``ClientSession.validate_tool_result`` behind it; the direct
  client pays the SDK's check);
* ``compiled-output-check`` - codemode's compiled validator in front of the SDK's check (``B``
  checks every answer with the SDK's interpreted validator alone, as before it).

If the p50 of ``B`` matches ``A``'s, the piece is not where a read's time goes. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import anyio  # noqa: E402
import mcp  # noqa: E402
from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402

from benchmarks.broker_bench import (  # noqa: E402
    CRM,
    TOOLS,
    broker_run,
    direct_loop,
    loop_program,
    pin_everything,
    settle,
    write_config,
)
from codemode.config import load_config  # noqa: E402
from codemode.engine._engine import CodeMode  # noqa: E402


def _drop_deferred_records(engine: CodeMode) -> None:
    broker = engine._broker  # pyright: ignore[reportPrivateUsage]
    assert broker is not None
    broker.ledger.record_read = lambda _record: None  # type: ignore[method-assign]


def _sessions(engine: CodeMode) -> list[ClientSession]:
    host = engine._host  # pyright: ignore[reportPrivateUsage]
    assert host is not None
    sessions: list[ClientSession] = []
    for connection in host._connections.values():  # pyright: ignore[reportPrivateUsage]
        client = connection._client  # pyright: ignore[reportPrivateUsage]
        assert client is not None
        sessions.append(client.session)
    return sessions


def _skip_output_validation(engine: CodeMode) -> None:
    async def skip(_name: str, _result: Any) -> None:
        return None

    for session in _sessions(engine):
        session.validate_tool_result = skip  # type: ignore[method-assign]


def _sdk_output_check_only(engine: CodeMode) -> None:
    for session in _sessions(engine):
        vars(session).pop("validate_tool_result")  # the SDK's method again


PIECES: dict[str, Callable[[CodeMode], None]] = {
    "deferred-record": _drop_deferred_records,
    "output-validation": _skip_output_validation,
    "compiled-output-check": _sdk_output_check_only,
}


async def measure(without: str, n: int, rounds: int, backend: str) -> dict[str, float]:
    tool, arguments = TOOLS["list_writes"]
    directory = Path(tempfile.mkdtemp(prefix="codemode-ablation-"))
    configs = {name: write_config(directory / name, backend, "read") for name in ("A", "B")}
    for config_path in configs.values():
        await pin_everything(config_path)
    params = StdioServerParameters(
        command=sys.executable, args=[str(CRM)], env={"CRM_STATE_DIR": str(directory / "crm-direct")}
    )
    samples: dict[str, list[float]] = {"direct": [], "A": [], "B": []}
    async with contextlib.AsyncExitStack() as stack:
        engines = {k: await stack.enter_async_context(CodeMode(load_config(c))) for k, c in configs.items()}
        client = await stack.enter_async_context(mcp.Client(params))
        for engine in engines.values():
            await broker_run(engine, loop_program(tool, arguments, 50))  # warm-up
        await direct_loop(client, tool, arguments, 50)
        PIECES[without](engines["B"])
        for index in range(rounds):
            await settle(engines.values())
            samples["direct"] += await direct_loop(client, tool, arguments, n)
            for name in ("A", "B") if index % 2 == 0 else ("B", "A"):
                await settle(engines.values())
                samples[name] += await broker_run(engines[name], loop_program(tool, arguments, n))
    return {name: statistics.median(values) * 1000 for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--without", choices=sorted(PIECES), required=True, help="the piece B runs without")
    parser.add_argument("-n", type=int, default=300, help="calls per engine per round (default 300)")
    parser.add_argument("--rounds", type=int, default=6, help="alternating rounds (default 6)")
    parser.add_argument("--backend", default="process", help="sandbox backend (default process)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    p50 = anyio.run(measure, args.without, args.n, args.rounds, args.backend)
    if args.json:
        print(json.dumps({"without": args.without, "p50_ms": p50}))
        return
    print(f"read path, p50 over {args.rounds} alternating rounds of {args.n} calls; B without {args.without}")
    for name, label in (("direct", "direct mcp.Client"), ("A", "engine A (as shipped)"), ("B", "engine B")):
        print(f"  {label:<24} {p50[name]:7.3f} ms  {p50[name] / p50['direct']:.3f}x")


if __name__ == "__main__":
    main()
