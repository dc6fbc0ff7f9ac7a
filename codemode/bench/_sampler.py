"""Sandbox CPU seconds and peak memory, sampled from the process tree while a task runs.

The MCP servers (recognised by their configured command line) and their descendants are not
the sandbox; every other process below codemode is (warm pool members included, by the CPU
they use during the task). This sees the process
and bwrap backends; a Docker sandbox runs under the engine's daemon, not below codemode, so
for it both figures are reported as unknown (None) rather than as a misleading zero."""

from __future__ import annotations

import threading
from types import TracebackType

import psutil


class SandboxSampler:
    def __init__(
        self, server_args: list[list[str]], *, enabled: bool = True, interval_s: float = 0.02
    ) -> None:
        self.enabled = enabled
        self._server_args = [a for a in server_args if a]
        self._start_cpu: dict[int, float] = {}
        self.interval_s = interval_s
        self._me = psutil.Process()
        self._baseline: set[int] = set()
        self._cpu: dict[int, float] = {}
        self._peak_rss = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _is_server(self, proc: psutil.Process) -> bool:
        try:
            cmdline = proc.cmdline()
        except psutil.Error:
            return False
        return any(cmdline[-len(args) :] == args for args in self._server_args)

    def _servers(self) -> set[int]:
        pids: set[int] = set()
        for proc in self._me.children(recursive=True):
            if self._is_server(proc):
                pids.add(proc.pid)
                pids.update(c.pid for c in proc.children(recursive=True))
        return pids

    def _new_children(self) -> list[psutil.Process]:
        try:
            return [p for p in self._me.children(recursive=True) if p.pid not in self._baseline]
        except psutil.Error:
            return []

    @staticmethod
    def _cpu_of(proc: psutil.Process) -> float:
        times = proc.cpu_times()
        return times.user + times.system

    def _sample(self) -> None:
        rss = 0
        for proc in self._new_children():
            try:
                with proc.oneshot():
                    self._cpu[proc.pid] = self._cpu_of(proc) - self._start_cpu.get(proc.pid, 0.0)
                    rss += proc.memory_info().rss
            except psutil.Error:
                continue  # it ended between listing and reading: its last sample stands
        self._peak_rss = max(self._peak_rss, rss)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def __enter__(self) -> SandboxSampler:
        if self.enabled:
            self._baseline = self._servers()
            for proc in self._new_children():
                try:
                    self._start_cpu[proc.pid] = self._cpu_of(proc)
                except psutil.Error:
                    continue
            self._thread = threading.Thread(target=self._loop, name="bench-sampler", daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._thread is not None:
            self._sample()
            self._stop.set()
            self._thread.join()

    @property
    def cpu_s(self) -> float | None:
        return round(sum(self._cpu.values()), 3) if self.enabled else None

    @property
    def peak_mb(self) -> float | None:
        return round(self._peak_rss / 1_048_576, 1) if self.enabled else None
