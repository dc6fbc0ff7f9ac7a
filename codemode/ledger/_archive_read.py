"""Reading an archive directory back for ``verify --archive``: the segments' events in order,
and what is wrong with the segments themselves (a missing or edited file, a gap, an overlap, a
segment of another ledger). The chain inside the events is checked by :mod:`._verify`'s replay,
which these events feed before the database's own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from codemode.errors import LedgerError
from codemode.ledger._archive_files import Segment, file_digest, list_segments, read_events
from codemode.ledger._models import VerifyProblem
from codemode.ledger.stores import EventRow


class ArchiveReader:
    """The archived events ``1..through`` of one ledger, read from ``directory``.

    Iterate :meth:`events` (once), then read :attr:`problems`. Segments past ``through`` were
    written by an archive that stopped before the database let go of their events (its next run
    finishes it): those events are still in the database, so they are not read here."""

    def __init__(self, directory: Path, ledger_id: str, through: int) -> None:
        self.directory = directory
        self.ledger_id = ledger_id
        self.through = through
        self.problems: list[VerifyProblem] = []
        self.segments = 0

    def _problem(self, where: str, detail: str) -> None:
        self.problems.append(VerifyProblem(kind="archive_segment", where=where, detail=detail))

    def _chosen(self) -> list[Segment]:
        if not self.directory.is_dir():
            if self.through:
                self._problem(
                    str(self.directory),
                    f"no such archive directory, and events 1..{self.through} are archived",
                )
            return []
        segments, unreadable = list_segments(self.directory)
        for text in unreadable:
            self._problem(self.directory.name, text)
        chosen: list[Segment] = []
        expected = 1
        for segment in segments:
            if segment.ledger_id != self.ledger_id:
                self._problem(segment.name, f"belongs to another ledger ({segment.ledger_id})")
                continue
            if segment.first_seq > self.through:
                continue  # written, not yet let go of by the database: see the class docstring
            if segment.first_seq < expected:
                self._problem(
                    segment.name, f"overlaps the segment before it (event {segment.first_seq} again)"
                )
                continue
            if segment.first_seq > expected:
                self._problem(
                    f"events {expected}..{segment.first_seq - 1}",
                    "no segment holds them: a segment is missing from the archive",
                )
            chosen.append(segment)
            expected = segment.last_seq + 1
        if expected <= self.through:
            self._problem(
                f"events {expected}..{self.through}",
                "no segment holds them: a segment is missing from the archive",
            )
        return chosen

    def events(self) -> Iterator[EventRow]:
        for segment in self._chosen():
            self.segments += 1
            if not segment.path.is_file():
                self._problem(segment.name, "missing: the manifest is there, its events file is not")
                continue
            if file_digest(segment.path) != segment.sha256:
                self._problem(segment.name, "edited: its digest does not match its manifest")
            count, last = 0, None
            try:
                for event in read_events(segment):
                    count, last = count + 1, event
                    yield event
            except LedgerError as exc:
                self._problem(segment.name, str(exc))
                continue
            if last is None or (count, last.seq, last.hash) != (
                segment.events,
                segment.last_seq,
                segment.last_hash,
            ):
                self._problem(segment.name, "its events are not the ones its manifest lists")
