"""A ``codemode serve`` caller whose every run the policy would refuse is a configuration error:
a token bound to a tenant its principal is not in, or a principal deny mode does not know. The
message names the ``[policy.principals.X]`` table and what to add."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from codemode.cli._main import cli
from codemode.config import config_from_mapping
from codemode.errors import ConfigError

CI = {"token": "${CI_TOKEN}", "principal": "ci", "tenant": "acme"}
CI_TOKENS = {"ci": CI}


def problem(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as error:
        config_from_mapping(data, source="codemode.toml")
    return str(error.value)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (  # allow mode, no table: the principal is only in the default tenant
            {"serve": {"tokens": {"ci": CI}}},
            'serve.tokens.ci: principal "ci" is not in tenant "acme", so every run of this token would '
            'be refused: add [policy.principals.ci] with tenants = ["acme"] (without that table the '
            'principal is only in the default tenant, "default"), or change this token\'s tenant',
        ),
        (  # a table that lists other tenants
            {
                "policy": {"principals": {"ci": {"tenants": ["globex", "initech"]}}},
                "serve": {"tokens": {"ci": CI}},
            },
            'serve.tokens.ci: principal "ci" is not in tenant "acme", so every run of this token would '
            'be refused: add "acme" to [policy.principals.ci] tenants (now ["globex", "initech"]), or '
            "change this token's tenant",
        ),
        (  # deny mode does not know the principal at all
            {
                "policy": {"mode": "deny", "principals": {"alice": {"tenants": ["acme"]}}},
                "serve": {"tokens": {"ci": {"token": "${CI_TOKEN}", "principal": "ci"}}},
            },
            'serve.tokens.ci: the policy denies by default (mode = "deny") and has no '
            "[policy.principals.ci], so every run of this token would be refused: add "
            "[policy.principals.ci] with its tenants and tools",
        ),
        (  # the stdio caller of [serve]
            {"serve": {"principal": "alice", "tenant": "acme"}},
            'serve: principal "alice" is not in tenant "acme", so every run of the stdio caller would '
            'be refused: add [policy.principals.alice] with tenants = ["acme"]',
        ),
    ],
)
def test_a_caller_the_policy_always_refuses_is_a_config_error(data: dict[str, Any], expected: str) -> None:
    assert expected in problem(data)


def test_every_such_caller_is_named() -> None:
    bob = {**CI, "principal": "bob", "tenant": "globex"}
    text = problem({"serve": {"tokens": {"ci": CI, "bob": bob}}})
    assert "serve.tokens.ci: " in text and "serve.tokens.bob: " in text, text


def test_callers_the_policy_lets_run_are_accepted() -> None:
    principals = {"ci": {"tenants": ["globex", "acme"]}, "ops": {"tenants": ["acme"]}}
    tokens = {
        "ci": CI,
        "ci-default": {**CI, "tenant": None},  # no tenant: the principal's own
        "ops": {**CI, "principal": "ops", "roles": ["operator"]},
        "other": {"token": "${OTHER_TOKEN}", "principal": "anyone"},  # allow mode, default tenant
    }
    config_from_mapping({"policy": {"principals": principals}, "serve": {"tokens": tokens}})
    # Deny mode: an operator whose principal the policy does not know may still open the console.
    deny = {"mode": "deny", "principals": {"alice": {"tenants": ["acme"]}}}
    operator = {"token": "${OPS_TOKEN}", "principal": "ops", "tenant": "acme", "roles": ["operator"]}
    config_from_mapping({"policy": deny, "serve": {"tokens": {"ops": operator}}})


def test_serve_refuses_to_start_and_names_the_table_to_change(tmp_path: Path) -> None:
    config = tmp_path / "codemode.toml"
    config.write_text(
        '[policy.principals.ci]\ntenants = ["globex"]\n'
        '[serve.tokens.ci]\ntoken = "${CI_TOKEN}"\nprincipal = "ci"\ntenant = "acme"\n'
    )
    result = CliRunner().invoke(
        cli, ["serve", "--transport", "http", "--config", str(config)], env={"CI_TOKEN": "x" * 32}
    )
    assert result.exit_code == 2, result.output
    assert 'add "acme" to [policy.principals.ci] tenants (now ["globex"])' in result.output, result.output
    assert "Traceback" not in result.output
