"""Signing in to remote MCP servers: the OAuth 2.1 client, sign-in flows and the credential store.

Credentials stay on the host: they are attached to requests by the server's HTTP client and
never enter the sandbox, the stub tree, logs, the ledger or error messages.
"""

from codemode.auth._host_auth import HostAuth
from codemode.auth._provider import StoreTokenStorage, oauth_client, preregistered_client
from codemode.auth._revoke import Revocation, revoke_tokens
from codemode.auth._sign_in import BrowserSignIn, HeadlessSignIn, NoSignIn, SignIn
from codemode.auth._store import (
    CREDENTIALS_ENV_VAR,
    CredentialStore,
    FileCredentialStore,
    StoredCredentials,
    default_credentials_path,
)

__all__ = [
    "CREDENTIALS_ENV_VAR",
    "BrowserSignIn",
    "CredentialStore",
    "FileCredentialStore",
    "HeadlessSignIn",
    "HostAuth",
    "NoSignIn",
    "Revocation",
    "SignIn",
    "StoreTokenStorage",
    "StoredCredentials",
    "default_credentials_path",
    "oauth_client",
    "preregistered_client",
    "revoke_tokens",
]
