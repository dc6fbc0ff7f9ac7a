"""Ledger benchmark: what the side-effects gate adds to every tool call, and how verify scales.

    .venv/bin/python benchmarks/ledger_bench.py             # readable table
    .venv/bin/python benchmarks/ledger_bench.py --json      # machine-readable
    .venv/bin/python benchmarks/ledger_bench.py --calls 2000 --threads 16

One "call" is what the broker writes for a tool call that goes to a server:
``reserve`` → ``mark_sent`` → ``complete`` (three durable transactions, fsync each, WAL,
synchronous=FULL), with an idempotency key and a small result; "send fused" is
``reserve(send=True)`` → ``complete`` (two transactions). It is measured on a real
file in a temporary directory, at concurrency 1 and with N threads sharing one ledger object
and N threads each with their own (as separate broker processes would). Also: a replay
(same key, same arguments: one transaction), and ``verify`` over the resulting log.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from codemode.calls import ToolResult  # noqa: E402
from codemode.ledger import CallIntent, Fresh, Replay, SqliteLedger, open_ledger  # noqa: E402


def _intent(n: int, key: str | None) -> CallIntent:
    return CallIntent(
        call_id=f"bench/{n}",
        run_id="bench",
        trace_id="t",
        principal="alice",
        tenant="acme",
        server="crm",
        tool="add_note",
        schema_hash="sha256:" + "0" * 64,
        arguments={"customer_id": n, "text": "hello world"},
        idempotency_key=key,
    )


def _one_call(ledger: SqliteLedger, n: int) -> float:
    start = time.perf_counter()
    answer = ledger.reserve(_intent(n, f"k{n}"))
    assert isinstance(answer, Fresh)
    ledger.mark_sent(answer.call_id)
    ledger.complete(answer.call_id, ToolResult(structured={"note_id": n}), receipt=f"note-{n}")
    return time.perf_counter() - start


def _one_fused_call(ledger: SqliteLedger, n: int) -> float:
    start = time.perf_counter()
    answer = ledger.reserve(_intent(n, f"f{n}"), send=True)
    assert isinstance(answer, Fresh)
    assert answer.sent
    ledger.complete(answer.call_id, ToolResult(structured={"note_id": n}), receipt=f"note-{n}")
    return time.perf_counter() - start


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": 1000 * ordered[len(ordered) // 2],
        "p95_ms": 1000 * ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))],
    }


def _concurrent(path: Path, calls: int, threads: int, shared: bool, offset: int) -> dict[str, Any]:
    common = open_ledger(path)
    samples: list[float] = []
    lock = threading.Lock()
    per_thread = calls // threads

    def worker(t: int) -> None:
        ledger = common if shared else open_ledger(path)
        local = [_one_call(ledger, offset + t * per_thread + i) for i in range(per_thread)]
        with lock:
            samples.extend(local)
        if not shared:
            ledger.close()

    start = time.perf_counter()
    pool = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    elapsed = time.perf_counter() - start
    common.close()
    return {"calls_per_s": len(samples) / elapsed, **_percentiles(samples)}


def run(calls: int, threads: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.db"
        ledger = open_ledger(path)
        _one_call(ledger, -1)  # warm up: schema, page cache
        serial = [_one_call(ledger, n) for n in range(calls)]
        fused = [_one_fused_call(ledger, n) for n in range(calls)]
        replays: list[float] = []
        for n in range(min(calls, 500)):
            t0 = time.perf_counter()
            answer = ledger.reserve(_intent(n, f"k{n}").model_copy(update={"call_id": f"bench/r{n}"}))
            replays.append(time.perf_counter() - t0)
            assert isinstance(answer, Replay)
        serial_elapsed = sum(serial)
        ledger.close()
        results: dict[str, Any] = {
            "calls": calls,
            "serial": {"calls_per_s": calls / serial_elapsed, **_percentiles(serial)},
            "serial_send_fused": {"calls_per_s": calls / sum(fused), **_percentiles(fused)},
            "replay": _percentiles(replays),
            f"threads_{threads}_shared": _concurrent(path, calls, threads, True, 1_000_000),
            f"threads_{threads}_separate": _concurrent(path, calls, threads, False, 2_000_000),
        }
        with open_ledger(path, recover=False) as ledger:
            t0 = time.perf_counter()
            report = ledger.verify()
            results["verify"] = {
                "ok": report.ok,
                "events": report.events,
                "rows": report.rows_checked,
                "seconds": time.perf_counter() - t0,
            }
        results["file_bytes"] = path.stat().st_size + sum(
            p.stat().st_size for p in path.parent.glob("bench.db-*")
        )
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    results = run(args.calls, args.threads)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"ledger cost per tool call (reserve + mark_sent + complete), {args.calls} calls")
    for name in (
        "serial",
        "serial_send_fused",
        f"threads_{args.threads}_shared",
        f"threads_{args.threads}_separate",
    ):
        row = results[name]
        print(
            f"  {name:22} {row['calls_per_s']:8.0f} calls/s   p50 {row['p50_ms']:6.2f} ms   "
            f"p95 {row['p95_ms']:6.2f} ms"
        )
    replay = results["replay"]
    label = "replay (one reserve)"
    print(f"  {label:22} {'':8}            p50 {replay['p50_ms']:6.2f} ms   p95 {replay['p95_ms']:6.2f} ms")
    v = results["verify"]
    print(f"verify: {v['events']} events, {v['rows']} rows in {v['seconds']:.2f} s (ok={v['ok']})")
    print(f"file size: {results['file_bytes'] / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
