"""The sandbox channel alone: a stub call's round trip vs a bare socket echo of the same frames.

    .venv/bin/python benchmarks/channel_bench.py            # 2,000 round trips each
    .venv/bin/python benchmarks/channel_bench.py -n 5000 --json
    .venv/bin/python benchmarks/channel_bench.py -n 10 --answer-kib 15000   # 15 MiB answers

Both sides are as in production: the host's :class:`HostChannel` on an anyio event loop in
this process, and the in-sandbox runtime's blocking client in a child process. Each round
trip is one ``call`` request (the frame a stub call sends) and the host's reply, answered by a
handler that does nothing, so no gate, ledger or server is involved. Two baselines send the
same request bytes from a child process over a bare Unix socket and get the same reply bytes
back: ``echo`` from a blocking thread here (the floor that any framing across processes pays),
``loop echo`` from a minimal :class:`asyncio.Protocol` on an event loop here (the floor for any
host that serves its sandboxes from one event loop, as codemode's does). The three run
alternately, ``--rounds`` times, and the medians of each round's p50 are reported. Nothing is
asserted.

``--answer-after-ms D`` makes every side answer D ms after the request arrives (the handler
sleeps; the echoes wait), as a real server does, and reports the time beyond D. A process that
waited that long has been descheduled and its caches have gone cold, so this is what a stub call
costs in a program, where the no-wait figures are a hot loop's.

``--answer-kib K`` answers every call with K KiB of text instead of a small record: what moving
a large answer costs each side (the runtime reads such a frame in place, into a buffer of its
own size).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import anyio  # noqa: E402

from codemode.calls import CallOutcome, RunBinding, ToolCallRequest, ToolResult  # noqa: E402
from codemode.sandbox import _wire as wire  # noqa: E402
from codemode.sandbox._channel import HostChannel, RunContext  # noqa: E402

PARAMS: dict[str, Any] = {
    "server": "crm",
    "tool": "get_customer",
    "schema_hash": "0" * 64,
    "arguments": {"customer_id": "CUST-0042"},
}
RESULT = ToolResult(structured={"id": "CUST-0042", "company": "Acme", "email": "[email]"})


class NoopHandler:
    def __init__(self, answer_after_s: float = 0.0, result: ToolResult = RESULT) -> None:
        self.answer_after_s = answer_after_s
        self.result = result

    async def call_tool(self, binding: RunBinding, request: ToolCallRequest) -> CallOutcome:
        if self.answer_after_s:
            await anyio.sleep(self.answer_after_s)
        return self.result

    async def read_resource(self, binding: RunBinding, request: Any) -> CallOutcome:
        return RESULT

    async def get_prompt(self, binding: RunBinding, request: Any) -> CallOutcome:
        return RESULT


class NoModules:
    def module_source(self, module: str) -> None:
        return None


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


CLIENT = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from codemode_runtime import _client, _wire as wire
channel = _client.connect(sys.argv[2])
params = json.loads(sys.argv[4])
times = []
for _ in range(int(sys.argv[3])):
    started = time.perf_counter()
    reply = channel.request(wire.CALL, params)
    times.append((time.perf_counter() - started) * 1000)
print(json.dumps({"times": times, "reply": reply}), flush=True)
sys.stdin.read()  # the host closes the channel next, and the runtime exits with it
"""


