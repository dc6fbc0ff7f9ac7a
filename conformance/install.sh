#!/usr/bin/env bash
# Install the pinned MCP conformance suite and Node.js 22 into $CODEMODE_CONFORMANCE_HOME/node_modules
# (run.sh sets it to a cache directory outside the checkout: third-party packages, with their own
# docs and references, never land inside the repository).
# Idempotent and fast on re-run: `npm ci` runs only when package-lock.json changed since the last
# install (or node_modules is incomplete). Uses the machine's npm (any Node.js that runs npm will
# do); the suite itself then runs on the Node.js 22 binary from the npm package node-linux-<arch>.
#
# Exit status: 0 installed; 3 the environment cannot install it (no npm, registry unreachable, or
# no Node.js 22 binary for this CPU) - callers treat that as "prerequisite missing".
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
home="${CODEMODE_CONFORMANCE_HOME:?run.sh sets CODEMODE_CONFORMANCE_HOME}"
mkdir -p "$home"
# Two runs may start at once (the test suite runs the auth scenarios beside the others): one installs.
exec 9>"$home/.install.lock"
flock 9
cp "$here/package.json" "$here/package-lock.json" "$home/"
cd "$home"

case "$(uname -m)" in
    x86_64 | amd64) arch=x64 ;;
    aarch64 | arm64) arch=arm64 ;;
    *) echo "conformance: no Node.js 22 package for CPU $(uname -m)" >&2; exit 3 ;;
esac
node22="node_modules/node-linux-$arch/bin/node"
suite="node_modules/@modelcontextprotocol/conformance/dist/index.js"
stamp="node_modules/.codemode-installed"
want="$(sha256sum package-lock.json | cut -d' ' -f1)"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$node22" ] && [ -f "$suite" ]; then
    exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
    echo "conformance: npm is not installed (Debian: apt-get install npm)" >&2
    exit 3
fi
echo "conformance: npm ci (pinned suite + Node.js 22)" >&2
if ! npm ci --no-audit --no-fund --loglevel=error >&2; then
    echo "conformance: npm ci failed" >&2
    exit 3
fi
if ! [ -x "$node22" ] || ! "$node22" --version | grep -q '^v22\.'; then
    echo "conformance: $node22 is missing or not Node.js 22" >&2
    exit 3
fi
echo "$want" >"$stamp"
