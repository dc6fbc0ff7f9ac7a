"""``[policy.quotas]``: its shape, a principal's table over the default, and mistakes refused at
load time with the place they are in."""

from __future__ import annotations

import pytest

from codemode.config import PolicyConfig, config_from_mapping
from codemode.errors import ConfigError


def test_a_principals_table_replaces_only_the_default_fields_it_sets() -> None:
    policy = PolicyConfig.model_validate(
        {
            "quotas": {
                "default": {"runs_per_minute": 10, "concurrent_runs": 2},
                "principals": {"alice": {"runs_per_minute": 100}},
                "tenants": {"acme": {"tool_calls_per_day": 5000, "money_per_day": 12.5}},
            }
        }
    )
    quotas = policy.quotas
    assert quotas.configured
    alice, bob = quotas.for_principal("alice"), quotas.for_principal("bob")
    assert (alice.runs_per_minute, alice.concurrent_runs) == (100, 2)
    assert (bob.runs_per_minute, bob.concurrent_runs) == (10, 2)
    assert quotas.for_tenant("acme").money_per_day == 12.5
    assert quotas.for_tenant("globex").empty, "a tenant without a table has no limits of its own"


def test_no_quotas_configured_by_default() -> None:
    assert not PolicyConfig().quotas.configured


@pytest.mark.parametrize(
    ("table", "where"),
    [
        ({"default": {"runs_per_minut": 1}}, "runs_per_minut"),
        ({"principals": {"alice": {"concurrent_runs": -1}}}, "concurrent_runs"),
        ({"tenants": {"acme": {"money_per_day": "lots"}}}, "money_per_day"),
    ],
)
def test_a_mistake_is_refused_naming_the_field(table: dict[str, object], where: str) -> None:
    with pytest.raises(ConfigError, match=where):
        config_from_mapping({"policy": {"quotas": table}})