async def channel_round_trips(
    count: int, answer_after_s: float = 0.0, result: ToolResult = RESULT
) -> tuple[list[float], bytes, bytes]:
    """``count`` stub-call round trips through the real channel, each answered with ``result``;
    their times in ms (less the handler's ``answer_after_s``).

    The client is the sandbox runtime's, in a process of its own as in a sandbox (it ends its
    process when the host closes the channel).
    """
    with tempfile.TemporaryDirectory(prefix="codemode-channel-bench-") as tmp:
        host = HostChannel(Path(tmp) / "ch", max_frame_bytes=wire.DEFAULT_MAX_FRAME_BYTES)
        await host.listen()
        binding = RunBinding(run_id="run_bench", principal="local", tenant="default", trace_id="t")
        runtime = str(ROOT / "sandbox" / "runtime")
        argv = [sys.executable, "-c", CLIENT, runtime, str(host.directory), str(count), json.dumps(PARAMS)]
        line = b""
        async with await anyio.open_process(argv, stderr=None) as client, anyio.create_task_group() as tg:
            await host.accept(10)
            host.bind(
                RunContext(binding=binding, modules=NoModules(), handler=NoopHandler(answer_after_s, result))
            )
            tg.start_soon(host.serve)
            assert client.stdout is not None
            async for chunk in client.stdout:
                line += chunk
                if line.endswith(b"\n"):
                    break
            await host.aclose()
            tg.cancel_scope.cancel()
        found = json.loads(line)
        request = wire.encode_frame({"jsonrpc": "2.0", "id": 1, "method": wire.CALL, "params": PARAMS})
        reply = wire.encode_frame({"jsonrpc": "2.0", "id": 1, "result": found["reply"]})
        return [float(t) - answer_after_s * 1000 for t in found["times"]], request, reply


ECHO_CLIENT = """
import json, socket, struct, sys, time
header = struct.Struct(">I")
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.connect(sys.argv[1])
request = bytes.fromhex(sys.argv[3])

def exactly(size):
    chunks = []
    while size:
        chunk = sock.recv(size)
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)

times = []
for _ in range(int(sys.argv[2])):
    started = time.perf_counter()
    sock.sendall(request)
    (length,) = header.unpack(exactly(header.size))
    exactly(length)
    times.append((time.perf_counter() - started) * 1000)
print(json.dumps(times), flush=True)
"""


def echo_round_trips(count: int, request: bytes, reply: bytes, answer_after_s: float = 0.0) -> list[float]:
    """The same frames over a bare Unix socket: a child process sends each request, a thread here
    reads it and writes back the reply bytes. The floor that any framing across processes pays."""
    with tempfile.TemporaryDirectory(prefix="codemode-echo-bench-") as tmp:
        path = str(Path(tmp) / "echo.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen(1)

        def read_exactly(sock: socket.socket, size: int) -> bytes:
            chunks: list[bytes] = []
            while size:
                chunk = sock.recv(size)
                if not chunk:
                    raise ConnectionError("closed")
                chunks.append(chunk)
                size -= len(chunk)
            return b"".join(chunks)

        def echo() -> None:
            conn, _ = listener.accept()
            with conn:
                for _ in range(count):
                    (length,) = wire.HEADER.unpack(read_exactly(conn, wire.HEADER.size))
                    read_exactly(conn, length)
                    if answer_after_s:
                        time.sleep(answer_after_s)
                    conn.sendall(reply)

        thread = threading.Thread(target=echo, daemon=True)
        thread.start()
        argv = [sys.executable, "-c", ECHO_CLIENT, path, str(count), request.hex()]
        done = subprocess.run(argv, capture_output=True, text=True, check=True)
        thread.join()
        listener.close()
        return [float(t) - answer_after_s * 1000 for t in json.loads(done.stdout)]


def loop_echo_round_trips(
    count: int, request: bytes, reply: bytes, answer_after_s: float = 0.0
) -> list[float]:
    """The same frames answered by a minimal asyncio protocol: parse each frame in
    ``data_received`` and write the reply bytes (the event loop's floor)."""

    class Echo(asyncio.Protocol):
        def __init__(self) -> None:
            self.buffer = bytearray()
            self.transport: asyncio.Transport | None = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            assert isinstance(transport, asyncio.Transport)
            self.transport = transport

        def data_received(self, data: bytes) -> None:
            self.buffer += data
            while len(self.buffer) >= wire.HEADER.size:
                (length,) = wire.HEADER.unpack_from(self.buffer)
                if len(self.buffer) < wire.HEADER.size + length:
                    return
                del self.buffer[: wire.HEADER.size + length]
                assert self.transport is not None
                if answer_after_s:
                    asyncio.get_running_loop().call_later(answer_after_s, self.transport.write, reply)
                else:
                    self.transport.write(reply)

    async def run(path: str) -> list[float]:
        loop = asyncio.get_running_loop()
        server = await loop.create_unix_server(Echo, path)
        argv = [sys.executable, "-c", ECHO_CLIENT, path, str(count), request.hex()]
        process = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE)
        out, _ = await process.communicate()
        server.close()
        return [float(t) - answer_after_s * 1000 for t in json.loads(out)]

    with tempfile.TemporaryDirectory(prefix="codemode-loop-echo-bench-") as tmp:
        return asyncio.run(run(str(Path(tmp) / "echo.sock")))


