"""The [policy] section: validated with clear errors, optionally kept in its own file."""

from __future__ import annotations

from pathlib import Path

import pytest

from codemode.config import PolicyConfig, PrincipalPolicy, load_config
from codemode.errors import ConfigError


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_a_full_policy_loads(tmp_path: Path) -> None:
    config = load_config(
        write(
            tmp_path / "codemode.toml",
            """
[policy]
mode = "deny"
[policy.principals.alice]
tenants = ["acme"]
tools = ["crm/*"]
scopes = [{ tools = ["crm/*"], argument = "customer_id", allow = ["CUST-00*"], access = "read" }]
[policy.budget]
calls_per_tool = { "crm/add_note" = 2 }
""",
        )
    )
    alice = config.policy.principal("alice")
    assert alice is not None and alice.scopes[0].access == "read"
    assert config.policy.principal("mallory") is None, "deny mode: unknown principals get nothing"
    assert config.policy.budget.calls_per_tool == {"crm/add_note": 2}


@pytest.mark.parametrize(("mode", "tools"), [("deny", []), ("allow", ["*"])])
def test_a_principal_without_tools_gets_none_in_deny_mode_and_all_in_allow_mode(
    tmp_path: Path, mode: str, tools: list[str]
) -> None:
    text = f'[policy]\nmode = "{mode}"\n[policy.principals.alice]\ntenants = ["acme"]\n'
    alice = load_config(write(tmp_path / "codemode.toml", text)).policy.principal("alice")
    assert alice is not None and alice.tools == tools


def test_a_principal_built_in_code_without_tools_gets_none_in_deny_mode() -> None:
    policy = PolicyConfig(
        mode="deny",
        principals={"alice": PrincipalPolicy(tenants=["acme"]), "bob": PrincipalPolicy(tools=["crm/*"])},
    )
    alice, bob = policy.principal("alice"), policy.principal("bob")
    assert alice is not None and alice.tools == [] and alice.tenants == ["acme"]
    assert bob is not None and bob.tools == ["crm/*"], "a listed grant stays as written"


def test_resource_and_prompt_grants_load(tmp_path: Path) -> None:
    text = (
        '[policy]\nmode = "deny"\n[policy.principals.alice]\ntools = ["crm/get_customer"]\n'
        'resources = ["crm/crm://customers/*", "docs/*"]\nprompts = ["crm/summarise_*"]\n'
    )
    alice = load_config(write(tmp_path / "codemode.toml", text)).policy.principal("alice")
    assert alice is not None
    assert alice.resources == ["crm/crm://customers/*", "docs/*"] and alice.prompts == ["crm/summarise_*"]


@pytest.mark.parametrize(
    ("key", "selector", "message"),
    [
        ("resources", "crm://customers/*", "not a resource selector: write SERVER/URI-GLOB"),
        ("resources", "crm", "not a resource selector"),
        ("resources", "crm/", "not a resource selector"),
        ("resources", "", "not a resource selector"),
        ("prompts", "crm", "not a prompt selector: write SERVER/PROMPT"),
        ("prompts", "a/b/c", "not a prompt selector"),
    ],
)
def test_a_malformed_resource_or_prompt_selector_is_an_error(
    tmp_path: Path, key: str, selector: str, message: str
) -> None:
    text = f'[policy.principals.alice]\n{key} = ["{selector}"]\n'
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path / "codemode.toml", text))
    assert f"policy.principals.alice.{key}.0" in str(info.value)
    assert message in str(info.value)


def test_deny_mode_without_principals_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path / "codemode.toml", '[policy]\nmode = "deny"\n'))
    assert "needs at least one" in str(info.value)


@pytest.mark.parametrize("selector", ["crm", "a/b/c", ""])
def test_a_malformed_tool_selector_is_an_error(tmp_path: Path, selector: str) -> None:
    text = f'[policy.principals.alice]\ntools = ["{selector}"]\n'
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path / "codemode.toml", text))
    assert "policy.principals.alice.tools.0" in str(info.value)
    assert "not a tool selector" in str(info.value)


def test_an_unknown_policy_key_gets_a_suggestion(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path / "codemode.toml", "[policy.budget]\ncalls_per_runs = 5\n"))
    assert info.value.problems == [
        ("policy.budget.calls_per_runs", "unknown key (did you mean 'calls_per_run'?)")
    ]


def test_the_policy_can_live_in_its_own_file(tmp_path: Path) -> None:
    write(tmp_path / "policy.toml", '[policy]\nmode = "allow"\n[policy.consent]\nalways = ["crm/*"]\n')
    config = load_config(write(tmp_path / "codemode.toml", '[policy]\nfile = "policy.toml"\n'))
    assert config.policy.consent.always == ["crm/*"]


def test_errors_in_a_policy_file_name_that_file(tmp_path: Path) -> None:
    policy = write(tmp_path / "policy.toml", "[consent]\nrequire_at_risk = 'extreme'\n")
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path / "codemode.toml", '[policy]\nfile = "policy.toml"\n'))
    assert str(policy) in str(info.value)
    assert "policy.consent.require_at_risk" in str(info.value)


def test_serve_tokens_must_be_references_or_literals_without_stray_dollars(tmp_path: Path) -> None:
    text = '[serve.tokens.ci]\ntoken = "$oops"\nprincipal = "ci"\n'
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path / "codemode.toml", text))
    assert "serve.tokens.ci.token" in str(info.value)
