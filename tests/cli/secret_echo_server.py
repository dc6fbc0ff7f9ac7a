"""A raw JSON-RPC stdio MCP server that says its own credential everywhere it can.

It is started with the credential in ``$ECHO_SECRET`` (codemode resolves it from a ``${VAR}``
reference in the config) and repeats it, as is and encoded, on stderr and in every answer.

Usage: secret_echo_server.py MODE
  serve     tools ``whoami`` (read-only: the credential in structured content and text, as is,
            base64 at offsets 0, 1 and 2 inside longer values, URL-encoded, hex, Basic auth),
            ``refuse`` (read-only: a tool error quoting it) and ``rotate`` (a write: a JSON-RPC
            error quoting it, so its outcome is unknown)
  initerr   answer ``initialize`` with a JSON-RPC error quoting it
"""

from __future__ import annotations

import base64
import json
import os
import sys
import urllib.parse

MODE = sys.argv[1]
SECRET = os.environ["ECHO_SECRET"]
RAW = SECRET.encode()


def forms() -> dict[str, str]:
    """The credential as servers and libraries tend to write it."""
    return {
        "plain": SECRET,
        "sentence": f"connected with credential {SECRET} as svc",
        "base64": base64.b64encode(RAW).decode(),
        "base64_offset_1": base64.b64encode(b"u" + RAW + b"!").decode(),
        "base64_offset_2": base64.b64encode(b"us" + RAW).decode(),
        "base64_offset_0_inside": base64.b64encode(b"usr" + RAW + b"xy").decode(),
        "base64url": base64.urlsafe_b64encode(b"u:" + RAW).decode(),
        "basic_auth": "Basic " + base64.b64encode(b"svc:" + RAW).decode(),
        "url_encoded": "https://api.example/cb?k=" + urllib.parse.quote(SECRET, safe=""),
        "hex": RAW.hex(),
        "hex_upper": "0x" + RAW.hex().upper(),
    }


def send(message: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def say_on_stderr(when: str) -> None:
    for name, form in forms().items():
        sys.stderr.write(f"{when}: {name} {form}\n")
    sys.stderr.flush()


def tools() -> list[dict[str, object]]:
    schema = {"type": "object"}
    read_only = {"readOnlyHint": True}
    return [
        {"name": "whoami", "description": "Who am I.", "inputSchema": schema, "annotations": read_only},
        {"name": "refuse", "description": "Always refuses.", "inputSchema": schema, "annotations": read_only},
        {
            "name": "rotate",
            "description": "Rotate the credential.",
            "inputSchema": schema,
            "annotations": {"readOnlyHint": False, "destructiveHint": False},
        },
    ]


def call(ident: object, tool: str) -> None:
    say_on_stderr(f"call {tool}")
    if tool == "whoami":
        structured = {"user": "svc", **forms()}
        text = json.dumps(structured)
        result = {"content": [{"type": "text", "text": text}], "structuredContent": structured}
        send({"jsonrpc": "2.0", "id": ident, "result": result})
    elif tool == "refuse":
        text = f"upstream rejected the credential {SECRET} ({forms()['basic_auth']})"
        send(
            {
                "jsonrpc": "2.0",
                "id": ident,
                "result": {"content": [{"type": "text", "text": text}], "isError": True},
            }
        )
    else:
        error = {"code": -32603, "message": f"rotation failed for {SECRET}", "data": forms()}
        send({"jsonrpc": "2.0", "id": ident, "error": error})


def main() -> None:
    say_on_stderr("starting")
    for line in sys.stdin:
        message = json.loads(line)
        if "id" not in message:
            continue
        method, ident = message.get("method"), message["id"]
        if method == "initialize" and MODE == "initerr":
            say_on_stderr("initialize")
            error = {"code": -32603, "message": f"bad credential {SECRET} {forms()['base64_offset_1']}"}
            send({"jsonrpc": "2.0", "id": ident, "error": error})
        elif method == "initialize":
            capabilities: dict[str, object] = {"tools": {"listChanged": False}}
            info = {"name": "echo", "version": "1"}
            result = {"protocolVersion": "2025-11-25", "capabilities": capabilities, "serverInfo": info}
            send({"jsonrpc": "2.0", "id": ident, "result": result})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": ident, "result": {"tools": tools()}})
        elif method == "tools/call":
            call(ident, str(message.get("params", {}).get("name")))
        else:
            send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": "Method not found"}})


if __name__ == "__main__":
    main()