def _row(times: list[float], wait_s: float) -> dict[str, float]:
    """p50 and p95 of ``times`` (less the wait), and round trips per second (with it)."""
    return {
        "p50_ms": statistics.median(times),
        "p95_ms": percentile(times, 0.95),
        "per_s": len(times) / (sum(times) / 1000 + len(times) * wait_s),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-n", type=int, default=2000, help="round trips per side [2000]")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds [3]")
    parser.add_argument(
        "--answer-after-ms",
        type=float,
        default=0.0,
        metavar="D",
        help="every side answers D ms after a request arrives; times are reported less D [0]",
    )
    parser.add_argument(
        "--answer-kib",
        type=int,
        metavar="K",
        help="answer every call with K KiB of text instead of a small record (at most 15,000: the "
        "channel's frames stop at 16 MiB)",
    )
    args = parser.parse_args()
    if args.answer_kib is not None and not 0 <= args.answer_kib <= 15_000:
        parser.error(f"--answer-kib {args.answer_kib}: give 0 to 15000")
    wait_s = args.answer_after_ms / 1000
    result = (
        RESULT if args.answer_kib is None else ToolResult(structured={"blob": "z" * (args.answer_kib * 1024)})
    )
    names = ("channel", "echo", "loop echo")
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    request = reply = b""
    for _ in range(args.rounds):
        channel, request, reply = anyio.run(channel_round_trips, args.n, wait_s, result)
        rounds["channel"].append(_row(channel, wait_s))
        rounds["echo"].append(_row(echo_round_trips(args.n, request, reply, wait_s), wait_s))
        rounds["loop echo"].append(_row(loop_echo_round_trips(args.n, request, reply, wait_s), wait_s))
    rows = {
        name: {
            key: round(statistics.median(r[key] for r in rounds[name]), 4)
            for key in ("p50_ms", "p95_ms", "per_s")
        }
        for name in names
    }
    channel_p50 = rows["channel"]["p50_ms"]
    ratios = {
        "channel_vs_echo": round(channel_p50 / rows["echo"]["p50_ms"], 2),
        "channel_vs_loop_echo": round(channel_p50 / rows["loop echo"]["p50_ms"], 2),
        "loop_echo_vs_echo": round(rows["loop echo"]["p50_ms"] / rows["echo"]["p50_ms"], 2),
    }
    summary: dict[str, Any] = {
        "round_trips": args.n,
        "rounds": args.rounds,
        "answer_after_ms": args.answer_after_ms,
        "request_bytes": len(request),
        "reply_bytes": len(reply),
        **rows,
        "p50_ratios": ratios,
        "p50_per_round_ms": {name: [round(r["p50_ms"], 4) for r in rounds[name]] for name in names},
    }
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    print(
        f"{args.n} round trips x {args.rounds} alternating rounds (medians); "
        f"request {len(request)} B, reply {len(reply)} B"
        + (f"; answered after {args.answer_after_ms:g} ms, times less that" if wait_s else "")
    )
    print(f"{'':<10} {'p50 ms':>8} {'p95 ms':>8} {'per s':>9}   p50 per round")
    for name, row in rows.items():
        per_round = " ".join(f"{p:.4f}" for p in summary["p50_per_round_ms"][name])
        print(f"{name:<10} {row['p50_ms']:>8.4f} {row['p95_ms']:>8.4f} {row['per_s']:>9.1f}   {per_round}")
    print(f"channel / echo at p50:       {ratios['channel_vs_echo']:.2f}x")
    print(f"channel / loop echo at p50:  {ratios['channel_vs_loop_echo']:.2f}x")
    print(f"loop echo / echo at p50:     {ratios['loop_echo_vs_echo']:.2f}x")


if __name__ == "__main__":
    main()
