"""Import the ``mcpServers`` JSON that MCP hosts already use.

Understood shapes: Claude Desktop / Cursor / Claude Code (``{"mcpServers": {...}}``, entries with
``command``/``args``/``env`` or ``type``/``url``/``headers``) and VS Code (``{"servers": {...}}``
with ``${env:VAR}``, ``${input:id}`` and ``${workspaceFolder}`` variables).

Secrets are not copied: a literal value of a secret-looking environment variable or header is
replaced by a ``${VAR}`` reference, and the import says which variables to set.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from codemode.config._load import unknown_key
from codemode.config._model import SERVER_NAME
from codemode.config._starter import ServerEntry
from codemode.errors import ConfigError

_KNOWN_KEYS = {
    "stdio": {"type", "transport", "command", "args", "env", "cwd", "envFile", "disabled"},
    "http": {"type", "transport", "url", "headers", "disabled"},
    "sse": {"type", "transport", "url", "headers", "disabled"},
}
"""What each kind of entry may hold; ``autoApprove``-style host settings are reported as unknown."""

_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_?KEY|PRIVATE|CREDENTIAL|AUTH", re.I)
_SECRET_HEADER = re.compile(r"^(authorization|proxy-authorization|cookie)$|token|key|secret", re.I)
_VSCODE_VAR = re.compile(
    r"\$\{(env|input):([^}]+)\}|\$\{workspaceFolder\}|\$\{([A-Za-z_][A-Za-z0-9_]*)(:-[^}]*)?\}"
)


@dataclass
class ImportResult:
    servers: dict[str, ServerEntry] = field(default_factory=lambda: {})
    comments: dict[str, str] = field(default_factory=lambda: {})
    warnings: list[str] = field(default_factory=lambda: [])
    secrets_to_set: list[str] = field(default_factory=lambda: [])
    unknown_keys: dict[str, list[str]] = field(default_factory=lambda: {})
    """Keys of each source entry that codemode does not understand (nothing is dropped silently)."""
    unknown_key_problems: list[tuple[str, str]] = field(default_factory=lambda: [])
    """The same keys as ``(location, problem)``, worded as for codemode.toml: what ``--strict``
    reports as a :class:`~codemode.errors.ConfigError`."""


def _env_name(text: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_]", "_", text).upper().strip("_") or "SECRET"
    return name if not name[0].isdigit() else "_" + name


class _Converter:
    def __init__(self, source: Path, result: ImportResult) -> None:
        self.source = source
        self.result = result
        # VS Code's ${workspaceFolder} is the folder that holds .vscode/mcp.json.
        parent = source.resolve().parent
        self.workspace = parent.parent if parent.name == ".vscode" else parent

    def text(self, server: str, value: str) -> str:
        """Rewrite host-specific variables into codemode's ${VAR} references."""
        out: list[str] = []
        pos = 0
        for match in _VSCODE_VAR.finditer(value):
            out.append(value[pos : match.start()].replace("$", "$$"))
            pos = match.end()
            kind, ident, plain, default = match.group(1), match.group(2), match.group(3), match.group(4)
            if kind == "env":
                out.append("${" + _env_name(ident) + "}")
            elif kind == "input":
                var = _env_name(ident)
                self.result.warnings.append(
                    f"{server}: VS Code input ${{input:{ident}}} became ${{{var}}}; "
                    f"set {var} in the environment"
                )
                self._needs(var)
                out.append("${" + var + "}")
            elif plain is not None:
                if default:
                    self.result.warnings.append(
                        f"{server}: default in ${{{plain}{default}}} dropped; {plain} must be set"
                    )
                out.append("${" + plain + "}")
            else:
                out.append(str(self.workspace).replace("$", "$$"))
        out.append(value[pos:].replace("$", "$$"))
        return "".join(out)

    def _needs(self, var: str) -> None:
        if var not in self.result.secrets_to_set:
            self.result.secrets_to_set.append(var)

    def secret_map(self, server: str, items: dict[str, str], kind: str) -> dict[str, str]:
        converted: dict[str, str] = {}
        for name, raw in items.items():
            text = self.text(server, raw)
            looks_secret = _SECRET_NAME.search(name) if kind == "env" else _SECRET_HEADER.search(name)
            if looks_secret and "${" not in text and text:
                var = _env_name(name if kind == "env" else f"{server}_{name}")
                prefix = ""
                if kind == "header" and text.lower().startswith("bearer "):
                    prefix = "Bearer "
                converted[name] = prefix + "${" + var + "}"
                self._needs(var)
                self.result.warnings.append(
                    f"{server}: literal {kind} {name!r} was not copied; it now reads ${{{var}}} - set {var}"
                )
            else:
                converted[name] = text
        return converted


def _unknown_keys(entry: dict[str, Any], known: set[str]) -> dict[str, str]:
    """Each key of ``entry`` that is not one of ``known``, with its problem worded as codemode.toml
    words it (with the closest known key)."""
    return {key: unknown_key(key, known) for key in sorted(entry) if key not in known}


def _str_map(value: Any, where: str, source: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(v, str) for v in cast(dict[Any, Any], value).values()
    ):
        raise ConfigError(source, [(where, "must be an object of strings")])
    return {str(k): v for k, v in cast(dict[Any, str], value).items()}


