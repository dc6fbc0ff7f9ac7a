"""Configuration: ``codemode.toml`` models, loading, secrets and imports from other hosts."""

from codemode.config._compensation import CompensationRule
from codemode.config._import import import_mcp_servers
from codemode.config._load import CONFIG_ENV_VAR, config_from_mapping, default_config_path, load_config
from codemode.config._model import (
    BackendChoice,
    Config,
    HttpServerConfig,
    LedgerConfig,
    PinsConfig,
    SandboxConfig,
    ServerConfig,
    StdioServerConfig,
)
from codemode.config._oauth import IdentityProviderSettings, OAuthSettings
from codemode.config._policy import (
    RISK_ORDER,
    BudgetPolicy,
    ConsentPolicy,
    PolicyConfig,
    PrincipalPolicy,
    ResultPolicy,
    Risk,
    ScopeRule,
)
from codemode.config._quotas import QuotaLimits, QuotaPolicy
from codemode.config._retention import LedgerRetention
from codemode.config._search import SearchConfig, SemanticChoice
from codemode.config._secrets import MissingSecretError, check_references, resolve_references
from codemode.config._serve import EVERY_TENANT, OPERATOR, ServeConfig, TokenGrant
from codemode.config._starter import ServerEntry, demo_servers, no_servers_hint, starter_config
from codemode.config._workspace import WorkspaceConfig

__all__ = [
    "CONFIG_ENV_VAR",
    "EVERY_TENANT",
    "OPERATOR",
    "RISK_ORDER",
    "BackendChoice",
    "BudgetPolicy",
    "CompensationRule",
    "Config",
    "ConsentPolicy",
    "HttpServerConfig",
    "IdentityProviderSettings",
    "LedgerConfig",
    "LedgerRetention",
    "MissingSecretError",
    "OAuthSettings",
    "PinsConfig",
    "PolicyConfig",
    "PrincipalPolicy",
    "QuotaLimits",
    "QuotaPolicy",
    "ResultPolicy",
    "Risk",
    "SandboxConfig",
    "ScopeRule",
    "SearchConfig",
    "SemanticChoice",
    "ServeConfig",
    "ServerConfig",
    "ServerEntry",
    "StdioServerConfig",
    "TokenGrant",
    "WorkspaceConfig",
    "check_references",
    "config_from_mapping",
    "default_config_path",
    "demo_servers",
    "import_mcp_servers",
    "load_config",
    "no_servers_hint",
    "resolve_references",
    "starter_config",
]
