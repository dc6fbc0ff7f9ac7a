"""The terminal elicitor on a real pseudo-terminal: a form filled in (with a wrong value asked
again), a decline, Ctrl-C, a URL request that opens nothing, and no terminal at all."""

from __future__ import annotations

import os
import termios
import threading
from collections.abc import Iterator

import pytest

from codemode.broker import ElicitationRequest, TerminalElicitor
from tests.broker.test_terminal_approver import Pty

pytestmark = pytest.mark.anyio

FORM = ElicitationRequest(
    call_id="run_1/1",
    principal="ann",
    tenant="acme",
    server="guarded",
    tool="delete_customer",
    message="Delete customer CUST-7? token=ghp_0123456789abcdefghijklmnopqrstuvwxyzAB",
    schema={
        "properties": {
            "confirm": {"type": "boolean", "title": "Really delete"},
            "copies": {"type": "integer", "maximum": 3, "default": 1},
        },
        "required": ["confirm"],
    },
)


@pytest.fixture
def pty_pair() -> Iterator[Pty]:
    pair = Pty()
    yield pair
    pair.close()


def _type_lines(pty: Pty, exchanges: list[tuple[bytes, bytes]]) -> threading.Thread:
    """For each (prompt, line): wait until the prompt shows, then type the line."""

    def run() -> None:
        for prompt, line in exchanges:
            pty.read_until(prompt)
            os.write(pty.master, line)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


async def test_a_form_is_filled_in_and_a_wrong_value_is_asked_again(pty_pair: Pty) -> None:
    before = termios.tcgetattr(pty_pair.slave)
    typist = _type_lines(
        pty_pair,
        [
            (b"fill in the form", b"y\n"),
            (b"Really delete", b"perhaps\n"),
            (b"yes or no", b"yes\n"),
            (b"copies", b"7\n"),
            (b"at most 3", b"\n"),  # Enter: the default
        ],
    )
    answer = await TerminalElicitor(pty_pair.path, timeout_s=30).elicit(FORM)
    typist.join(5)
    assert answer.action == "accept" and answer.answered_by == "terminal"
    assert answer.content == {"confirm": True, "copies": 1}
    assert b"guarded/delete_customer asks for input" in pty_pair.seen
    assert b"ghp_0123456789" not in pty_pair.seen, "secrets in the server's message are redacted"
    assert termios.tcgetattr(pty_pair.slave) == before, "the terminal's settings are restored"


@pytest.mark.parametrize(("line", "action"), [(b"\n", "decline"), (b"c\n", "cancel"), (b"\x03", "cancel")])
async def test_decline_cancel_and_ctrl_c(pty_pair: Pty, line: bytes, action: str) -> None:
    typist = _type_lines(pty_pair, [(b"fill in the form", line)])
    answer = await TerminalElicitor(pty_pair.path, timeout_s=30).elicit(FORM)
    typist.join(5)
    assert answer.action == action and answer.content is None


async def test_a_url_request_shows_the_address_and_its_host_and_opens_nothing(pty_pair: Pty) -> None:
    request = ElicitationRequest(
        call_id="run_1/2",
        principal="ann",
        tenant="acme",
        server="billing",
        tool="pay",
        message="Confirm the payment",
        mode="url",
        url="https://pay.example.test/confirm?id=9",
    )
    typist = _type_lines(pty_pair, [(b"done?", b"y\n")])
    answer = await TerminalElicitor(pty_pair.path, timeout_s=30).elicit(request)
    typist.join(5)
    assert answer.action == "accept"
    assert b"https://pay.example.test/confirm?id=9" in pty_pair.seen
    assert b"host pay.example.test; codemode opens nothing" in pty_pair.seen


async def test_no_answer_in_time_cancels(pty_pair: Pty) -> None:
    answer = await TerminalElicitor(pty_pair.path, timeout_s=0.3).elicit(FORM)
    assert answer.action == "cancel"


async def test_without_a_terminal_the_request_is_cancelled(tmp_path: object) -> None:
    answer = await TerminalElicitor("/nonexistent/tty").elicit(FORM)
    assert answer.action == "cancel"