def import_mcp_servers(path: Path, *, needs_loopback: Callable[[str], bool]) -> ImportResult:
    """Read an ``mcpServers``-style JSON file and convert each server to a codemode entry.

    ``needs_loopback(url)`` says whether the network guard refuses a server's URL only because
    it is on this machine (:func:`codemode.net.needs_loopback`); such a server is imported with
    ``allow_loopback = true``. Configuration imports no network code, so the caller passes it.
    """
    source = str(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(source, [("", "file not found")]) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(source, [("", f"cannot read the file: {exc}")]) from exc
    except json.JSONDecodeError as exc:
        raise ConfigError(
            source, [("", f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})")]
        ) from exc
    if not isinstance(data, dict):
        raise ConfigError(source, [("", "expected a JSON object with 'mcpServers' or 'servers'")])
    document = cast(dict[str, Any], data)
    key = "mcpServers" if "mcpServers" in document else "servers" if "servers" in document else None
    if key is None:
        raise ConfigError(
            source, [("", "no 'mcpServers' (Claude, Cursor) or 'servers' (VS Code) object found")]
        )
    servers = document[key]
    if not isinstance(servers, dict):
        raise ConfigError(source, [(key, "must be an object mapping server names to definitions")])

    result = ImportResult()
    converter = _Converter(path, result)
    for raw_name, raw_entry in cast(dict[str, Any], servers).items():
        where = f"{key}.{raw_name}"
        if not isinstance(raw_entry, dict):
            raise ConfigError(source, [(where, "must be an object")])
        entry = cast(dict[str, Any], raw_entry)
        name = raw_name if SERVER_NAME.fullmatch(raw_name) else re.sub(r"[^A-Za-z0-9_.\-]", "-", raw_name)
        name = name.lstrip("-_.")[:64] or "server"
        if name != raw_name:
            result.warnings.append(
                f"server {raw_name!r} was renamed {name!r} (allowed: letters, digits, _ - .)"
            )
        if name in result.servers:
            raise ConfigError(source, [(where, f"two servers would both be called {name!r}; rename one")])
        kind = entry.get("type") or entry.get("transport") or ("http" if "url" in entry else "stdio")
        if entry.get("disabled") is True:
            result.warnings.append(f"{name}: disabled in the source file; imported with enabled = false")
        family = "stdio" if kind == "stdio" else "sse" if kind == "sse" else "http"
        unknown = _unknown_keys(entry, _KNOWN_KEYS[family])
        problems = [(f"{where}.{key}", problem) for key, problem in unknown.items()]
        if unknown:
            result.unknown_keys[name] = list(unknown)
            result.unknown_key_problems += problems
            result.warnings += [f"{location}: {problem}; not imported" for location, problem in problems]
        converted: dict[str, Any] = {}
        if kind == "stdio":
            command = entry.get("command")
            if not isinstance(command, str) or not command:
                # Usually a misspelled "command" or "url": name those keys first, as codemode.toml does.
                misspelled = _unknown_keys(entry, _KNOWN_KEYS["stdio"] | _KNOWN_KEYS["http"])
                missing = (where + ".command", "a stdio server needs a 'command' string (or an HTTP 'url')")
                raise ConfigError(source, [*((f"{where}.{k}", p) for k, p in misspelled.items()), missing])
            args = entry.get("args", [])
            if not isinstance(args, list) or not all(isinstance(a, str) for a in cast(list[Any], args)):
                raise ConfigError(source, [(where + ".args", "must be a list of strings")])
            converted["command"] = converter.text(name, command)
            if args:
                converted["args"] = [converter.text(name, a) for a in cast(list[str], args)]
            env = converter.secret_map(name, _str_map(entry.get("env"), where + ".env", source), "env")
            if env:
                converted["env"] = env
            if isinstance(entry.get("cwd"), str):
                converted["cwd"] = converter.text(name, entry["cwd"])
            if "envFile" in entry:
                result.warnings.append(
                    f"{name}: envFile is not supported; set those variables in the environment"
                )
        elif kind in ("http", "streamable-http", "streamableHttp"):
            url = entry.get("url")
            if not isinstance(url, str) or not url:
                missing = (where + ".url", "an HTTP server needs a 'url' string")
                raise ConfigError(source, [*problems, missing])
            converted["url"] = converter.text(name, url)
            if needs_loopback(url):
                converted["allow_loopback"] = True
                result.warnings.append(
                    f"{name}: allow_loopback = true, because its URL is on this machine "
                    "(codemode refuses loopback and plain http unless allowed)"
                )
            headers = converter.secret_map(
                name, _str_map(entry.get("headers"), where + ".headers", source), "header"
            )
            if headers:
                converted["headers"] = headers
        elif kind == "sse":
            result.warnings.append(
                f"{name}: skipped - the deprecated SSE transport is not supported; "
                'if the server also serves Streamable HTTP, add it with url = "…/mcp"'
            )
            continue
        else:
            raise ConfigError(
                source, [(where + ".type", f"unknown transport {kind!r} (expected stdio or http)")]
            )
        if entry.get("disabled") is True:
            converted["enabled"] = False
        result.servers[name] = converted
        # The keys left out stay named in the written file, beside the server they belong to
        # (repr: a key's control characters would make the TOML comment invalid).
        result.comments[name] = "\n".join(
            [f"imported from {path.name}"]
            + [f"not imported: {key!r}: {problem}" for key, problem in unknown.items()]
        )
    return result
