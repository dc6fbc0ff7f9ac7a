"""The ``[compensation."server/tool"]`` tables: which call undoes a completed side effect.

Shape only (what the keys and sources look like). Whether the tools exist, are approved and
whether a source names something the call really had is decided where compensation runs, at
run start (``codemode.engine``), with the key named.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

TOOL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}/[A-Za-z0-9_.\-]{1,128}")
SOURCE = re.compile(r"(args|result)(\.[A-Za-z0-9_\-]+)+")
"""Where a compensation argument comes from: ``args.<path>`` (the undone call's arguments) or
``result.<path>`` (its structured result), dotted into nested objects."""


def _tool_name(value: str) -> str:
    if not TOOL_NAME.fullmatch(value):
        raise ValueError(f"{value!r} is not a tool: write SERVER/TOOL (no globs)")
    return value


def _source(value: str) -> str:
    if not SOURCE.fullmatch(value):
        raise ValueError(
            f"{value!r} is not an argument source: write 'args.<name>' (the undone call's argument) "
            "or 'result.<name>' (a field of its result), dotted for nested fields"
        )
    return value


class CompensationRule(BaseModel):
    """How to undo one tool's completed call: the tool to call, and its arguments' sources."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tool: Annotated[str, AfterValidator(_tool_name)]
    """The undoing tool, ``server/tool``."""
    arguments: dict[str, Annotated[str, AfterValidator(_source)]] = Field(default_factory=dict)
    """Argument name of the undoing tool -> ``args.<path>`` or ``result.<path>``."""


def check_compensation_keys(rules: dict[str, CompensationRule]) -> dict[str, CompensationRule]:
    for key in rules:
        if not TOOL_NAME.fullmatch(key):
            raise ValueError(f'[compensation."{key}"]: the key is not a tool: write "SERVER/TOOL"')
    return rules


Compensations = Annotated[dict[str, CompensationRule], AfterValidator(check_compensation_keys)]
