"""The ``operator`` role in ``[serve.tokens]`` and the checks ``--console`` makes before it starts."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from starlette.requests import Request

from codemode.cli._main import cli
from codemode.config import config_from_mapping
from codemode.errors import ConfigError
from codemode.serve._run import require_operator_token, token_map, transport_security

TOKEN = {"token": "${OPS_TOKEN}", "principal": "ops"}
ENV = {"OPS_TOKEN": "ops-token-0123456789abcdef"}


def test_a_token_may_carry_the_operator_role() -> None:
    config = config_from_mapping({"serve": {"tokens": {"ops": {**TOKEN, "roles": ["operator"]}}}})
    assert config.serve.tokens["ops"].roles == ["operator"]
    [identity] = token_map(config, ENV).identities()
    assert identity.is_operator and identity.principal == "ops"
    require_operator_token(config, token_map(config, ENV))  # an operator exists: no error


def test_without_roles_a_token_is_no_operator() -> None:
    config = config_from_mapping({"serve": {"tokens": {"ops": TOKEN}}})
    [identity] = token_map(config, ENV).identities()
    assert not identity.is_operator


@pytest.mark.parametrize(
    ("roles", "message"),
    [
        (["oprator"], "unknown role 'oprator': the roles codemode knows are operator"),
        ("operator", "valid list"),
        ([1], "valid string"),
    ],
)
def test_a_malformed_role_is_a_config_error_naming_the_key(roles: object, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        config_from_mapping({"serve": {"tokens": {"ops": {**TOKEN, "roles": roles}}}}, source="codemode.toml")
    text = str(error.value)
    assert "serve.tokens.ops.roles" in text and message in text, text


def test_two_grants_of_one_token_are_a_config_error_naming_both() -> None:
    """Otherwise the last would silently win: a bot's token could carry the operator role."""
    tokens = {"ops": {**TOKEN, "roles": ["operator"]}, "ci": {**TOKEN, "principal": "ci-bot"}}
    config = config_from_mapping({"serve": {"tokens": tokens}}, source="codemode.toml")
    with pytest.raises(ConfigError) as error:
        token_map(config, ENV)
    text = str(error.value)
    assert "serve.tokens.ci.token" in text and "the same token as serve.tokens.ops" in text, text
    assert ENV["OPS_TOKEN"] not in text, "the message never repeats the token"


OPERATOR_TOKEN = {**TOKEN, "roles": ["operator"]}


def _scope(grant: Mapping[str, object], **config: object) -> frozenset[str] | None:
    [identity] = token_map(
        config_from_mapping({**config, "serve": {"tokens": {"ops": grant}}}), ENV
    ).identities()
    return identity.console_tenants


OPS_IN_ACME = {"principals": {"ops": {"tenants": ["acme"]}}}
"""A token bound to tenant acme needs its principal in acme (else config validation refuses it)."""


def test_an_operator_sees_the_tenants_of_console_tenants_or_every_tenant_with_a_star() -> None:
    grant = {**OPERATOR_TOKEN, "tenant": "acme", "console_tenants": ["globex", "initech"]}
    assert _scope(grant, policy=OPS_IN_ACME) == {"globex", "initech"}
    assert _scope({**OPERATOR_TOKEN, "console_tenants": ["*"]}) is None


def test_without_console_tenants_an_operator_sees_the_tenant_its_runs_get() -> None:
    assert _scope({**OPERATOR_TOKEN, "tenant": "acme"}, policy=OPS_IN_ACME) == {"acme"}
    # No tenant on the token: the engine binds its runs to the policy's default tenant, or to
    # the principal's first tenant when the default is not one of its tenants.
    assert _scope(OPERATOR_TOKEN) == {"default"}
    assert _scope(OPERATOR_TOKEN, policy={"default_tenant": "acme"}) == {"acme"}
    principals = {"ops": {"tenants": ["globex", "acme"]}}
    assert _scope(OPERATOR_TOKEN, policy={"principals": principals}) == {"globex"}
    assert _scope(OPERATOR_TOKEN, policy={"principals": principals, "default_tenant": "acme"}) == {"acme"}
    # [serve] tenant is the stdio (and token-less) caller's tenant, not a token's.
    local_in_initech = {"principals": {"local": {"tenants": ["initech"]}}}
    assert _scope(OPERATOR_TOKEN, serve={"tenant": "initech"}, policy=local_in_initech) == {"default"}
    assert _scope(TOKEN) == frozenset(), "a token that is no operator sees no tenant"


def test_the_console_scope_is_the_tenant_the_engine_binds_the_tokens_runs_to() -> None:
    policy = {"principals": {"ops": {"tenants": ["globex", "acme"]}}}
    config = config_from_mapping({"policy": policy, "serve": {"tokens": {"ops": OPERATOR_TOKEN}}})
    [identity] = token_map(config, ENV).identities()
    _, bound = config.policy.identity(identity.principal, identity.tenant)
    assert identity.console_tenants == {bound}


