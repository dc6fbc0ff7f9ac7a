"""``codemode skill``: save, review, approve, revoke, roll back, compare and move saved skills.

A skill is checked against the approved tools of codemode.lock (no server is started) and its
versions are kept in the ledger. A person's ``add`` approves the new version at once; a run's
proposal and an ``import`` wait for ``skill approve``.
"""

from __future__ import annotations

import sys
from collections.abc import Generator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from codemode.cli._common import EXIT_USAGE, config_option, fail, handle_errors, json_option, load, print_json

if TYPE_CHECKING:
    from codemode.config import Config
    from codemode.ledger import SkillVersion
    from codemode.skills import SkillState, TenantSkills

_by_option = click.option(
    "--by",
    default="cli",
    show_default=True,
    help="Who does it (kept in the ledger); a run's proposal cannot be approved by its proposer.",
)
_tenant_option = click.option("--tenant", help="Whose skills [default: policy.default_tenant].")
_version_option = click.option(
    "--version", "version", type=int, default=None, help="One version [default: the newest]."
)


@contextmanager
def _skills(config_path: Path | None, tenant: str | None) -> Generator[tuple[Config, TenantSkills]]:
    from codemode.cli._tree_cmd import load_tree
    from codemode.ledger import open_ledger
    from codemode.skills import TenantSkills

    config = load(config_path)
    ledger = open_ledger(config.ledger_location())
    try:
        yield config, TenantSkills(ledger.skills, tenant or config.policy.default_tenant, load_tree(config))
    finally:
        ledger.close()


def _versions(skills: TenantSkills, name: str) -> list[SkillVersion]:
    versions = skills.book.versions(skills.tenant, name)
    if not versions:
        fail(f"no skill {name!r} in tenant {skills.tenant!r}", hint="codemode skill list")
    return versions


def _pick(skills: TenantSkills, name: str, version: int | None) -> SkillVersion:
    versions = _versions(skills, name)
    if version is None:
        live = [v for v in versions if v.status != "revoked"]
        return (live or versions)[-1]
    found = [v for v in versions if v.version == version]
    if found:
        return found[0]
    return fail(
        f"skill {name!r} has no version {version} (it has {', '.join(str(v.version) for v in versions)})"
    )


def _row(version: SkillVersion, state: SkillState | None) -> dict[str, Any]:
    row = version.model_dump(mode="json", exclude={"source"})
    active = state is not None and state.version.skill_id == version.skill_id
    row["active"] = active
    row["stale"] = list(state.stale) if active and state is not None else []
    return row


def _summary(row: dict[str, Any]) -> str:
    mark = "stale" if row["stale"] else ("active" if row["active"] else row["status"])
    return f"{row['name']:<24} v{row['version']:<4} {mark:<9} {row['description']}"


def _read_source(file: Path) -> str:
    try:
        return (sys.stdin.read() if str(file) == "-" else file.read_text(encoding="utf-8")).replace(
            "\r\n", "\n"
        )
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"cannot read {file}: {exc}", code=EXIT_USAGE)


def _description(source: str, given: str | None) -> str:
    import ast

    if given:
        return given
    try:
        doc = ast.get_docstring(ast.parse(source))
    except SyntaxError:
        doc = None  # the check says where it does not parse
    return doc.strip().splitlines()[0] if doc else ""


def _done(as_json: bool, version: SkillVersion, message: str) -> None:
    if as_json:
        print_json(version.model_dump(mode="json"))
    else:
        click.echo(message)


@click.group()
def skill() -> None:
    """Saved skills: programs kept as importable modules (skills/<name>.py), reviewed like tools.

    \b
    codemode skill add NAME FILE           check FILE and save it, approved (--update: new version)
    codemode skill list                    the tenant's skills: active, stale or proposed
    codemode skill show NAME               one skill's functions, dependencies and source
    codemode skill review                  proposals and stale skills waiting for a person
    codemode skill approve NAME            approve a proposal, or re-approve a stale skill
    codemode skill revoke NAME             withdraw a skill (every version, or --version)
    codemode skill rollback NAME           make an earlier version the active one again
    codemode skill diff NAME               what changed: its dependencies' pins and its source
    codemode skill export NAME             write a skill to a file (import checks its digest)
    codemode skill import FILE             propose a skill from an export file
    """


@skill.command("list")
@config_option
@json_option
@_tenant_option
@click.option("--all", "show_all", is_flag=True, help="Every version, revoked ones too.")
@handle_errors
def list_skills(config_path: Path | None, as_json: bool, tenant: str | None, show_all: bool) -> None:
    """The tenant's skills: the active version of each, with proposals and stale ones marked."""
    with _skills(config_path, tenant) as (_, skills):
        states = skills.states()
        versions = skills.book.versions(skills.tenant)
    rows = [_row(v, states.get(v.name)) for v in versions]
    if not show_all:
        newest_live = {v.name: v.version for v in versions if v.status != "revoked"}
        rows = [
            r
            for r in rows
            if r["active"] or (r["status"] == "proposed" and newest_live[r["name"]] == r["version"])
        ]
    if as_json:
        print_json(rows)
        return
    if not rows:
        click.echo(f"no skills in tenant {skills.tenant!r} (add one: codemode skill add NAME FILE)")
    for row in rows:
        click.echo(_summary(row))


