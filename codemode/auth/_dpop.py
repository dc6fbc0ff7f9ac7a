"""DPoP (RFC 9449): tokens bound to a key that never leaves the host.

A bearer token works for whoever holds it. A DPoP-bound token works only with a fresh proof, signed
for each request by the key it was issued to: a token copied from a log, a proxy or a crashed
process is useless on its own. codemode asks for one wherever the authorization server advertises
DPoP with ES256, for a person's sign-in and a machine's alike, by wrapping the OAuth client's flow:

- each token request carries a proof (``htm``, ``htu``, a fresh ``jti``, ``iat``);
- a token that comes back as ``token_type = "DPoP"`` is sent as ``Authorization: DPoP <token>``
  with a proof that also names the token (``ath``), never as ``Bearer``;
- a server that answers ``use_dpop_nonce`` (the authorization server with a 400, the MCP server
  with a 401) gets the request once more, with its nonce in the proof; the newest nonce of each
  origin is kept in memory only.

The key (EC P-256) is made at the first DPoP sign-in and kept in the server's record of the
host's credential store, beside the tokens bound to it: ``sync`` and ``run`` are separate
processes and must sign with the same key. It never reaches the sandbox, a log or an error, and
``auth logout`` forgets it with the tokens.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import time
import uuid
from collections.abc import AsyncGenerator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx2

from codemode.auth._store import CredentialStore, StoredCredentials

__all__ = ["DPoPAuth"]

log = logging.getLogger("codemode.auth")

ALGORITHM = "ES256"
_METADATA_PATHS = ("/.well-known/oauth-authorization-server", "/.well-known/openid-configuration")


class _Key:
    """The private key of one server's DPoP binding, and its public JWK."""

    def __init__(self, pem: str) -> None:
        from cryptography.hazmat.primitives.serialization import load_pem_private_key
        from jwt.algorithms import ECAlgorithm

        self.pem = pem
        self._private: Any = load_pem_private_key(pem.encode(), password=None)
        self.jwk: dict[str, Any] = json.loads(ECAlgorithm.to_jwk(self._private.public_key()))

    @classmethod
    def new(cls) -> _Key:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec

        private = ec.generate_private_key(ec.SECP256R1())
        pem = private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        return cls(pem.decode())

    def proof(self, method: str, url: str, *, nonce: str | None, token: str | None) -> str:
        import jwt

        parts = urlsplit(url)
        claims: dict[str, Any] = {
            "jti": str(uuid.uuid4()),
            "htm": method,
            "htu": urlunsplit((parts.scheme, parts.netloc, parts.path, "", "")),
            "iat": int(time.time()),
        }
        if nonce is not None:
            claims["nonce"] = nonce
        if token is not None:
            digest = hashlib.sha256(token.encode("ascii")).digest()
            claims["ath"] = base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")
        headers = {"typ": "dpop+jwt", "jwk": self.jwk}
        return jwt.encode(claims, self._private, algorithm=ALGORITHM, headers=headers)


