"""Typed, injection-safe Python stubs for every tool: the virtual file tree.

:func:`render_tree` turns server catalogs into a :class:`VirtualTree` of modules::

    servers/__init__.py                  index: one line per server
    servers/<server>/__init__.py         one line per tool; lazy (PEP 562) names
    servers/<server>/<tool>.py           one function named like the module
    servers/<server>/_resources.py       read functions for resources and templates
    servers/<server>/_prompts.py         one function per prompt
    codemode_runtime.pyi                 the runtime API the stubs call (types only)
    skills/__init__.py, skills/<name>.py the saved skills a view is given (:meth:`VirtualTree.with_skills`)

The tree lists, reads, searches (``name`` / ``summary`` / ``full`` detail), exports to a
directory, serves modules to the sandbox's import hook (``module_source``) and makes
per-principal views (:meth:`VirtualTree.restrict`); a view's saved skills are searched with its
tools (each public function a document; a hit shows ``from skills.<name> import <function>``).
See ``stubs_templates/README.md`` for the name mapping and the safety rules for untrusted server
text.

After a catalog change, ``render_tree(catalogs, previous=tree)`` re-renders only the servers
whose catalog changed and updates the previous tree's search indexes for the changed tools
instead of rebuilding them; the result is the same as a fresh ``render_tree(catalogs)``.
"""

from codemode.stubs._names import NameKind, assign_identifiers
from codemode.stubs._render_tool import TITLE_LIMIT
from codemode.stubs._sanitize import TOOL_DOC_LIMIT, clean_text, escape_invisible
from codemode.stubs._skill_files import SKILL_LABEL, SkillModule, function_signature
from codemode.stubs._tree import (
    DetailLevel,
    SearchResult,
    TreeEntry,
    TreePathError,
    VirtualTree,
    render_tree,
)
from codemode.stubs._typecheck import (
    ExportCheck,
    PyrightReport,
    check_export,
    import_export,
    typecheck_export,
)

__all__ = [
    "SKILL_LABEL",
    "TITLE_LIMIT",
    "TOOL_DOC_LIMIT",
    "DetailLevel",
    "ExportCheck",
    "NameKind",
    "PyrightReport",
    "SearchResult",
    "SkillModule",
    "TreeEntry",
    "TreePathError",
    "VirtualTree",
    "assign_identifiers",
    "check_export",
    "clean_text",
    "escape_invisible",
    "function_signature",
    "import_export",
    "render_tree",
    "typecheck_export",
]