@skill.command()
@config_option
@json_option
@_tenant_option
@_version_option
@click.argument("name")
@handle_errors
def show(config_path: Path | None, as_json: bool, tenant: str | None, version: int | None, name: str) -> None:
    """One skill: its functions, what it imports (with pins), its status and its source."""
    from codemode.skills import SkillError, check_skill

    with _skills(config_path, tenant) as (_, skills):
        picked = _pick(skills, name, version)
        state = skills.states().get(name)
        known = skills.known(excluding=name)
    row = _row(picked, state) | {"source": picked.source}
    # The functions as written: read leniently, since a stale skill's imports may be gone.
    try:
        shape = check_skill(name, picked.source, known)
        row["functions"] = [{"signature": f.signature, "doc": f.doc} for f in shape.functions]
    except SkillError:  # shown without signatures; `skill diff` says what changed
        row["functions"] = []
    if as_json:
        print_json(row)
        return
    click.echo(_summary(row))
    click.echo(f"  proposed by {picked.proposed_by} at {picked.proposed_at:%Y-%m-%d %H:%M}")
    if picked.approved_by:
        click.echo(f"  approved by {picked.approved_by}")
    for why in row["stale"]:
        click.echo(f"  stale: {why}")
    for module, pin in picked.deps.items():
        click.echo(f"  imports {module} ({pin[:19]})")
    for function in row["functions"]:
        click.echo(f"\n{function['signature']}\n    {function['doc']}")
    click.echo(f"\n# skills/{name}.py\n{picked.source}")


@skill.command()
@config_option
@json_option
@_tenant_option
@_by_option
@click.option("--description", default=None, help="One line [default: the module's docstring].")
@click.option("--update", is_flag=True, help="Add a new version of a skill that exists.")
@click.argument("name")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@handle_errors
def add(
    config_path: Path | None,
    as_json: bool,
    tenant: str | None,
    by: str,
    description: str | None,
    update: bool,
    name: str,
    file: Path,
) -> None:
    """Check FILE as skill NAME and save it, approved (you are the person reviewing it)."""
    source = _read_source(file)
    with _skills(config_path, tenant) as (_, skills):
        saved = skills.save(
            name, source, _description(source, description), by=by, approve=True, new_version=update
        )
    _done(as_json, saved, f"saved skill {name} v{saved.version}: from skills.{name} import ...")


@skill.command()
@config_option
@json_option
@_tenant_option
@handle_errors
def review(config_path: Path | None, as_json: bool, tenant: str | None) -> None:
    """Proposals and stale skills waiting for a person, with what each imports and its source."""
    with _skills(config_path, tenant) as (_, skills):
        states = skills.states()
        versions = skills.book.versions(skills.tenant)
    newest = {v.name: v for v in versions if v.status != "revoked"}
    waiting = [v for v in newest.values() if v.status == "proposed"]
    stale = [s.version for s in states.values() if s.stale]
    rows = [_row(v, states.get(v.name)) | {"source": v.source} for v in waiting + stale]
    if as_json:
        print_json(rows)
        return
    if not rows:
        click.echo("nothing to review")
    for row in rows:
        click.echo(_summary(row))
        if row["proposed_in_run"]:
            click.echo(f"  proposed from run {row['proposed_in_run']} by {row['proposed_by']}")
        for why in row["stale"]:
            click.echo(f"  stale: {why}")
        click.echo("  " + "\n  ".join(row["source"].splitlines()))
        click.echo(f"  approve: codemode skill approve {row['name']}\n")


@skill.command("approve")
@config_option
@json_option
@_tenant_option
@_by_option
@_version_option
@click.option("--note", default=None, help="Why (kept in the ledger).")
@click.argument("name")
@handle_errors
def approve_skill(
    config_path: Path | None,
    as_json: bool,
    tenant: str | None,
    by: str,
    version: int | None,
    note: str | None,
    name: str,
) -> None:
    """Approve NAME's proposal, or re-approve a stale skill against the tools as they are now."""
    from codemode.skills import SkillError, approves_own_skills

    with _skills(config_path, tenant) as (config, skills):
        picked = _pick(skills, name, version)
        try:
            done = skills.approve(picked, by=by, allow_self=approves_own_skills(config.policy, by), note=note)
        except SkillError as exc:
            fail(str(exc))
    _done(as_json, done, f"approved skill {name} v{done.version}")


@skill.command()
@config_option
@json_option
@_tenant_option
@_by_option
@click.option("--version", "version", type=int, default=None, help="Only this version [default: every one].")
@click.option("--note", default=None, help="Why (kept in the ledger).")
@click.argument("name")
@handle_errors
def revoke(
    config_path: Path | None,
    as_json: bool,
    tenant: str | None,
    by: str,
    version: int | None,
    note: str | None,
    name: str,
) -> None:
    """Withdraw NAME: runs no longer see it. Its versions stay in the ledger."""
    with _skills(config_path, tenant) as (_, skills):
        _versions(skills, name)
        done = skills.book.revoke(skills.tenant, name, by=by, version=version, note=note)
    if as_json:
        print_json([v.model_dump(mode="json") for v in done])
    else:
        click.echo(f"revoked skill {name} v{', v'.join(str(v.version) for v in done)}")


