"""Rendered stubs for representative schemas, compared with the files in ``snapshots/``.

Regenerate after an intended change with ``CODEMODE_UPDATE_SNAPSHOTS=1 pytest tests/stubs/test_snapshots.py``
and review the diff like code.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from codemode.stubs import VirtualTree, render_tree

if TYPE_CHECKING:
    from .conftest import Kit

UPDATE = os.environ.get("CODEMODE_UPDATE_SNAPSHOTS") == "1"
SNAPSHOTS = Path(__file__).parent / "snapshots"

CASES = [
    "simple",
    "enums",
    "nested_objects",
    "arrays_of_objects",
    "unions",
    "nullable",
    "ref_recursion",
    "additional_properties",
    "output_schema",
    "no_schema",
    "network_ref",
    "awkward_names",
]


def _compare(name: str, actual: str) -> None:
    path = SNAPSHOTS / f"{name}.snap"
    if UPDATE or not path.exists():
        if not UPDATE:
            pytest.fail(f"missing snapshot {path.name}; run with CODEMODE_UPDATE_SNAPSHOTS=1 to create it")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual, encoding="utf-8", newline="\n")
        return
    expected = path.read_text(encoding="utf-8")
    assert actual == expected, (
        f"{path.name} differs; if intended, regenerate with CODEMODE_UPDATE_SNAPSHOTS=1"
    )


@pytest.fixture(scope="module")
def tree(kit: Kit):
    return render_tree(kit.representative_catalogs())


@pytest.mark.parametrize("case", CASES)
def test_the_tool_module_for_a_representative_schema_matches_its_snapshot(tree: VirtualTree, case: str):
    _compare(f"tool_{case}", tree.read(f"servers/crm/{case}.py"))


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("servers/__init__.py", "servers_init"),
        ("servers/crm/__init__.py", "server_init_crm"),
        ("servers/tickets_v2/__init__.py", "server_init_tickets_v2"),
        ("servers/crm/_resources.py", "resources_crm"),
        ("servers/crm/_prompts.py", "prompts_crm"),
    ],
)
def test_index_resource_and_prompt_modules_match_their_snapshots(tree: VirtualTree, path: str, name: str):
    _compare(name, tree.read(path))


def test_every_snapshot_file_belongs_to_a_test():
    expected = {f"tool_{case}.snap" for case in CASES} | {
        "servers_init.snap",
        "server_init_crm.snap",
        "server_init_tickets_v2.snap",
        "resources_crm.snap",
        "prompts_crm.snap",
    }
    assert {p.name for p in SNAPSHOTS.glob("*.snap")} <= expected
