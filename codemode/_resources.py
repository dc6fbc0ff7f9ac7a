"""Where the files that ship beside the code are: stub templates, sandbox image, example servers.

In a built wheel they are copied under ``codemode/_bundled/`` (see ``pyproject.toml``); in a
source checkout (including editable installs) they sit at the top of the repository. Both
layouts are supported so that tests run from a checkout and an installed wheel alike.
"""

from __future__ import annotations

from pathlib import Path

from codemode.errors import CodemodeError

_PACKAGE_DIR = Path(__file__).resolve().parent

# bundled name -> name at the top of a source checkout
_LAYOUT = {
    "stubs_templates": "stubs_templates",
    "sandbox": "sandbox",
    "example_servers": "examples/servers",
    "example_programs": "examples/programs",
}


def resource_dir(name: str) -> Path:
    """Return the directory of a shipped resource (``stubs_templates``, ``sandbox``, ``example_servers``)."""
    if name not in _LAYOUT:
        raise KeyError(name)
    bundled = _PACKAGE_DIR / "_bundled" / name
    if bundled.is_dir():
        return bundled
    checkout = _PACKAGE_DIR.parent / _LAYOUT[name]
    if checkout.is_dir():
        return checkout
    raise CodemodeError(
        f"codemode's {name!r} files are missing (looked in {bundled} and {checkout}); reinstall codemode"
    )
