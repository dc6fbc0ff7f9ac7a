"""Exported trees type-check clean under strict pyright and import cleanly (``check_export``).

``codemode.stubs.check_export(tree, directory)`` is the helper to run the same check on the
trees of real servers.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from codemode.catalog import PromptArgumentSpec, PromptSpec, ResourceSpec, ResourceTemplateSpec
from codemode.stubs import check_export, render_tree

if TYPE_CHECKING:
    from .conftest import Kit

PYRIGHT = Path(sys.executable).with_name("pyright")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not PYRIGHT.exists() and shutil.which("pyright") is None, reason="pyright is not installed"
    ),
]

HOSTILE = 'Tricky """ \\ \u202e text\n__import__("os")'


def _hostile_catalog(kit: Kit):
    names = [
        "__import__",
        "os.system",
        "class",
        "1st",
        "a-b",
        "a_b",
        "__init__",
        "getUser",
        "getuser",
        "str",
        "Any",
    ]
    tools = [
        kit.make_tool(
            name,
            {
                "type": "object",
                "properties": {
                    "from": {"type": "string", "description": HOSTILE},
                    "_t": {"type": "integer"},
                    "_rt": {"type": "integer"},
                    "_arguments": {"type": "integer"},
                    "arguments": {
                        "type": "object",
                        "properties": {"str": {"type": "string"}, "x-y": {"type": "integer"}},
                    },
                    "annotations": {"enum": ["a", "b"], "default": "a"},
                },
            },
            server="bad server!",
            description=HOSTILE,
            title=HOSTILE,
            output={"type": "object", "properties": {"Any": {"type": "string"}, "list": {"type": "string"}}},
        )
        for name in names
    ]
    return kit.catalog(
        "bad server!",
        *tools,
        resources=[ResourceSpec(server="bad server!", uri="x://y", name="class", description=HOSTILE)],
        templates=[ResourceTemplateSpec(server="bad server!", uri_template="x://{from}/{id}", name="read")],
        prompts=[
            PromptSpec(
                server="bad server!",
                name="import",
                description=HOSTILE,
                arguments=(PromptArgumentSpec(name="class", required=True), PromptArgumentSpec(name="str")),
            )
        ],
    )


def test_exported_trees_of_representative_and_hostile_catalogs_type_check_strictly(kit: Kit, tmp_path: Path):
    tree = render_tree([*kit.representative_catalogs(), _hostile_catalog(kit)])
    report = check_export(tree, tmp_path / "tree")
    assert report.ok, report.summary()
    assert report.pyright.files >= 20
    assert report.modules_imported == len([p for p in tree.files() if p.endswith(".py")])


def test_a_program_using_the_stubs_gets_precise_types(kit: Kit, tmp_path: Path):
    render_tree(kit.representative_catalogs()).export(tmp_path)
    program = tmp_path / "servers" / "_program_check.py"
    program.write_text(
        "from servers.crm import output_schema, simple\n"
        "import servers\n"
        "invoice = output_schema(invoice_id='i1')\n"
        "total: float = invoice['total']\n"
        "simple(customer_id='c', limit=3)\n"
        "servers.crm.enums(status='open', kind='ticket')\n",
        encoding="utf-8",
    )
    from codemode.stubs import typecheck_export

    assert typecheck_export(tmp_path).errors == 0
    program.write_text("from servers.crm import simple\nsimple(customer_id=1)\n", encoding="utf-8")
    assert typecheck_export(tmp_path).errors == 1


def test_a_failing_check_says_what_failed(tmp_path: Path) -> None:
    from codemode.stubs import ExportCheck, PyrightReport

    report = ExportCheck(
        directory=tmp_path,
        pyright=PyrightReport(errors=1, warnings=0, files=3, diagnostics=("servers/crm/x.py:4: error: bad",)),
        modules_imported=2,
        import_errors=("servers.crm.y: ImportError: nope",),
    )
    assert not report.ok
    summary = report.summary()
    assert "pyright 1 error(s), 0 warning(s) in 3 file(s); 2 module(s) imported, 1 import error(s)" in summary
    assert "servers/crm/x.py:4: error: bad" in summary
    assert "import: servers.crm.y: ImportError: nope" in summary


def test_a_pyright_that_prints_no_report_is_a_clear_error(tmp_path: Path) -> None:
    from codemode.errors import CodemodeError
    from codemode.stubs import typecheck_export

    with pytest.raises(CodemodeError, match=r"pyright produced no JSON report \(exit 1\)"):
        typecheck_export(tmp_path, pyright="/bin/false")


def test_a_pyright_path_that_does_not_exist_is_a_clear_error(tmp_path: Path) -> None:
    from codemode.errors import CodemodeError
    from codemode.stubs import typecheck_export

    with pytest.raises(CodemodeError, match="cannot run pyright at '/no/such/pyright'"):
        typecheck_export(tmp_path, pyright="/no/such/pyright")
