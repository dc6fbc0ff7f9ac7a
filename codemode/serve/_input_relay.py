"""A stateless client's answer, relayed through the ledger to the replica that runs its run.

A 2026-07-28 client has no MCP session, so a load balancer cannot send its retry of an
input-required ``run_code`` back to the replica whose process waits for the answer (the
*holder*). Every round is recorded in the ledger, which every replica shares (see
:mod:`codemode.ledger._input_rounds`):

* The holder records each question it asks (:meth:`InputRelay.asked`), touches its open rounds
  every :data:`HEARTBEAT_S`, polls for answers other replicas wrote into them, hands each to its
  run (``deliver``, as a retry reaching it would), and posts what came of it: the next question
  or the run's final result (:meth:`InputRelay.serve`).
* A retry reaching the holder itself is answered in memory, as before; it only closes its round
  in the ledger first (:meth:`InputRelay.claim`), so an answer relayed at the same moment cannot
  count too.
* A retry reaching another replica writes its answer into the open round (once, and only for
  the caller who started the run: anyone else's retry is answered like an unknown one), then
  polls every :data:`POLL_S` for the outcome and returns it as the holder would have
  (:meth:`InputRelay.forward`). A holder that stops touching its rounds (killed), or that does not
  take the answer before the question expires, ends the wait with an error naming it.

What crosses the ledger is bounded: an answer above :data:`MAX_ANSWER_BYTES` is refused (nothing
is written; the run keeps waiting), and an outcome above :data:`MAX_OUTCOME_BYTES` is replaced by
an error that says where the run's full record is.
"""

from __future__ import annotations

import json
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, cast

import anyio
import mcp_types
from anyio.abc import TaskGroup
from pydantic import TypeAdapter, ValidationError

from codemode.errors import LedgerError
from codemode.ledger import InputRound, InputRoundBook, round_key
from codemode.serve._consent import PendingRun, deliver

log = logging.getLogger("codemode.serve")

POLL_S = 0.2
"""How often a relaying replica looks for the outcome, and the holder for answers."""
HEARTBEAT_S = 2.0
"""How often the holder touches its rounds (a relaying replica gives up on it after
``InputRoundBook.holder_stale_s`` without one)."""
PRUNE_S = 300.0
"""How often the holder forgets rounds nobody has touched for an hour."""
REMEMBERED_DROPS = 10_000
MAX_ANSWER_BYTES = 1024 * 1024
MAX_OUTCOME_BYTES = 4 * 1024 * 1024

Outcome = mcp_types.CallToolResult | mcp_types.InputRequiredResult
NextEvent = Callable[[PendingRun], Awaitable[Outcome]]
"""What the holder's run does next after an answer: the next question, or its final result."""

_RESPONSES: TypeAdapter[mcp_types.InputResponses] = TypeAdapter(mcp_types.InputResponses)

UNKNOWN_RUN = "this run is unknown or has already finished (requestState not recognised)"
ALREADY_ANSWERED = (
    "this answer is for a question that was already answered (a retry sent twice?); "
    "the run goes on with the request that answered it"
)


def error_result(text: str) -> mcp_types.CallToolResult:
    return mcp_types.CallToolResult(content=[mcp_types.TextContent(type="text", text=text)], is_error=True)


