"""The ``codemode`` command line."""

from codemode.cli._main import main

__all__ = ["main"]
