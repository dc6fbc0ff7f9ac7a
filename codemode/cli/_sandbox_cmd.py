"""``codemode sandbox build`` and ``codemode sandbox doctor``."""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape

from codemode.cli._common import config_option, handle_errors, json_option, load, print_json, stderr, stdout
from codemode.cli._signals import run_until_signalled
from codemode.config import SandboxConfig, default_config_path
from codemode.sandbox import build_image, doctor

__all__ = ["sandbox"]

_MARK = {"ok": "[green]✓[/]", "warn": "[yellow]![/]", "fail": "[red]✗[/]", "info": "[blue]·[/]"}


def _sandbox_config(config_path: Path | None) -> SandboxConfig:
    """The ``[sandbox]`` section; defaults when no config file exists and none was named."""
    if config_path is None and not default_config_path(None).exists():
        return SandboxConfig()
    return load(config_path).sandbox


@click.group("sandbox")
def sandbox() -> None:
    """Build and check the sandbox that runs programs (Docker image, process fallback)."""


@sandbox.command("build")
@click.option(
    "--base",
    metavar="IMAGE",
    default=None,
    help="Base image with python3 >= 3.11 [default: python:3.11-slim if present or pullable, "
    "else a Debian bookworm base built here with debootstrap].",
)
@click.option("--force", is_flag=True, help="Rebuild even when the image is up to date.")
@click.option("--mirror", metavar="URL", default=None, help="Debian mirror for debootstrap [default: apt's].")
@click.option("-v", "--verbose", is_flag=True, help="Show the output of debootstrap and docker build.")
@click.option(
    "--no-pull",
    "no_pull",
    is_flag=True,
    help="Never ask a registry for the base image (also CODEMODE_NO_PULL=1): use a local one or "
    "build a Debian base from packages.",
)
@config_option
@handle_errors
def build(
    base: str | None, force: bool, mirror: str | None, verbose: bool, no_pull: bool, config_path: Path | None
) -> None:
    """Build the sandbox image named by [sandbox] image (default codemode-sandbox:latest)."""
    config = _sandbox_config(config_path)
    with stderr.status(f"building {config.image}", spinner="dots") as status:

        def step(message: str) -> None:
            stderr.print(f"[bold cyan]→[/] {escape(message)}", highlight=False)
            status.update(escape(message))

        def detail(line: str) -> None:
            if verbose:
                stderr.print(f"  [dim]{escape(line)}[/]", highlight=False)
            else:
                status.update(escape(line[:100]))

        result = build_image(
            config.image,
            base=base,
            force=force,
            progress=step,
            detail=detail,
            mirror=mirror,
            pull=False if no_pull else None,
        )
    verb = "built" if result.rebuilt else "up to date"
    stdout.print(
        f"[green]{escape(result.image)}[/] {verb} (base {escape(result.base)}, {result.base_source})"
    )


@sandbox.command("doctor")
@json_option
@config_option
@handle_errors
def doctor_cmd(as_json: bool, config_path: Path | None) -> None:
    """Check the Docker engine, the image, limit support and the process fallback."""
    config = _sandbox_config(config_path)
    report = run_until_signalled(doctor, config)
    if as_json:
        print_json(report.to_json())
    else:
        for check in report.checks:
            stdout.print(
                f"{_MARK[check.status]} [bold]{escape(check.name)}[/]: {escape(check.detail)}",
                highlight=False,
            )
            if check.fix and check.status in ("fail", "warn"):
                stdout.print(f"    [dim]fix:[/] {escape(check.fix)}", highlight=False)
    if not report.ok:
        raise SystemExit(1)
