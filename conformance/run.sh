#!/usr/bin/env bash
# Run the official MCP conformance suite against codemode, both sides, both requirement sets:
#   server: `codemode serve --transport http` (demo config, free 127.0.0.1 port)
#   client: codemode's host, via conformance/client_adapter.py (tools are called from a sandboxed program)
# Prints passed/total per requirement set and side, and the failures. Exit status: 0 when every
# failure is in conformance/baseline.json (and no baseline entry has gone stale), 1 otherwise,
# 3 when the prerequisites (npm, Node.js 22 package) cannot be installed.
#
#   bash conformance/run.sh                     # everything
#   bash conformance/run.sh --side server --set 2026-07-28
#   bash conformance/run.sh --help
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
# The pinned npm packages live outside the checkout (the one place this path is chosen).
export CODEMODE_CONFORMANCE_HOME="${CODEMODE_CONFORMANCE_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/codemode/conformance}"
bash "$here/install.sh"
python="${CODEMODE_PYTHON:-$root/.venv/bin/python}"
if [ ! -x "$python" ]; then
    echo "conformance: $python not found; run ./dev setup first (or set CODEMODE_PYTHON)" >&2
    exit 3
fi
exec "$python" "$here/run.py" "$@"