class DPoPAuth(httpx2.Auth):
    """Wraps an OAuth client's ``httpx2.Auth`` with DPoP, where the authorization server offers it."""

    requires_response_body = True  # as the OAuth client it wraps: token and metadata responses

    def __init__(self, inner: httpx2.Auth, store: CredentialStore, resource: str, server: str) -> None:
        self._inner = inner
        self._store = store
        self._resource = resource
        self._server = server
        self._nonces: dict[str, str] = {}
        record = store.get(resource)
        self._key = _Key(record.dpop_key) if record is not None and record.dpop_key else None
        self._offered = self._key is not None
        self._bound = record is not None and record.dpop_bound

    async def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        flow = self._inner.async_auth_flow(request)
        outgoing = await flow.__anext__()
        while True:
            response = yield self._signed(outgoing)
            self._remember_nonce(outgoing, response)
            if await self._asks_for_a_nonce(response):
                response = yield self._signed(outgoing)
                self._remember_nonce(outgoing, response)
            response = await self._observed(outgoing, response)
            try:
                outgoing = await flow.asend(response)
            except StopAsyncIteration:
                return

    def _signed(self, request: httpx2.Request) -> httpx2.Request:
        if not self._offered:
            return request
        key = self._ensure_key()
        nonce = self._nonces.get(_origin(request.url))
        if _is_token_request(request):
            request.headers["DPoP"] = key.proof(request.method, str(request.url), nonce=nonce, token=None)
            return request
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if self._bound and token and scheme.lower() in ("bearer", "dpop"):
            request.headers["Authorization"] = f"DPoP {token}"
            request.headers["DPoP"] = key.proof(request.method, str(request.url), nonce=nonce, token=token)
        return request

    def _remember_nonce(self, request: httpx2.Request, response: httpx2.Response) -> None:
        nonce = response.headers.get("DPoP-Nonce")
        if nonce:
            self._nonces[_origin(request.url)] = nonce

    async def _asks_for_a_nonce(self, response: httpx2.Response) -> bool:
        if not self._offered or "DPoP-Nonce" not in response.headers:
            return False
        if response.status_code == 401:
            return 'error="use_dpop_nonce"' in response.headers.get("WWW-Authenticate", "")
        if response.status_code == 400:
            body = await _json(response)
            return body.get("error") == "use_dpop_nonce"
        return False

    async def _observed(self, request: httpx2.Request, response: httpx2.Response) -> httpx2.Response:
        """Turns DPoP on when the authorization server's metadata offers it; records a DPoP-bound
        token, and hands it to the OAuth client as the bearer type it knows."""
        if (
            request.method == "GET"
            and request.url.path.startswith(_METADATA_PATHS)
            and response.status_code == 200
        ):
            offered = (await _json(response)).get("dpop_signing_alg_values_supported")
            if isinstance(offered, list) and ALGORITHM in offered and _can_sign():
                self._offered = True
            return response
        if not (self._offered and _is_token_request(request) and response.status_code == 200):
            return response
        body = await _json(response)
        kind = body.get("token_type")
        bound = isinstance(kind, str) and kind.lower() == "dpop"
        if bound != self._bound:
            self._bound = bound
            self._save(bound=bound)
        if not bound:
            return response
        return httpx2.Response(
            200,
            headers={"Content-Type": "application/json"},
            content=json.dumps({**body, "token_type": "Bearer"}).encode(),
            request=request,
        )

    def _ensure_key(self) -> _Key:
        if self._key is None:
            self._key = _Key.new()
            self._save(bound=False)
        return self._key

    def _save(self, *, bound: bool) -> None:
        assert self._key is not None
        record = self._store.get(self._resource) or StoredCredentials(server=self._server)
        self._store.put(
            self._resource, record.model_copy(update={"dpop_key": self._key.pem, "dpop_bound": bound})
        )


def _can_sign() -> bool:
    """Whether the keys' library is installed (the ``machine-auth`` extra). Without it codemode
    takes the bearer tokens that a server offering DPoP also issues, as a client without DPoP does."""
    try:
        import cryptography  # noqa: F401  # pyright: ignore[reportUnusedImport]
    except ImportError:
        log.warning(
            "DPoP is offered but the 'cryptography' package is missing: pip install 'codemode[machine-auth]'"
        )
        return False
    return True


def _is_token_request(request: httpx2.Request) -> bool:
    if request.method != "POST" or "x-www-form-urlencoded" not in request.headers.get("content-type", ""):
        return False
    return b"grant_type=" in request.content


def _origin(url: httpx2.URL) -> str:
    return f"{url.scheme}://{url.netloc.decode('ascii')}"


async def _json(response: httpx2.Response) -> dict[str, Any]:
    await response.aread()
    try:
        body = json.loads(response.content)
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}  # pyright: ignore[reportUnknownVariableType]
