"""codemode's in-sandbox runtime: the only code inside the sandbox that talks to the host.

It implements the API that generated stubs and programs use (``__init__.pyi`` beside this file:
``call_tool``, ``read_resource``, ``get_prompt``, ``result``, ``parallel`` and the exception and
content classes); inside the sandbox it is importable as ``codemode`` too. Its modules:

* ``_wire``: the channel's contract (frames, methods, shapes, limits), the very file the host
  imports as ``codemode.sandbox._wire``, staged here byte for byte;
* ``_client``: connect to the Unix socket the host created for this sandbox, authenticate with
  the one-time secret left beside it, and carry requests both ways (``_frames`` reads the
  frames, ``_waiter`` wakes the thread waiting for an answer);
* ``_imports``: the import hook that fetches ``servers`` / ``servers.*`` (and ``skills`` /
  ``skills.*``) from the host when a program first imports them, so only what a program
  imports ever travels;
* ``_calls`` and ``_values``: the stub calls and what they return or raise (``_planned``: what
  a call planned by a dry run returns instead of a result); ``_skills`` names the saved skill
  (if any) that made a call, and ``_propose`` offers a program as a skill;
* ``_program``, ``_capture`` and ``_serve``: run each program (its trailing expression, or what it
  passes to :func:`result`, is the final result; otherwise its printed output), capture
  stdout/stderr at the file-descriptor level with a cap, and answer with a structured reply.
* ``_workspace``: the run's ``/workspace`` (``$CODEMODE_WORKSPACE``): the files the host sends are
  written before the program starts, and read back (regular files only, nothing followed) after;
* ``_embedded``: the same runtime served from a thread of the host's own process, for
  ``codemode.testing.in_process_sandbox`` only (no isolation; nothing in a sandbox calls it).

Standard library only, Python 3.11+: the sandbox image contains nothing else.
"""

from . import _calls, _client
from ._calls import call_tool, get_prompt, parallel, read_resource, result
from ._planned import PlannedValueError
from ._propose import propose_skill
from ._values import (
    Audio,
    CallDenied,
    CallError,
    CallFailed,
    EmbeddedResource,
    Image,
    PromptMessage,
    ResourceContents,
    ResourceLink,
    ToolError,
)

__all__ = [
    "Audio",
    "CallDenied",
    "CallError",
    "CallFailed",
    "EmbeddedResource",
    "Image",
    "PlannedValueError",
    "PromptMessage",
    "ResourceContents",
    "ResourceLink",
    "ToolError",
    "call_tool",
    "get_prompt",
    "parallel",
    "propose_skill",
    "read_resource",
    "result",
]

# Below the API: the raw channel, for tests that speak to the host as a hostile program would.
_request = _client.request
_remote = _calls.remote
_RemoteError = _client.RemoteError
