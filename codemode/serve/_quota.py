"""How ``run_code`` answers a run refused by ``[policy.quotas]``: a tool error whose
``structuredContent`` says which quota, its limit, what was used and when to retry.

Not an HTTP 429: over MCP's streamable HTTP the refusal is the answer to a ``tools/call`` request
inside a session, and a client reads that answer only from a 200 response (a 4xx is a failure
of the transport to it, and its JSON-RPC body would be lost). So the tool error carries
``retry_after_s`` and ``retry_at`` instead, as ``Retry-After`` would.
"""

from __future__ import annotations

import math

import mcp_types

from codemode.errors import QuotaExceededError

QUOTA_EXCEEDED = "quota_exceeded"


def quota_refused(error: QuotaExceededError) -> mcp_types.CallToolResult:
    """The tool error of a refused run (nothing of it ran)."""
    quota = error.quota
    structured = {
        "status": "refused",
        "error": QUOTA_EXCEEDED,
        "quota": quota.get("quota"),
        "holder": quota.get("holder"),
        "name": quota.get("name"),
        "limit": quota.get("limit"),
        "used": quota.get("used"),
        "retry_after_s": math.ceil(error.retry_after_s),
        "retry_at": quota.get("retry_at"),
    }
    return mcp_types.CallToolResult(
        content=[mcp_types.TextContent(type="text", text=str(error))],
        structured_content=structured,
        is_error=True,
    )
