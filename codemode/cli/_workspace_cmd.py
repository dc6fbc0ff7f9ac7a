"""``codemode workspace``: the files that outlive a run, for people (ls, get, rm, prune).

Nothing here starts a server or a sandbox: the commands read and change the workspace store
directly (the files under ``[workspace] root``, their metadata in the ledger's ``workspaces``
table), under the same locks and in the same table as the runs that write it.
"""

from __future__ import annotations

import base64
import datetime
import sys
from collections.abc import Generator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from codemode.cli._common import config_option, fail, handle_errors, json_option, load, print_json, warn

if TYPE_CHECKING:
    from codemode.config import Config
    from codemode.workspace import WorkspaceInfo, WorkspaceKey, WorkspaceStore

_WHO_HELP = "Whose workspace: the principal [default: the policy's default principal]."


def _who(fn: Any) -> Any:
    fn = click.option(
        "--session", default=None, help="The session's own workspace (default: the principal's)."
    )(fn)
    fn = click.option(
        "--tenant", default=None, help="The tenant [default: the principal's tenant in the policy]."
    )(fn)
    return click.option("--principal", default=None, help=_WHO_HELP)(fn)


def _key(config: Config, principal: str | None, tenant: str | None, session: str | None) -> WorkspaceKey:
    from codemode.errors import PolicyError
    from codemode.workspace import WorkspaceKey

    try:
        who, where = config.policy.identity(principal, tenant)
    except PolicyError:
        if principal is None or tenant is None:
            raise
        # A principal the policy no longer lists may still own a workspace: name both to reach it.
        who, where = principal, tenant
    return WorkspaceKey(tenant=where, principal=who, session=session)


@contextmanager
def _store(config_path: Path | None) -> Generator[tuple[Config, WorkspaceStore]]:
    """The configuration and its workspace store, on the configured ledger (closed after).

    The ledger is opened as it is: never created (a listing must not leave a ledger behind) and
    never recovered (settling other processes' calls is not a workspace command's business). With
    no ledger yet, no workspace was ever recorded: an empty private one answers exactly that."""
    from codemode.errors import NoLedgerError
    from codemode.ledger import open_ledger
    from codemode.workspace import open_store

    config = load(config_path)
    try:
        ledger = open_ledger(config.ledger_location(), create=False, recover=False)
    except NoLedgerError:
        ledger = open_ledger(":memory:")
    try:
        yield config, open_store(config, ledger.workspaces)
    finally:
        ledger.close()


def _info(info: WorkspaceInfo) -> dict[str, Any]:
    return {
        "tenant": info.key.tenant,
        "principal": info.key.principal,
        "session": info.key.session,
        "files": info.files,
        "bytes": info.bytes,
        "last_used": _when(info.last_used),
        "files_missing": info.missing,
    }


def _when(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).isoformat(timespec="seconds")


@click.group()
def workspace() -> None:
    """The files that outlive a run: one workspace per tenant, principal and session."""


@workspace.command("ls")
@config_option
@_who
@click.option(
    "--all", "every", is_flag=True, help="List every workspace (of --tenant, if given) instead of files."
)
@json_option
@handle_errors
def ls(
    config_path: Path | None,
    principal: str | None,
    tenant: str | None,
    session: str | None,
    every: bool,
    as_json: bool,
) -> None:
    """List the files of one workspace, or (--all) the workspaces the ledger records."""
    with _store(config_path) as (config, store):
        if every:
            _list_workspaces(store, tenant, principal, as_json)
            return
        key = _key(config, principal, tenant, session)
        files = store.listing(key)
    if as_json:
        print_json(
            {
                "workspace": {"tenant": key.tenant, "principal": key.principal, "session": key.session},
                "files": [{"path": name, "bytes": size} for name, size in sorted(files.items())],
            }
        )
        return
    if not files:
        click.echo(f"the workspace of {key.label()} is empty")
    for name, size in sorted(files.items()):
        click.echo(f"{size:>10}  {name}")


@workspace.command("get")
@config_option
@_who
@click.argument("path")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write the file here.")
@json_option
@handle_errors
def get(
    config_path: Path | None,
    principal: str | None,
    tenant: str | None,
    session: str | None,
    path: str,
    output: Path | None,
    as_json: bool,
) -> None:
    """Print one file of a workspace (or write it to --output)."""
    with _store(config_path) as (config, store):
        key = _key(config, principal, tenant, session)
        data = store.read(key, path)
    if as_json:
        try:
            text: str | None = data.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        print_json(
            {"path": path, "bytes": len(data), "text": text, "base64": base64.b64encode(data).decode()}
        )
    elif output is not None:
        output.write_bytes(data)
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()


@workspace.command("rm")
@config_option
@_who
@click.argument("paths", nargs=-1)
@click.option("--all", "whole", is_flag=True, help="Remove the whole workspace instead of some files.")
@json_option
@handle_errors
def rm(
    config_path: Path | None,
    principal: str | None,
    tenant: str | None,
    session: str | None,
    paths: tuple[str, ...],
    whole: bool,
    as_json: bool,
) -> None:
    """Remove files from a workspace, or (--all) the whole workspace."""
    if bool(paths) == whole:
        fail("name the files to remove, or --all for the whole workspace (not both)")
    with _store(config_path) as (config, store):
        key = _key(config, principal, tenant, session)
        if whole:
            removed = ["*"] if store.remove(key) else []
            missing: list[str] = [] if removed else ["*"]
        else:
            removed = [name for name in paths if store.remove(key, name)]
            missing = [name for name in paths if name not in removed]
    if as_json:
        print_json({"removed": removed, "missing": missing})
    else:
        for name in removed:
            click.echo(f"removed {'the workspace of ' + key.label() if name == '*' else name}")
    if missing:
        shown = "the workspace" if missing == ["*"] else ", ".join(repr(name) for name in missing)
        fail(f"{key.label()} has no {shown}", hint="see `codemode workspace ls`")


@workspace.command("prune")
@config_option
@json_option
@handle_errors
def prune(config_path: Path | None, as_json: bool) -> None:
    """Remove every workspace the ledger says is unused for longer than [workspace] ttl_s."""
    with _store(config_path) as (_, store):
        gone = store.prune()
    if as_json:
        print_json({"removed": [_info(info) for info in gone], "ttl_s": store.ttl_s})
        return
    for info in gone:
        click.echo(f"removed the workspace of {info.key.label()} (last used {_when(info.last_used)})")
    click.echo(f"{len(gone)} workspace(s) unused for more than {store.ttl_s:g} s removed")


def _list_workspaces(store: WorkspaceStore, tenant: str | None, principal: str | None, as_json: bool) -> None:
    found = store.workspaces(tenant=tenant, principal=principal)
    for folder in store.unrecorded():
        warn(
            f"{folder} is not in the ledger's workspaces, so no run sees it; it is kept",
            hint="a commit that crashed, or another ledger's workspace: remove it by hand once checked",
        )
    if as_json:
        print_json([_info(info) for info in found])
        return
    if not found:
        click.echo(f"no workspaces in {store.root}")
    for info in found:
        session_part = f" session {info.key.session}" if info.key.session else ""
        gone = f"; its files are not in {store.root}" if info.missing else ""
        click.echo(
            f"{info.key.tenant}/{info.key.principal}{session_part}: {info.files} file(s), "
            f"{info.bytes} bytes, last used {_when(info.last_used)}{gone}"
        )
