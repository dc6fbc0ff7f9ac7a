"""The separate process of :mod:`codemode._schema_isolation`: one check, then exit.

It says ``ready`` once its imports are done, reads one JSON line ``{"schema", "instance"}``,
checks the instance with every regular expression allowed to run (a backtracking one too: the
parent kills this process at its time limit) and writes one JSON line: null (the instance
matches), ``{"message", "path"}`` (it does not) or ``{"kind", "detail"}`` (it could not be
checked).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from codemode._json_schema import Finding, SchemaCheck, SchemaError, Unchecked

_MESSAGE_LIMIT = 2_000
"""Characters of a message sent back (one may quote a megabyte of instance)."""


def _reply(request: dict[str, Any]) -> Any:
    try:
        check = SchemaCheck(request["schema"])
    except SchemaError as exc:
        return {"kind": "error", "detail": f"the schema is not valid JSON Schema ({exc.message})"}
    outcome = check.here(request["instance"], isolated=True)
    if isinstance(outcome, Finding):
        return {"message": outcome.message[:_MESSAGE_LIMIT], "path": list(outcome.path)}
    if isinstance(outcome, Unchecked):
        return {"kind": outcome.kind, "detail": outcome.detail[:_MESSAGE_LIMIT]}
    return None


def main() -> None:
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    request = json.loads(sys.stdin.buffer.readline())
    sys.stdout.write(json.dumps(_reply(request)) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
