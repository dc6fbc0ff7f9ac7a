"""The tool catalog: what each server offers, canonical hashes and pins."""

from __future__ import annotations

from typing import TYPE_CHECKING

from codemode._lazy import lazy_exports

_EXPORTS = {
    "AcceptedRisk": "codemode.catalog._hints",
    "ClaimedRisk": "codemode.catalog._hints",
    "ExcludedTool": "codemode.catalog._model",
    "HASH_PREFIX": "codemode.catalog._hashing",
    "COMPENSATION_META_KEY": "codemode.catalog._hashing",
    "HintReview": "codemode.catalog._lock",
    "LockEntry": "codemode.catalog._lock",
    "LockFile": "codemode.catalog._lock",
    "MAX_DEFINITION_BYTES": "codemode.catalog._convert",
    "MAX_DESCRIPTION_CHARS": "codemode.catalog._convert",
    "PinnedDefinition": "codemode.catalog._lock",
    "Pins": "codemode.catalog._pins",
    "PromptArgumentSpec": "codemode.catalog._model",
    "PromptSpec": "codemode.catalog._model",
    "ResourceSpec": "codemode.catalog._model",
    "ResourceTemplateSpec": "codemode.catalog._model",
    "ServerCatalog": "codemode.catalog._model",
    "ServerDiff": "codemode.catalog._lock",
    "ToolSpec": "codemode.catalog._model",
    "ToolStatus": "codemode.catalog._model",
    "accept_hints": "codemode.catalog._lock",
    "approve": "codemode.catalog._lock",
    "canonical_json": "codemode.catalog._hashing",
    "claimed_risk": "codemode.catalog._hints",
    "definition_hash": "codemode.catalog._hashing",
    "file_identity": "codemode.catalog._pins",
    "is_valid_tool_name": "codemode.catalog._convert",
    "load_lock": "codemode.catalog._lock",
    "locked": "codemode.catalog._lock",
    "observe": "codemode.catalog._lock",
    "parse_selector": "codemode.catalog._lock",
    "prompt_from_mcp": "codemode.catalog._convert",
    "resource_from_mcp": "codemode.catalog._convert",
    "resource_template_from_mcp": "codemode.catalog._convert",
    "revoke": "codemode.catalog._lock",
    "save_lock": "codemode.catalog._lock",
    "status_of": "codemode.catalog._lock",
    "tool_definition": "codemode.catalog._lock",
    "tool_from_mcp": "codemode.catalog._convert",
    "tool_hash": "codemode.catalog._hashing",
}

__all__, __getattr__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from codemode.catalog._convert import MAX_DEFINITION_BYTES as MAX_DEFINITION_BYTES
    from codemode.catalog._convert import MAX_DESCRIPTION_CHARS as MAX_DESCRIPTION_CHARS
    from codemode.catalog._convert import is_valid_tool_name as is_valid_tool_name
    from codemode.catalog._convert import prompt_from_mcp as prompt_from_mcp
    from codemode.catalog._convert import resource_from_mcp as resource_from_mcp
    from codemode.catalog._convert import resource_template_from_mcp as resource_template_from_mcp
    from codemode.catalog._convert import tool_from_mcp as tool_from_mcp
    from codemode.catalog._hashing import COMPENSATION_META_KEY as COMPENSATION_META_KEY
    from codemode.catalog._hashing import HASH_PREFIX as HASH_PREFIX
    from codemode.catalog._hashing import canonical_json as canonical_json
    from codemode.catalog._hashing import definition_hash as definition_hash
    from codemode.catalog._hashing import tool_hash as tool_hash
    from codemode.catalog._hints import AcceptedRisk as AcceptedRisk
    from codemode.catalog._hints import ClaimedRisk as ClaimedRisk
    from codemode.catalog._hints import claimed_risk as claimed_risk
    from codemode.catalog._lock import HintReview as HintReview
    from codemode.catalog._lock import LockEntry as LockEntry
    from codemode.catalog._lock import LockFile as LockFile
    from codemode.catalog._lock import PinnedDefinition as PinnedDefinition
    from codemode.catalog._lock import ServerDiff as ServerDiff
    from codemode.catalog._lock import accept_hints as accept_hints
    from codemode.catalog._lock import approve as approve
    from codemode.catalog._lock import load_lock as load_lock
    from codemode.catalog._lock import locked as locked
    from codemode.catalog._lock import observe as observe
    from codemode.catalog._lock import parse_selector as parse_selector
    from codemode.catalog._lock import revoke as revoke
    from codemode.catalog._lock import save_lock as save_lock
    from codemode.catalog._lock import status_of as status_of
    from codemode.catalog._lock import tool_definition as tool_definition
    from codemode.catalog._model import ExcludedTool as ExcludedTool
    from codemode.catalog._model import PromptArgumentSpec as PromptArgumentSpec
    from codemode.catalog._model import PromptSpec as PromptSpec
    from codemode.catalog._model import ResourceSpec as ResourceSpec
    from codemode.catalog._model import ResourceTemplateSpec as ResourceTemplateSpec
    from codemode.catalog._model import ServerCatalog as ServerCatalog
    from codemode.catalog._model import ToolSpec as ToolSpec
    from codemode.catalog._model import ToolStatus as ToolStatus
    from codemode.catalog._pins import Pins as Pins
    from codemode.catalog._pins import file_identity as file_identity