@skill.command()
@config_option
@json_option
@_tenant_option
@_by_option
@click.option(
    "--to", "to", type=int, default=None, help="The version to return to [default: the one before]."
)
@click.argument("name")
@handle_errors
def rollback(
    config_path: Path | None, as_json: bool, tenant: str | None, by: str, to: int | None, name: str
) -> None:
    """Make an earlier approved version of NAME active again (as a new version, checked now)."""
    with _skills(config_path, tenant) as (_, skills):
        versions = _versions(skills, name)
        state = skills.states().get(name)
        current = state.version.version if state is not None else None
        once_approved = [v for v in versions if v.approved_at is not None and v.version != current]
        if to is not None:
            once_approved = [v for v in once_approved if v.version == to]
        elif current is not None:
            once_approved = [v for v in once_approved if v.version < current]
        if not once_approved:
            which = f"version {to}" if to is not None else "an earlier approved version"
            fail(f"skill {name} has no {which} to roll back to", hint="codemode skill list --all")
        target = once_approved[-1]
        note = f"rollback to v{target.version}"
        done = skills.save(
            name, target.source, target.description, by=by, approve=True, new_version=True, note=note
        )
    _done(as_json, done, f"skill {name} v{done.version} is active: the source of v{target.version}")


@skill.command()
@config_option
@json_option
@_tenant_option
@_version_option
@click.option(
    "--against",
    type=int,
    default=None,
    help="Compare the source with this version [default: the one before].",
)
@click.argument("name")
@handle_errors
def diff(
    config_path: Path | None,
    as_json: bool,
    tenant: str | None,
    version: int | None,
    against: int | None,
    name: str,
) -> None:
    """What changed: each dependency's pin then and now, and the source against another version."""
    with _skills(config_path, tenant) as (_, skills):
        picked = _pick(skills, name, version)
        older = [v for v in _versions(skills, name) if v.version < picked.version]
        base = _pick(skills, name, against) if against is not None else (older[-1] if older else None)
        found = skills.diff(picked, base)
    deps = found.changed_dependencies
    if as_json:
        print_json(
            {
                "name": name,
                "version": picked.version,
                "against": base.version if base else None,
                "changed_dependencies": [{"module": m, "pinned": p, "now": n} for m, p, n in deps],
                "source_diff": found.source_diff,
            }
        )
        return
    for module, pinned, current in deps:
        click.echo(f"{module}: pinned {pinned[:19]}, now {current[:19] if current else 'gone'}")
    if not deps:
        click.echo(f"the dependencies of {name} v{picked.version} are as pinned")
    click.echo(found.source_diff or "the source is the same")


@skill.command("export")
@config_option
@json_option
@_tenant_option
@_version_option
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="File [default: stdout].",
)
@click.argument("name")
@handle_errors
def export_skill(
    config_path: Path | None,
    as_json: bool,
    tenant: str | None,
    version: int | None,
    output: Path | None,
    name: str,
) -> None:
    """Write NAME (the active version, or --version) to a file that `skill import` checks."""
    from codemode._atomic import replace_file
    from codemode.skills import SkillExport, export_text

    with _skills(config_path, tenant) as (_, skills):
        state = skills.states().get(name)
        picked = _pick(skills, name, version) if version is not None or state is None else state.version
    text = export_text(
        SkillExport(picked.name, picked.version, picked.description, picked.source, picked.pin, picked.deps)
    )
    if output is None:
        click.echo(text, nl=False)
        return
    try:
        replace_file(output, lambda handle: handle.write(text))
    except OSError as exc:
        fail(f"cannot write {output}: {exc}", code=EXIT_USAGE)
    if as_json:
        print_json({"name": name, "version": picked.version, "file": str(output)})
    else:
        click.echo(f"wrote skill {name} v{picked.version} to {output}")


@skill.command("import")
@config_option
@json_option
@_tenant_option
@_by_option
@click.option("--update", is_flag=True, help="Add it as a new version of a skill that exists.")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@handle_errors
def import_skill(
    config_path: Path | None, as_json: bool, tenant: str | None, by: str, update: bool, file: Path
) -> None:
    """Propose the skill in FILE here: its digest is checked, then the skill is checked against this
    deployment's tools. It is usable once approved (`codemode skill approve NAME`)."""
    from codemode.skills import read_export

    loaded = read_export(_read_source(file), str(file))
    with _skills(config_path, tenant) as (_, skills):
        note = f"imported from {file.name} (v{loaded.version} there)"
        saved = skills.save(
            loaded.name, loaded.source, loaded.description, by=by, new_version=update, note=note
        )
    _done(
        as_json,
        saved,
        f"proposed skill {saved.name} v{saved.version}; approve it with: codemode skill approve {saved.name}",
    )
