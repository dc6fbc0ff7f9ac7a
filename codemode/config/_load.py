"""Loading ``codemode.toml`` with errors that name the file, the key and the problem."""

from __future__ import annotations

import difflib
import os
import tomllib
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, cast

from pydantic import BaseModel, ValidationError

from codemode.config._model import (
    Config,
    HttpServerConfig,
    LedgerConfig,
    PinsConfig,
    SandboxConfig,
    StdioServerConfig,
)
from codemode.config._oauth import OAuthSettings
from codemode.config._policy import (
    BudgetPolicy,
    ConsentPolicy,
    PolicyConfig,
    PrincipalPolicy,
    ResultPolicy,
    ScopeRule,
)
from codemode.config._search import SearchConfig
from codemode.config._serve import ServeConfig, TokenGrant
from codemode.errors import ConfigError

DEFAULT_CONFIG_NAME = "codemode.toml"
CONFIG_ENV_VAR = "CODEMODE_CONFIG"

# Known keys per section, to suggest the right spelling of an unknown key.
_SECTION_MODELS: dict[str, list[type[BaseModel]]] = {
    "": [Config],
    "servers.*": [StdioServerConfig, HttpServerConfig],
    "sandbox": [SandboxConfig],
    "policy": [PolicyConfig],
    "policy.principals.*": [PrincipalPolicy],
    "policy.principals.*.scopes.*": [ScopeRule],
    "policy.consent": [ConsentPolicy],
    "policy.budget": [BudgetPolicy],
    "policy.results": [ResultPolicy],
    "ledger": [LedgerConfig],
    "pins": [PinsConfig],
    "serve": [ServeConfig],
    "serve.tokens.*": [TokenGrant],
    "search": [SearchConfig],
    "servers.*.oauth": [OAuthSettings],
}


def default_config_path(explicit: str | os.PathLike[str] | None = None) -> Path:
    """``explicit`` if given, else ``$CODEMODE_CONFIG``, else ``./codemode.toml``."""
    if explicit is not None:
        return Path(explicit)
    env = os.environ.get(CONFIG_ENV_VAR)
    return Path(env) if env else Path(DEFAULT_CONFIG_NAME)


# Longer names that other tools (and people) use for a key codemode spells short: too far apart
# for difflib alone ("environment" against "env").
_LONGER_SPELLINGS: dict[str, tuple[str, ...]] = {
    "env": ("environment", "environ", "env_vars"),
    "args": ("arguments", "argv"),
    "command": ("cmd", "executable"),
    "cwd": ("working_directory", "workdir", "directory"),
}


def unknown_key(key: str, known: Collection[str]) -> str:
    """The problem with a key that is not one of ``known``: "unknown key", and the closest known
    key when one is close. The one wording for codemode.toml and for an imported mcpServers file."""
    by_lower = {name.lower(): name for name in known}
    for name in known:
        for spelling in _LONGER_SPELLINGS.get(name, ()):
            by_lower.setdefault(spelling, name)
    close = difflib.get_close_matches(key.lower(), list(by_lower), n=1)
    return "unknown key" + (f" (did you mean {by_lower[close[0]]!r}?)" if close else "")


