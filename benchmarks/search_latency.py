"""Search latency at the whole benchmark catalog (3,529 tools), per ranker: what ``codemode search``
costs in a fresh process, and what serve's ``search_tools`` costs in a running server.

    .venv/bin/python benchmarks/search_bench.py --cli 7           # codemode search, every ranker
    .venv/bin/python benchmarks/search_bench.py --cli 7 --seed    # e5 starts with the bench's vectors
    .venv/bin/python benchmarks/search_bench.py --serve           # search_tools (tree.search)

Run through ``search_bench.py``, which chooses the rankers (``--rankers``) and e5's vector file
(``--vectors``).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.search_bench import (  # noqa: E402
    BFCL_QUERIES_FILE,
    BFCL_TOOLS_FILE,
    RANKERS,
    TOOLS_FILE,
    latency,
    load_queries,
    server_catalog,
)
from codemode.catalog import ServerCatalog  # noqa: E402


def bench_catalogs() -> list[ServerCatalog]:
    """Every benchmark server's tools as codemode records them (3,529 tools; a BFCL server named like
    a hand-written one gets a ``-bfcl`` suffix)."""
    catalogs: list[ServerCatalog] = []
    seen: set[str] = set()
    for path in (TOOLS_FILE, BFCL_TOOLS_FILE):
        for server in json.loads(path.read_text(encoding="utf-8"))["servers"]:
            name = server["name"] if server["name"] not in seen else f"{server['name']}-bfcl"
            seen.add(name)
            catalogs.append(server_catalog(name, server["tools"]))
    return catalogs


def cli_workspace(directory: Path) -> int:
    """A workspace whose codemode.lock approves every benchmark tool (3,529); returns the tool count.

    The servers' commands are never run: ``codemode search`` reads the lock.
    """
    from codemode.catalog import approve, load_lock, observe, save_lock
    from codemode.config import load_config

    catalogs = bench_catalogs()
    config_file = directory / "codemode.toml"
    config_file.write_text(
        "".join(f'[servers."{c.server}"]\ncommand = "not-started"\n\n' for c in catalogs), encoding="utf-8"
    )
    config = load_config(config_file)
    lock = load_lock(config.lock_path)
    for catalog in catalogs:
        lock, _ = observe(lock, catalog)
    save_lock(config.lock_path, approve(lock)[0])
    return sum(len(c.tools) for c in catalogs)


def cli_latency(runs: int, rankers: Sequence[str], seed: Path | None = None) -> str:
    """Wall time of ``codemode search`` in a fresh process over the whole benchmark catalog, for each
    ranker (its ``[search] semantic`` setting), side by side.

    The first run of each builds the cached index (parse the lock, render, tokenise, embed the tools
    with the ranker's model: a first build); later runs load it, the model and embed the query. Each
    ranker has its own cache folder, so every first build is cold - unless ``seed`` names a vector
    file (``--vectors``) to start e5's folder with: then its first build embeds nothing it holds.
    Figures are medians: the machine is shared.
    """
    import os
    import shutil
    import subprocess
    import tempfile

    codemode = str(Path(sys.executable).with_name("codemode"))
    lines: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        tools = cli_workspace(directory)
        for name in rankers:
            setting = RANKERS[name] or "off"
            cache_home = directory / f"cache-{setting}"
            seeded = seed is not None and setting == "e5" and seed.is_file()
            if seeded:
                folder = cache_home / "codemode" / "search"
                folder.mkdir(parents=True, mode=0o700)
                shutil.copyfile(seed, folder / "vectors.npz")  # pyright: ignore[reportArgumentType]
                (folder / "vectors.npz").chmod(0o600)
            env = {
                # Without PYTHONDONTWRITEBYTECODE the first run writes bytecode, as an install would.
                **{key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"},
                "XDG_CACHE_HOME": str(cache_home),
                "CODEMODE_SEARCH_SEMANTIC": setting,
            }
            for argv in (
                ["search", "book a flight to tokyo", "--json"],
                ["search", "close a github issue", "--k", "10", "--json"],
            ):
                times: list[float] = []
                ranker = ""
                for _ in range(runs + 1):
                    t0 = time.perf_counter()
                    done = subprocess.run(
                        [codemode, *argv], cwd=directory, env=env, capture_output=True, text=True, check=False
                    )
                    times.append((time.perf_counter() - t0) * 1000)
                    if done.returncode != 0:
                        raise SystemExit(done.stderr)
                    ranker = json.loads(done.stdout)[0]["ranker"]
                warm = times[1:]
                first = "first (tool vectors seeded)" if seeded else "first"
                lines.append(
                    f"{ranker:<9} codemode {' '.join(argv[:2])!s:<30} {tools} tools, fresh process, "
                    f"no server: {first} {times[0]:.0f} ms; cached median {statistics.median(warm):.0f} ms, "
                    f"min {min(warm):.0f} ms ({runs} runs)"
                )
                print(lines[-1], file=sys.stderr, flush=True)  # a cold first build takes minutes
    return "\n".join(lines)


def serve_latency(rankers: Sequence[str], repeat: int, vectors: Path) -> str:
    """What serve's ``search_tools`` costs at the whole catalog: ``tree.search`` (the index, the hits'
    text) on the tree a running server holds, its index built before timing (with the tool vectors
    of ``vectors``, copied to a cache folder of its own), over the test queries; p50 / p95 per ranker."""
    import os
    import shutil
    import tempfile

    home = Path(tempfile.mkdtemp())
    folder = home / "search"  # cache_dir() under CODEMODE_CACHE_DIR
    folder.mkdir(mode=0o700)
    if vectors.is_file():
        shutil.copyfile(vectors, folder / "vectors.npz")
        (folder / "vectors.npz").chmod(0o600)
    os.environ["CODEMODE_CACHE_DIR"] = str(home)  # the tree's vector cache: read on first use
    try:
        return _time_trees(rankers, repeat)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _time_trees(rankers: Sequence[str], repeat: int) -> str:
    from codemode.stubs import render_tree

    catalogs = bench_catalogs()
    tools = sum(len(c.tools) for c in catalogs)
    queries = [q for q in load_queries() + load_queries(BFCL_QUERIES_FILE) if q.split == "test"]
    lines: list[str] = []
    for name in rankers:
        tree = render_tree(catalogs, semantic=RANKERS[name] or "off")  # pyright: ignore[reportArgumentType]
        t0 = time.perf_counter()
        tree.search("warm up", k=5)  # builds the index: what a server does once per catalog
        build_s = time.perf_counter() - t0
        lat = latency(
            lambda query, k, tree=tree: [hit.tool for hit in tree.search(query, k=k)], queries, repeat
        )
        lines.append(
            f"{name:<9} search_tools at {tools} tools, {len(queries)} test queries x {repeat}: "
            f"p50 {lat['p50_ms']:.1f} ms, p95 {lat['p95_ms']:.1f} ms, max {lat['max_ms']:.1f} ms "
            f"(index built in {build_s:.1f} s)"
        )
        print(lines[-1], file=sys.stderr, flush=True)
    return "\n".join(lines)
