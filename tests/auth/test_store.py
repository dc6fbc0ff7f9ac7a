"""The host's credential store: private, atomic, and refused rather than repaired."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyUrl

from codemode.auth import (
    CREDENTIALS_ENV_VAR,
    FileCredentialStore,
    StoredCredentials,
    StoreTokenStorage,
    default_credentials_path,
)
from codemode.errors import AuthError

RESOURCE = "https://mcp.example.test/mcp"


def test_a_new_store_file_is_private_to_its_owner(tmp_path: Path) -> None:
    store = FileCredentialStore(tmp_path / "creds" / "credentials.json")
    store.put(RESOURCE, StoredCredentials(server="remote", tokens={"access_token": "t"}))
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(store.path.parent.stat().st_mode) == 0o700
    assert store.get(RESOURCE) == StoredCredentials(server="remote", tokens={"access_token": "t"})
    leftovers = [p.name for p in store.path.parent.iterdir() if p.name != "credentials.json"]
    assert leftovers == [".credentials.json.lock"], "no temporary file is left behind"


def test_a_store_readable_by_others_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    store = FileCredentialStore(tmp_path / "credentials.json")
    store.put(RESOURCE, StoredCredentials(server="remote"))
    os.chmod(store.path, 0o644)
    before = store.path.read_bytes()
    with pytest.raises(AuthError, match=r"readable by other users \(mode 0644\); run `chmod 600"):
        store.get(RESOURCE)
    with pytest.raises(AuthError):
        store.put(RESOURCE, StoredCredentials(server="other"))
    assert store.path.read_bytes() == before


@pytest.mark.parametrize(
    "content", [b"{not json", b"[]", b'{"format": 2, "servers": {}}', b'{"format": 1, "servers": {"x": 3}}']
)
def test_a_damaged_store_is_refused_never_overwritten(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "credentials.json"
    path.write_bytes(content)
    os.chmod(path, 0o600)
    store = FileCredentialStore(path)
    with pytest.raises(AuthError, match="damaged and was left untouched") as caught:
        store.put(RESOURCE, StoredCredentials(server="remote"))
    assert path.read_bytes() == content
    assert "Move it aside" in str(caught.value)


def test_a_symlinked_store_is_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.json"
    target.write_text("{}")
    link = tmp_path / "credentials.json"
    link.symlink_to(target)
    with pytest.raises(AuthError, match="cannot open the credential store"):
        FileCredentialStore(link).get(RESOURCE)


def test_delete_forgets_one_server_only(tmp_path: Path) -> None:
    store = FileCredentialStore(tmp_path / "credentials.json")
    store.put(RESOURCE, StoredCredentials(server="remote"))
    store.put("https://other.example.test/mcp", StoredCredentials(server="other"))
    assert store.delete(RESOURCE) is True
    assert store.delete(RESOURCE) is False
    assert list(store.records()) == ["https://other.example.test/mcp"]


def test_the_default_path_honours_the_environment(tmp_path: Path) -> None:
    assert default_credentials_path({CREDENTIALS_ENV_VAR: str(tmp_path / "c.json")}) == tmp_path / "c.json"
    assert (
        default_credentials_path({"XDG_DATA_HOME": str(tmp_path)})
        == tmp_path / "codemode" / "credentials.json"
    )


@pytest.mark.anyio
async def test_tokens_keep_their_remaining_lifetime_across_a_restart(tmp_path: Path) -> None:
    store = FileCredentialStore(tmp_path / "credentials.json")
    storage = StoreTokenStorage(store, RESOURCE, "remote")
    await storage.set_tokens(OAuthToken(access_token="a", expires_in=3600, refresh_token="r"))
    record = store.get(RESOURCE)
    assert record is not None and record.obtained_at is not None
    # An hour later, in another process: the token has nothing left and must be refreshed.
    store.put(RESOURCE, record.model_copy(update={"obtained_at": record.obtained_at - 3600}))
    reloaded = await StoreTokenStorage(store, RESOURCE, "remote").get_tokens()
    assert reloaded is not None and reloaded.expires_in == 0 and reloaded.refresh_token == "r"


@pytest.mark.anyio
async def test_a_registration_with_another_issuer_drops_the_old_tokens(tmp_path: Path) -> None:
    store = FileCredentialStore(tmp_path / "credentials.json")
    storage = StoreTokenStorage(store, RESOURCE, "remote")
    first = OAuthClientInformationFull(
        client_id="c1",
        redirect_uris=[AnyUrl("http://127.0.0.1:1/callback")],
        issuer="https://as1.example.test",
    )
    await storage.set_client_info(first)
    await storage.set_tokens(OAuthToken(access_token="from-as1"))
    second = first.model_copy(update={"client_id": "c2", "issuer": "https://as2.example.test"})
    await storage.set_client_info(second)
    assert await storage.get_tokens() is None
    record = store.get(RESOURCE)
    assert record is not None and record.issuer == "https://as2.example.test"


@pytest.mark.anyio
async def test_a_preregistered_client_comes_from_the_config_not_the_store(tmp_path: Path) -> None:
    store = FileCredentialStore(tmp_path / "credentials.json")
    configured = OAuthClientInformationFull(
        client_id="pre", client_secret="s", redirect_uris=[AnyUrl("http://127.0.0.1:1/callback")]
    )
    storage = StoreTokenStorage(store, RESOURCE, "remote", configured)
    assert await storage.get_client_info() == configured
    await storage.set_tokens(OAuthToken(access_token="a"))
    record = store.get(RESOURCE)
    assert record is not None and record.client is None, "the configured secret is never copied to the store"


def test_a_store_in_a_folder_others_can_write_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    store = FileCredentialStore(shared / "credentials.json")
    store.put(RESOURCE, StoredCredentials(server="remote"))
    os.chmod(shared, 0o777)
    before = sorted(p.name for p in shared.iterdir())
    with pytest.raises(AuthError, match=r"can be written by other users; keep it in a folder of your own"):
        store.put(RESOURCE, StoredCredentials(server="remote", tokens={"access_token": "t"}))
    with pytest.raises(AuthError, match="can be written by other users"):
        store.get(RESOURCE)
    assert sorted(p.name for p in shared.iterdir()) == before


def test_a_lock_planted_as_a_symlink_is_not_followed(tmp_path: Path) -> None:
    store = FileCredentialStore(tmp_path / "credentials.json")
    victim = tmp_path / "victim"
    (tmp_path / ".credentials.json.lock").symlink_to(victim)
    with pytest.raises(AuthError, match="cannot open the credential store's lock"):
        store.put(RESOURCE, StoredCredentials(server="remote"))
    assert not victim.exists(), "nothing was created where the link points"
    assert not store.path.exists()


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_store_that_is_not_a_regular_file_is_refused_without_hanging(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "credentials.json"
    if kind == "fifo":
        os.mkfifo(path, 0o600)
    else:
        path.mkdir(mode=0o700)
    with pytest.raises(AuthError, match=r"is not a regular file; refusing to use it"):
        FileCredentialStore(path).get(RESOURCE)