def _location(loc: tuple[int | str, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        text = str(item)
        # Discriminated unions add the tag (stdio/http) to the path; it is not a key the user wrote.
        if text in {"stdio", "http"} and parts and parts[0] == "servers" and len(parts) == 2:
            continue
        parts.append(text)
    return ".".join(parts)


def _known_keys(location: str) -> list[str]:
    parts = location.split(".")[:-1]  # the section that holds the unknown key
    # Named tables (servers.<name>, policy.principals.<name>) and list items become "*".
    wildcarded = [
        "*" if (i > 0 and parts[i - 1] in ("servers", "principals", "scopes", "tokens")) else part
        for i, part in enumerate(parts)
    ]
    section = ".".join(wildcarded)
    keys: set[str] = set()
    for model in _SECTION_MODELS.get(section, []):
        keys.update(model.model_fields)
    return sorted(keys)


def _problems(error: ValidationError) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    for item in error.errors(include_url=False):
        location = _location(item["loc"])
        if item["type"] == "extra_forbidden":
            message = unknown_key(location.rsplit(".", 1)[-1], _known_keys(location))
        elif item["type"] == "missing":
            message = "required key is missing"
        else:
            message = item["msg"].removeprefix("Value error, ")
        problems.append((location, message))
    return problems


def config_from_mapping(
    data: Mapping[str, Any], *, source: str = "<objects>", base_dir: Path | None = None
) -> Config:
    """Validate an already-parsed configuration mapping."""
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(source, _with_server_keys(_problems(exc), data)) from exc
    return config.with_origin(source, base_dir if base_dir is not None else Path.cwd())


def _with_server_keys(problems: list[tuple[str, str]], data: Mapping[str, Any]) -> list[tuple[str, str]]:
    """A server with neither ``command`` nor ``url`` is usually a misspelling of one of them:
    name each unknown key of that table (with a did-you-mean) instead of only the missing one."""
    raw_servers = data.get("servers")
    servers = cast(dict[str, Any], raw_servers) if isinstance(raw_servers, dict) else {}
    known = sorted(set(StdioServerConfig.model_fields) | set(HttpServerConfig.model_fields))
    out: list[tuple[str, str]] = []
    for location, message in problems:
        raw_table = (
            servers.get(location.removeprefix("servers.")) if location.startswith("servers.") else None
        )
        table = cast(dict[str, Any], raw_table) if isinstance(raw_table, dict) else {}
        unknown = [key for key in table if key not in known]
        if not unknown or "needs either" not in message:
            out.append((location, message))
            continue
        out += [(f"{location}.{key}", unknown_key(key, known)) for key in unknown]
        out.append((location, message))
    return out


def _read_toml(path: Path, source: str) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError as exc:
        raise ConfigError(
            source, [("", "file not found; create one with 'codemode init' or pass --config PATH")]
        ) from exc
    except OSError as exc:
        raise ConfigError(source, [("", f"cannot read the file: {exc.strerror}")]) from exc
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(source, [("", f"not UTF-8 text ({exc.reason} at byte {exc.start})")]) from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(source, [("", f"not valid TOML: {exc}")]) from exc


def _include_policy_file(data: dict[str, Any], base_dir: Path, source: str) -> dict[str, Any]:
    """``[policy] file = "policy.toml"`` keeps the policy in its own file (reviewed separately)."""
    policy = data.get("policy")
    if not isinstance(policy, dict) or "file" not in policy:
        return data
    section: dict[str, Any] = policy  # pyright: ignore[reportUnknownVariableType]
    if set(section) != {"file"} or not isinstance(section["file"], str):
        raise ConfigError(source, [("policy.file", "must be a string and the only key of [policy]")])
    policy_path = base_dir / section["file"]
    policy_data = _read_toml(policy_path, str(policy_path))
    if set(policy_data) == {"policy"}:
        policy_data = policy_data["policy"]
    try:
        PolicyConfig.model_validate(policy_data)
    except ValidationError as exc:
        problems = [(f"policy.{loc}" if loc else "policy", msg) for loc, msg in _problems(exc)]
        raise ConfigError(str(policy_path), problems) from exc
    return {**data, "policy": policy_data}


def load_config(path: str | os.PathLike[str] | None = None) -> Config:
    """Read and validate a ``codemode.toml``.

    Raises:
        ConfigError: the file is missing, is not valid TOML, or does not validate.
    """
    config_path = default_config_path(path)
    source = str(config_path)
    base_dir = config_path.resolve().parent
    data = _include_policy_file(_read_toml(config_path, source), base_dir, source)
    return config_from_mapping(data, source=source, base_dir=base_dir)