def test_an_operator_whose_runs_have_no_tenant_must_name_its_console_tenants() -> None:
    policy = {"mode": "deny", "principals": {"alice": {"tenants": ["acme"]}}}
    config = config_from_mapping(
        {"policy": policy, "serve": {"tokens": {"ops": OPERATOR_TOKEN}}}, source="codemode.toml"
    )
    with pytest.raises(ConfigError) as error:
        token_map(config, ENV)
    text = str(error.value)
    assert "serve.tokens.ops: unknown principal 'ops'" in text, text
    assert 'console_tenants = ["<tenant>", ...]' in text and "[policy.principals.ops]" in text, text
    ok = config_from_mapping(
        {"policy": policy, "serve": {"tokens": {"ops": {**OPERATOR_TOKEN, "tenant": "acme"}}}}
    )
    assert [i.console_tenants for i in token_map(ok, ENV).identities()] == [{"acme"}]


@pytest.mark.parametrize(
    ("grant", "where", "message"),
    [
        (
            {"console_tenants": []},
            "console_tenants",
            'list the tenants this operator may see (e.g. console_tenants = ["acme"])',
        ),
        ({"console_tenants": ["acme", " "]}, "console_tenants", "a tenant name must not be empty"),
        ({"console_tenants": ["*", "acme"]}, "console_tenants", 'write console_tenants = ["*"] alone'),
        ({"console_tenants": ["ac*"]}, "console_tenants", "'ac*' is not a tenant name"),
        ({"console_tenants": "acme"}, "console_tenants", "valid list"),
        ({"console_tenants": [1]}, "console_tenants.0", "valid string"),
    ],
)
def test_a_malformed_console_tenants_is_a_config_error_saying_what_to_write(
    grant: dict[str, object], where: str, message: str
) -> None:
    with pytest.raises(ConfigError) as error:
        config_from_mapping(
            {"serve": {"tokens": {"ops": {**OPERATOR_TOKEN, **grant}}}}, source="codemode.toml"
        )
    text = str(error.value)
    assert f"serve.tokens.ops.{where}: " in text and message in text, text


def test_console_tenants_on_a_token_without_the_operator_role_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as error:
        config_from_mapping({"serve": {"tokens": {"ci": {**TOKEN, "console_tenants": ["acme"]}}}}, source="x")
    text = str(error.value)
    assert "serve.tokens.ci: " in text and 'add roles = ["operator"], or remove console_tenants' in text, text


def test_the_console_needs_an_operator_token() -> None:
    config = config_from_mapping({"serve": {"tokens": {"alice": {**TOKEN, "principal": "alice"}}}})
    with pytest.raises(ConfigError) as error:
        require_operator_token(config, token_map(config, ENV))
    assert 'roles = ["operator"]' in str(error.value) and "serve.tokens" in str(error.value)


def test_serve_console_without_an_operator_fails_before_starting(tmp_path: Path) -> None:
    config = tmp_path / "codemode.toml"
    config.write_text('[serve.tokens.alice]\ntoken = "${OPS_TOKEN}"\nprincipal = "alice"\n')
    result = CliRunner().invoke(
        cli, ["serve", "--transport", "http", "--console", "--config", str(config)], env=ENV
    )
    assert result.exit_code != 0
    assert 'roles = ["operator"]' in result.output


def test_the_console_needs_the_http_transport() -> None:
    result = CliRunner().invoke(cli, ["serve", "--console"])
    assert result.exit_code == 2
    assert "--console needs --transport http" in result.output


def _accepts(settings: TransportSecuritySettings, host_header: str) -> bool:
    """Whether the SDK's own check, as the MCP endpoint runs it, lets a request naming it in."""
    scope: dict[str, Any] = {"type": "http", "method": "GET", "headers": [(b"host", host_header.encode())]}
    refused = anyio.run(TransportSecurityMiddleware(settings).validate_request, Request(scope), False)
    return refused is None


@pytest.mark.parametrize(
    ("host", "allowed", "accepted", "refused"),
    [
        # Every interface: only the names configured, with any port or the one given.
        (
            "0.0.0.0",
            ["mcp.internal", "10.0.0.5:8765"],
            ["mcp.internal:8765", "10.0.0.5:8765"],
            ["evil.example:8765", "10.0.0.5:9999"],
        ),
        ("::", ["fd00::5"], ["[fd00::5]:8765"], ["evil.example:8765", "127.0.0.1:8765"]),
        # An IPv6 address is named in brackets, as a Host header writes it.
        ("fd00::5", [], ["[fd00::5]:8765"], ["fd00::5:8765", "evil.example:8765"]),
        ("127.0.0.1", [], ["127.0.0.1:8765", "localhost:8765", "[::1]:8765"], ["evil.example:8765"]),
    ],
)
def test_the_host_check_names_what_clients_send(
    host: str, allowed: list[str], accepted: list[str], refused: list[str]
) -> None:
    settings = transport_security(config_from_mapping({"serve": {"allowed_hosts": allowed}}), host, 8765)
    assert [h for h in accepted if not _accepts(settings, h)] == []
    assert [h for h in refused if _accepts(settings, h)] == []


def test_binding_to_every_interface_without_allowed_hosts_fails_before_starting(tmp_path: Path) -> None:
    config = tmp_path / "codemode.toml"
    config.write_text('[serve.tokens.alice]\ntoken = "${OPS_TOKEN}"\nprincipal = "alice"\n')
    result = CliRunner().invoke(
        cli, ["serve", "--transport", "http", "--host", "0.0.0.0", "--config", str(config)], env=ENV
    )
    assert result.exit_code != 0
    assert "serve.allowed_hosts" in result.output and "every interface" in result.output, result.output
