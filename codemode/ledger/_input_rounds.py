"""Input rounds of stateless MCP clients, shared by every ``codemode serve`` replica (issue 42).

A 2026-07-28 client's ``run_code`` that needs an answer returns the question; the run waits in
the process that started it (the *holder*), and the client's retry may reach another replica. A
round is recorded here when it is asked; the retry's replica writes the client's answer into it,
the holder takes it, and posts what came of it (the next question or the run's result), which
the retry's replica returns. Every move is one write transaction, exclusive across every client
of the store, so an answer is taken once.

A round is named by a digest of its ``requestState`` (the run's token and the question's nonce):
the state is what it takes to answer a run's questions, and more people read a ledger than
should hold one. The rows are transport state, not audit: outside the hash chain, pruned an
hour after their holder last touched them. States: ``open`` (asked) -> ``answered`` (by another
replica) -> ``taken`` (by the holder) -> ``done`` (outcome posted); ``open`` -> ``taken`` when
the retry reached the holder itself; ``lost`` when the holder no longer has the run, or did not
take the answer before the question expired.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, cast

from codemode.ledger._context import LedgerContext
from codemode.ledger._digest import sha256_text
from codemode.ledger._reduce import Row
from codemode.ledger._time import from_text, to_text

__all__ = ["InputRound", "InputRoundBook", "round_key"]

RoundState = Literal["open", "answered", "taken", "done", "lost"]
Answered = Literal["answered", "unknown", "closed", "expired", "holder-gone"]
"""What became of a relayed answer: written; no such round for this caller; the round was
answered already; its question expired; its holder stopped touching it."""
Progress = Literal["waiting", "done", "gone", "expired", "holder-gone"]


def round_key(request_state: str) -> str:
    """``sha256:<hex>`` of a ``requestState``: how the ledger names its round."""
    return sha256_text(request_state.encode())


@dataclass(frozen=True)
class InputRound:
    key: str
    principal: str
    tenant: str
    replica: str
    """The serve replica whose process runs the run (``[serve] replica``)."""
    state: RoundState
    asked_at: datetime
    expires_at: datetime
    """When the question stops waiting for an answer."""
    heartbeat_at: datetime
    """When the holder last said it still has the run."""
    answer_json: str | None
    outcome_json: str | None


def _round(row: Row) -> InputRound:
    return InputRound(
        key=str(row["round_key"]),
        principal=str(row["principal"]),
        tenant=str(row["tenant"]),
        replica=str(row["replica"]),
        state=cast("RoundState", row["state"]),
        asked_at=from_text(str(row["asked_at"])),
        expires_at=from_text(str(row["expires_at"])),
        heartbeat_at=from_text(str(row["heartbeat_at"])),
        answer_json=cast("str | None", row["answer_json"]),
        outcome_json=cast("str | None", row["outcome_json"]),
    )


def _moved(row: Row, **fields: str | None) -> dict[str, str | None]:
    return {**{k: cast("str | None", v) for k, v in row.items()}, **fields}


class InputRoundBook:
    """The input rounds of every replica on one ledger. Obtained from ``StoreLedger.input_rounds``.
    ``holder_stale_s``: a holder that has not touched its round for this long is taken for gone."""

    def __init__(self, ctx: LedgerContext, *, holder_stale_s: float = 15.0) -> None:
        self._ctx = ctx
        self.holder_stale_s = holder_stale_s

    def get(self, key: str) -> InputRound | None:
        with self._ctx.read() as tx:
            row = tx.input_round(key)
        return None if row is None else _round(row)

    # -- the holder ---------------------------------------------------------------------------

    def opened(self, key: str, *, principal: str, tenant: str, replica: str, expires_at: datetime) -> None:
        """Record a question asked by ``replica``'s run, open until ``expires_at``."""
        now = to_text(self._ctx.now())
        row: dict[str, str | None] = {
            "round_key": key,
            "principal": principal,
            "tenant": tenant,
            "replica": replica,
            "state": "open",
            "asked_at": now,
            "expires_at": to_text(expires_at),
            "heartbeat_at": now,
            "answer_json": None,
            "outcome_json": None,
        }
        with self._ctx.write(durable=False) as tx:
            tx.save_input_round(row)

    def claim(self, key: str) -> bool:
        """The holder answers its own round (the retry reached it): open -> taken. False when
        another replica's retry answered it first. True for a round never recorded (its
        recording failed): the holder's memory is the only judge of that one."""
        with self._ctx.write(durable=False) as tx:
            row = tx.input_round(key)
            if row is None:
                return True
            if row["state"] != "open":
                return False
            tx.save_input_round(_moved(row, state="taken"))
        return True

    def answered(self, replica: str) -> list[InputRound]:
        """Rounds of ``replica`` that another replica wrote an answer into."""
        with self._ctx.read() as tx:
            rows = tx.input_rounds(replica, "answered")
        return [_round(row) for row in rows]

    def take(self, key: str) -> InputRound | None:
        """answered -> taken, by the holder; the round with its answer, None if it is not answered
        (the relaying replica gave up on it meanwhile)."""
        with self._ctx.write(durable=False) as tx:
            row = tx.input_round(key)
            if row is None or row["state"] != "answered":
                return None
            # The answer (a form's content, a completion) goes to the run; the ledger keeps none.
            tx.save_input_round(_moved(row, state="taken", answer_json=None))
        return _round(row)

    def post(self, key: str, outcome_json: str, *, lost: bool = False) -> None:
        """The round's outcome, for the replica relaying its answer: ``done``, or ``lost`` (the
        holder no longer has the run)."""
        with self._ctx.write(durable=False) as tx:
            row = tx.input_round(key)
            if row is not None and row["state"] not in ("done", "lost"):
                state = "lost" if lost else "done"
                tx.save_input_round(_moved(row, state=state, outcome_json=outcome_json))

    def beat(self, keys: Sequence[str]) -> None:
        """The holder still has these rounds' runs."""
        with self._ctx.write(durable=False) as tx:
            tx.touch_input_rounds(keys, to_text(self._ctx.now()))

    def prune(self, older_than_s: float = 3600.0) -> int:
        """Forget rounds whose holder has not touched them for ``older_than_s``."""
        before = to_text(self._ctx.now() - timedelta(seconds=older_than_s))
        with self._ctx.write(durable=False) as tx:
            return tx.drop_input_rounds(before)

    # -- the replica relaying a retry ---------------------------------------------------------

    def answer(
        self, key: str, *, principal: str, tenant: str, answer_json: str
    ) -> tuple[Answered, InputRound | None]:
        """Write a retry's answer into its open round: once, and only the caller who started the
        run (anyone else's retry is ``unknown``, exactly like a round that does not exist)."""
        with self._ctx.write(durable=False) as tx:
            row = tx.input_round(key)
            if row is None or (row["principal"], row["tenant"]) != (principal, tenant):
                return "unknown", None
            found = _round(row)
            if found.state != "open":
                return "closed", found
            now = self._ctx.now()
            if found.expires_at <= now:
                return "expired", found
            if self._stale(found, now):
                return "holder-gone", found
            tx.save_input_round(_moved(row, state="answered", answer_json=answer_json))
        return "answered", found

    def progress(self, key: str) -> tuple[Progress, InputRound | None]:
        """Where a relayed answer stands: ``done`` (its outcome is posted: ``done`` or ``lost``),
        ``waiting``, or given up on: ``expired`` (the holder did not take it before its question
        expired; the round is closed as ``lost`` so that it never takes it later),
        ``holder-gone``, or ``gone`` (pruned)."""
        with self._ctx.read() as tx:
            row = tx.input_round(key)
        if row is None:
            return "gone", None
        found, now = _round(row), self._ctx.now()
        if found.state in ("done", "lost"):
            if found.outcome_json is not None:
                # Read by the one replica relaying it: the run's result need not stay in the ledger.
                with self._ctx.write(durable=False) as tx:
                    again = tx.input_round(key)
                    if again is not None:
                        tx.save_input_round(_moved(again, outcome_json=None))
            return "done", found
        if found.state == "answered" and found.expires_at <= now:
            with self._ctx.write(durable=False) as tx:
                again = tx.input_round(key)
                if again is not None and again["state"] == "answered":
                    tx.save_input_round(_moved(again, state="lost"))
                    return "expired", found
            return self.progress(key)  # the holder took it (or posted) meanwhile
        if self._stale(found, now):
            return "holder-gone", found
        return "waiting", found

    def _stale(self, found: InputRound, now: datetime) -> bool:
        return found.heartbeat_at < now - timedelta(seconds=self.holder_stale_s)