def _when(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def lost_message(found: InputRound, why: str) -> str:
    """Why a relayed answer has no outcome, naming the holder, and what to do."""
    return (
        f"the run this answer is for was lost: replica {found.replica!r} held it and {why}. "
        "Nothing more of that run will come back. What it did is in the ledger: find the run with "
        f"`codemode ledger list --runs` (principal {found.principal!r}, waiting for input since "
        f"{_when(found.asked_at)}), check its calls with `codemode ledger show RUN` "
        "(`codemode ledger reconcile` for any left unknown), then send run_code again without "
        "requestState."
    )


def dump_outcome(outcome: Outcome, replica: str) -> str:
    """An outcome as the ledger carries it; one too large becomes an error saying where it is."""
    kind = "input_required" if isinstance(outcome, mcp_types.InputRequiredResult) else "result"
    body = outcome.model_dump(mode="json", by_alias=True, exclude_none=True)
    text = json.dumps({"kind": kind, "result": body}, separators=(",", ":"))
    if len(text.encode()) <= MAX_OUTCOME_BYTES:
        return text
    structured = cast("dict[str, Any]", body.get("structuredContent") or {})
    run_id = structured.get("run_id", "RUN")
    too_big = error_result(
        f"the run finished on replica {replica!r}, but its result ({len(text.encode())} bytes) is "
        f"larger than the {MAX_OUTCOME_BYTES} bytes one replica hands another. It is recorded in "
        f"the ledger: `codemode ledger show {run_id}`."
    )
    return dump_outcome(too_big, replica)


def load_outcome(text: str) -> Outcome:
    found = json.loads(text)
    if found["kind"] == "input_required":
        return mcp_types.InputRequiredResult.model_validate(found["result"])
    return mcp_types.CallToolResult.model_validate(found["result"])


def _responses(text: str | None) -> mcp_types.InputResponses | None:
    try:
        return None if text is None else _RESPONSES.validate_json(text)
    except ValidationError:  # not an answer: the question counts as unanswered
        return None


class InputRelay:
    """The input rounds of one replica's pending runs, and the retries it relays for others."""

    def __init__(
        self, book: InputRoundBook, replica: str, *, poll_s: float = POLL_S, heartbeat_s: float = HEARTBEAT_S
    ) -> None:
        self._book = book
        self.replica = replica
        self._poll_s = poll_s
        self._heartbeat_s = heartbeat_s
        self._held: dict[str, tuple[PendingRun, str]] = {}
        """Open rounds of this replica's runs: round key -> the run and its ``requestState``."""
        self._carrying: set[str] = set()
        """Rounds whose relayed answer this replica took and whose outcome it has not posted."""
        self._dropped: OrderedDict[str, None] = OrderedDict()
        """Rounds this replica held and let go (their run ended or moved on), latest last: an
        answer to one gets a word at once. Rounds it never held are left alone, even under its
        name: they may be another process's that was given the same name by mistake."""

    # -- the holder -----------------------------------------------------------------------------

    async def asked(self, run: PendingRun, request_state: str, expires_at: float) -> None:
        """Record a question just put to the client. Without the ledger the round can still be
        answered on this replica (a warning says so); other replicas then call it unknown."""
        key = round_key(request_state)
        until = datetime.fromtimestamp(expires_at or time.time() + 600, UTC)
        try:
            await anyio.to_thread.run_sync(
                lambda: self._book.opened(
                    key, principal=run.principal, tenant=run.tenant, replica=self.replica, expires_at=until
                )
            )
        except Exception:
            log.warning(
                "could not record an input round in the ledger: only this replica can take its answer",
                exc_info=True,
            )
            return
        self._held[key] = (run, request_state)

    async def claim(self, request_state: str) -> bool:
        """A retry reached this replica, which holds its run: close the round to other replicas.
        False when another replica's retry answered it first. A ledger out of reach does not stop
        the in-memory answer: the relayed one then cannot be taken either."""
        key = round_key(request_state)
        try:
            claimed = await anyio.to_thread.run_sync(lambda: self._book.claim(key))
        except Exception:
            log.warning("could not close an input round in the ledger; answering it in memory", exc_info=True)
            claimed = True
        # Lost to a relayed answer, the round stays held: _pick_up takes that answer to the run.
        # Dropping it here would leave the first answer untaken and the run waiting to expiry.
        if claimed:
            self._held.pop(key, None)
        return claimed

    async def serve(self, next_event: NextEvent) -> None:
        """Take answers relayed to this replica's runs and post their outcomes, until cancelled."""
        async with anyio.create_task_group() as tg:
            beat = prune = time.monotonic()
            while True:
                await anyio.sleep(self._poll_s)
                self._drop_gone()
                now = time.monotonic()
                try:
                    # Holding nothing, it still looks now and then: an answer to a run it dropped
                    # gets a word at once rather than a wait for its missing heartbeat.
                    if self._held or now - beat >= self._heartbeat_s:
                        await self._pick_up(tg, next_event)
                    if now - beat >= self._heartbeat_s:
                        beat = now
                        keys = [*self._held, *self._carrying]
                        if keys:
                            await anyio.to_thread.run_sync(self._book.beat, keys)
                    if now - prune >= PRUNE_S:
                        prune = now
                        await anyio.to_thread.run_sync(self._book.prune)
                except Exception:  # the ledger out of reach: the next round tries again
                    log.warning("relaying input rounds through the ledger failed", exc_info=True)

    def _drop_gone(self) -> None:
        """Stop holding rounds whose run was cancelled or is no longer waiting on that question."""
        for key, (run, state) in list(self._held.items()):
            waiting = run.waiting
            if run.scope.cancel_called or waiting is None or state != f"{run.token}.{waiting.nonce}":
                del self._held[key]
                self._dropped[key] = None
                while len(self._dropped) > REMEMBERED_DROPS:
                    self._dropped.popitem(last=False)

    async def _pick_up(self, tg: TaskGroup, next_event: NextEvent) -> None:
        rounds = await anyio.to_thread.run_sync(lambda: self._book.answered(self.replica))
        for found in rounds:
            key = found.key
            held = self._held.get(key)
            if held is None and key not in self._dropped:
                continue
            self._dropped.pop(key, None)
            taken = None if held is None else await anyio.to_thread.run_sync(self._book.take, key)
            # Only once taken: a take that failed (the ledger out of reach) is tried next round.
            self._held.pop(key, None)
            if held is None:
                gone = error_result(
                    f"replica {self.replica!r} no longer has this run waiting for the answer (it "
                    "was cancelled, finished, or waited too long for the client to come back): "
                    "send run_code again without requestState"
                )
                await self._post(key, gone, lost=True)
                continue
            if taken is None:
                continue  # the relaying replica gave up on it meanwhile
            run, state = held
            if not deliver(run, state.partition(".")[2], _responses(taken.answer_json)):
                await self._post(key, error_result(ALREADY_ANSWERED), lost=True)
                continue
            self._carrying.add(key)
            tg.start_soon(self._carry, run, key, next_event)

    async def _carry(self, run: PendingRun, key: str, next_event: NextEvent) -> None:
        try:
            outcome = await next_event(run)
            await self._post(key, outcome)
        except Exception:
            # This task runs in serve's own task group: an error here must not end the replica.
            # The relaying replica stops waiting once this round's heartbeat stops.
            log.warning("could not post a relayed input round's outcome to the ledger", exc_info=True)
        finally:
            self._carrying.discard(key)

    async def _post(self, key: str, outcome: Outcome, *, lost: bool = False) -> None:
        text = dump_outcome(outcome, self.replica)
        await anyio.to_thread.run_sync(lambda: self._book.post(key, text, lost=lost))

    # -- a replica relaying another's round -----------------------------------------------------

    async def forward(
        self,
        request_state: str,
        principal: str,
        tenant: str,
        responses: mcp_types.InputResponses | None,
    ) -> Outcome | None:
        """Relay a retry whose run this replica does not hold; None when no replica holds a
        round of that ``requestState`` for this caller (answered like an unknown run)."""
        answer = _RESPONSES.dump_json(responses or {}, by_alias=True, exclude_none=True).decode()
        if len(answer.encode()) > MAX_ANSWER_BYTES:
            return error_result(
                f"this answer ({len(answer.encode())} bytes) is larger than the {MAX_ANSWER_BYTES} "
                "bytes one replica hands another; nothing was delivered and the run still waits: "
                "send a shorter answer"
            )
        key = round_key(request_state)
        book = self._book
        try:
            verdict, found = await anyio.to_thread.run_sync(
                lambda: book.answer(key, principal=principal, tenant=tenant, answer_json=answer)
            )
            if verdict == "unknown" or found is None:
                return None
            if verdict == "closed":
                return error_result(ALREADY_ANSWERED)
            if verdict == "expired":
                return error_result(
                    f"this answer came after its question expired ({_when(found.expires_at)}): the "
                    f"run on replica {found.replica!r} went on without it (an approval counts as a "
                    "no, a relayed question as cancelled)"
                )
            if verdict == "holder-gone":
                return error_result(lost_message(found, self._silent(found)))
            return await self._outcome(key, found)
        except (OSError, LedgerError) as exc:
            return error_result(
                f"the ledger that relays answers between replicas could not be reached ({exc}); "
                "send the retry again"
            )

    async def _outcome(self, key: str, asked: InputRound) -> Outcome:
        while True:
            await anyio.sleep(self._poll_s)
            progress, found = await anyio.to_thread.run_sync(lambda: self._book.progress(key))
            if progress == "waiting":
                continue
            if progress == "done" and found is not None and found.outcome_json is not None:
                return load_outcome(found.outcome_json)
            if progress == "expired":
                why = f"did not take the answer before the question expired ({_when(asked.expires_at)})"
            elif progress == "holder-gone" and found is not None:
                why = self._silent(found)
            else:
                why = "its round is no longer in the ledger"
            return error_result(lost_message(asked, why))

    @staticmethod
    def _silent(found: InputRound) -> str:
        return f"has not been heard from since {_when(found.heartbeat_at)} (it stopped, or lost the ledger)"
