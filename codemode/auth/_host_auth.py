"""What the host needs to sign its requests to OAuth servers: a store and a way to sign in."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import httpx2

from codemode.auth._dpop import DPoPAuth
from codemode.auth._enterprise import enterprise_client
from codemode.auth._machine import machine_client
from codemode.auth._provider import oauth_client
from codemode.auth._sign_in import NoSignIn, SignIn
from codemode.auth._store import CredentialStore, FileCredentialStore
from codemode.config import HttpServerConfig

__all__ = ["HostAuth"]


@dataclass(frozen=True)
class HostAuth:
    """The credential store and the sign-in of one host. By default the user's store, and no
    sign-in at all: only ``codemode auth login`` (or an API caller that asks) opens one."""

    store: CredentialStore = field(default_factory=FileCredentialStore)
    sign_in: Callable[[str, HttpServerConfig], SignIn] = lambda server, _config: NoSignIn(server)

    def auth_for(
        self, server: str, config: HttpServerConfig, url: str, environ: Mapping[str, str]
    ) -> httpx2.Auth | None:
        """The auth that signs ``server``'s requests, or None when it has no ``[oauth]``. Each
        grant's client is wrapped with DPoP, which binds the tokens to a key where the
        authorization server offers it (and changes nothing where it does not)."""
        if config.oauth is None:
            return None
        client: httpx2.Auth
        if config.oauth.grant == "identity_assertion":
            client = enterprise_client(server, config, url, store=self.store, environ=environ)
        elif config.oauth.grant != "authorization_code":
            client = machine_client(server, config.oauth, url, store=self.store, environ=environ)
        else:
            sign_in = self.sign_in(server, config)
            client = oauth_client(server, config, url, store=self.store, sign_in=sign_in, environ=environ)
        return DPoPAuth(client, self.store, url, server)
