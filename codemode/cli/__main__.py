"""``python -m codemode.cli`` runs the command line (handy where the console script is not on PATH)."""

from codemode.cli import main

main()
