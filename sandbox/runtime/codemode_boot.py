"""Entry point of a codemode sandbox: ``python3 -I codemode_boot.py``.

``-I`` keeps the interpreter from reading ``PYTHON*`` variables or the user's site directory and
leaves the script's own directory off ``sys.path``; this script puts only the runtime there.
Importing the runtime as a package (rather than running it as ``__main__``) means stubs that
``import codemode_runtime`` get the same package that is connected to the host.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from codemode_runtime._serve import serve

serve()
