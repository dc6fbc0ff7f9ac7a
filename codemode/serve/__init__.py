"""``codemode serve``: codemode as an MCP server with a single ``run_code`` tool."""

from codemode.serve._app import CodemodeServer, Identity, TokenMap
from codemode.serve._run import BearerAuth, serve_http, serve_stdio

__all__ = ["BearerAuth", "CodemodeServer", "Identity", "TokenMap", "serve_http", "serve_stdio"]
