"""A ``run_code`` call through a real ``codemode serve``, made on a thread of its own.

The console tests wait on a browser or poll pages while the run waits for an operator; the
MCP client's call must go on meanwhile, so it gets its own thread and event loop.
"""

from __future__ import annotations

import threading
from typing import Any

import anyio
import mcp_types
from mcp import Client

from .test_serve import http


class BackgroundRun:
    def __init__(self, url: str, token: str, code: str, mode: str = "legacy") -> None:
        self.result: mcp_types.CallToolResult | None = None
        self.error: BaseException | None = None
        self._args = (url, token, code, mode)
        self._thread = threading.Thread(target=self._main, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        try:
            anyio.run(self._call)
        except BaseException as exc:  # handed to the test by wait()
            self.error = exc

    async def _call(self) -> None:
        url, token, code, mode = self._args
        # No elicitation callback: only the console can answer this run's approvals.
        async with Client(http(url, token), mode=mode) as client:
            self.result = await client.call_tool("run_code", {"code": code})

    def wait(self, timeout: float = 60.0) -> mcp_types.CallToolResult:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"run_code did not return within {timeout} s")
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result

    @property
    def summary(self) -> dict[str, Any]:
        return (self.result.structured_content if self.result is not None else None) or {}
