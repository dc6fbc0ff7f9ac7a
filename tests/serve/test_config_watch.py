"""The serve config watch on its own: what it applies, what it only reports (an engine stand-in)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, cast

import pytest

from codemode import CodeMode
from codemode.config import config_from_mapping, load_config
from codemode.host._inputs import RootsUpdate
from codemode.serve._watch import ONLY_ROOTS, ConfigWatch

pytestmark = pytest.mark.anyio

CONFIG = """
[servers.a]
command = "a"
roots = ["/srv/a"]

[servers.b]
command = "b"

[servers.off]
command = "off"
enabled = false
"""


class Engine:
    """Records what the watch asks for, and answers as told."""

    def __init__(self, answer: RootsUpdate = "notified", error: Exception | None = None) -> None:
        self.answer: RootsUpdate = answer
        self.error = error
        self.updates: list[tuple[str, list[str]]] = []

    async def update_roots(self, server: str, roots: Any) -> RootsUpdate:
        self.updates.append((server, list(roots)))
        if self.error is not None:
            raise self.error
        return self.answer


def watching(tmp_path: Path, engine: Engine) -> tuple[ConfigWatch, Path]:
    path = tmp_path / "codemode.toml"
    path.write_text(CONFIG)
    watch = ConfigWatch.of(cast(CodeMode, engine), load_config(path))
    assert watch is not None
    return watch, path


async def test_changed_roots_are_applied_and_nothing_else_is_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine = Engine()
    watch, path = watching(tmp_path, engine)
    path.write_text(CONFIG.replace('roots = ["/srv/a"]', 'roots = ["/srv/a", "/srv/more"]'))
    with caplog.at_level(logging.INFO, "codemode.serve"):
        await watch.check()
        await watch.check()  # the same file again: nothing more
    assert engine.updates == [("a", ["/srv/a", "/srv/more"])]
    assert "server a: roots are now ['/srv/a', '/srv/more'] (sent roots/list_changed)" in caplog.text
    assert ONLY_ROOTS not in caplog.text


async def test_other_changes_are_named_and_not_applied(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine = Engine("reconnect needed")
    watch, path = watching(tmp_path, engine)
    changed = CONFIG.replace('command = "b"', 'command = "b"\nroots = ["/srv/b"]\ntrusted = true')
    changed = changed.replace('command = "off"', 'command = "off"\nroots = ["/srv/off"]')
    path.write_text(changed + '\n[servers.new]\ncommand = "new"\n\n[sandbox]\npool_size = 3\n')
    await watch.check()
    assert engine.updates == [("b", ["/srv/b"])], "only the connected servers' roots"
    assert "server b was connected without roots" in caplog.text
    assert f"{ONLY_ROOTS} (not applied: sandbox, servers.b, servers.new, servers.off)" in caplog.text


@pytest.mark.parametrize(
    "text",
    [CONFIG.replace('["/srv/a"]', '["/srv/a"'), CONFIG.replace('["/srv/a"]', '["relative"]'), "x = 1\n"],
    ids=["not TOML", "relative root", "unknown key"],
)
async def test_a_file_that_does_not_load_is_reported_and_ignored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, text: str
) -> None:
    engine = Engine()
    watch, path = watching(tmp_path, engine)
    path.write_text(text)
    await watch.check()
    assert engine.updates == []
    assert "config changed but does not load; ignored (the running config stays)" in caplog.text
    # Put back as it was: nothing to apply, nothing to report.
    caplog.clear()
    path.write_text(CONFIG)
    await watch.check()
    assert engine.updates == [] and caplog.text == ""


async def test_a_failed_update_is_reported_and_tried_again_at_the_next_change(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine = Engine(error=RuntimeError("boom"))
    watch, path = watching(tmp_path, engine)
    path.write_text(CONFIG.replace('["/srv/a"]', '["/srv/x"]'))
    await watch.check()
    assert "could not offer server a its new roots: boom" in caplog.text
    engine.error = None
    path.write_text(CONFIG.replace('["/srv/a"]', '["/srv/x"]') + "\n")
    await watch.check()
    assert engine.updates == [("a", ["/srv/x"]), ("a", ["/srv/x"])]


def test_a_config_without_a_file_is_not_watched() -> None:
    assert ConfigWatch.of(cast(CodeMode, Engine()), config_from_mapping({})) is None
