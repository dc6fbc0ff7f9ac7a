"""The replay file of a real-model run (``--model`` writes ``replay.jsonl`` into ``--out``): every
request and reply as the model's HTTP API carried them, so that ``--replay FILE`` can re-score
the run offline, without an API key.

One JSON object per line, told apart by ``kind``:

- ``header`` (first): the model (``anthropic:NAME``), the codemode version, date, command,
  sandbox backend, trials, and a free-text ``note`` (how the recording was made);
- ``exchange``: one request of task ``task`` in mode ``mode``, trial ``trial``, turn ``turn``:
  the JSON body sent (``request``; never a header, so never the key), the HTTP ``status`` and
  the body that came back (``response``: JSON, or the text of a reply that was not JSON);
- ``run``: what only the live run could measure for one task, mode and trial (``measured``:
  MCP calls and gate decisions, wall time, sandbox and broker use), written as it ends.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, cast

import httpx
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from codemode._version import codemode_version
from codemode.bench._model import Mode

FORMAT = 1
FILE_NAME = "replay.jsonl"
RunKey = tuple[str, Mode, int]
"""(task, mode, trial)."""


class ReplayError(Exception):
    """A replay file that cannot be read, or a run that does not replay as it was recorded."""


class _Line(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Header(_Line):
    kind: Literal["header"] = "header"
    format: Literal[1] = FORMAT
    model: str
    codemode: str
    date: str
    command: str
    backend: str
    trials: int
    note: str = ""


class Exchange(_Line):
    kind: Literal["exchange"] = "exchange"
    task: str
    mode: Mode
    trial: int
    turn: int
    request: dict[str, Any]
    status: int
    response: dict[str, Any] | str


class RunLine(_Line):
    kind: Literal["run"] = "run"
    task: str
    mode: Mode
    trial: int
    measured: dict[str, Any]


_LINE: TypeAdapter[Header | Exchange | RunLine] = TypeAdapter(
    Annotated[Header | Exchange | RunLine, Field(discriminator="kind")]
)


@dataclass
class Recording:
    path: Path
    header: Header
    exchanges: dict[RunKey, list[Exchange]] = field(default_factory=lambda: {})
    """Each run's exchanges in turn order, the runs in the order they were recorded."""
    measured: dict[RunKey, dict[str, Any]] = field(default_factory=lambda: {})

    @property
    def provider(self) -> str:
        return self.header.model.partition(":")[0]


def read_recording(path: Path) -> Recording:
    """Read and check a replay file; an error names the line and what is wrong with it."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ReplayError(f"cannot read the replay file {path}: {exc.strerror or exc}") from exc
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not lines:
        raise ReplayError(
            f"{path} is empty: a replay file is what `bench tokens --model` writes ({FILE_NAME})"
        )
    parsed = [_parse(path, n, line) for n, line in lines]
    header = parsed[0]
    if not isinstance(header, Header):
        raise ReplayError(f"{path} line {lines[0][0]}: a replay file starts with its header line")
    recording = Recording(path, header)
    for (n, _), line in zip(lines[1:], parsed[1:], strict=True):
        if isinstance(line, Header):
            raise ReplayError(f"{path} line {n}: a second header (one replay file holds one run)")
        key: RunKey = (line.task, line.mode, line.trial)
        if isinstance(line, RunLine):
            recording.measured[key] = line.measured
            continue
        turns = recording.exchanges.setdefault(key, [])
        if line.turn != len(turns):
            raise ReplayError(
                f"{path} line {n}: turn {line.turn} of {line.task} [{line.mode}] trial {line.trial} "
                f"follows {len(turns)} recorded turns (lines are written in order: was it edited?)"
            )
        turns.append(line)
    if not recording.exchanges:
        raise ReplayError(f"{path} holds no model request to replay")
    return recording


def _parse(path: Path, number: int, line: str) -> Header | Exchange | RunLine:
    try:
        return _LINE.validate_json(line)
    except ValidationError as exc:
        problem = exc.errors()[0]
        where = ".".join(str(part) for part in problem["loc"]) or "the line"
        raise ReplayError(f"{path} line {number}: {where}: {problem['msg']}") from None


class ReplayWriter:
    """Writes one replay file: the header once the sandbox backend is known (:meth:`start`), then
    each line flushed as it is written, so a run that dies midway leaves the requests it made."""

    def __init__(self, path: Path, *, model: str, command: str, trials: int, note: str = "") -> None:
        self.path = path
        self._model, self._command, self._trials, self._note = model, command, trials, note
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("w", encoding="utf-8")
        self._lock = threading.Lock()
        self._started = False

    def start(self, backend: str) -> None:
        date = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
        self._write(
            Header(
                model=self._model,
                codemode=codemode_version(),
                date=date,
                command=self._command,
                backend=backend,
                trials=self._trials,
                note=self._note,
            )
        )
        self._started = True

    def _write(self, line: _Line) -> None:
        text = json.dumps(line.model_dump(mode="json"), ensure_ascii=False, separators=(",", ":"))
        with self._lock:
            self._file.write(text + "\n")
            self._file.flush()

    def exchange(
        self, key: RunKey, turn: int, request: dict[str, Any], status: int, response: dict[str, Any] | str
    ) -> None:
        assert self._started, "the header comes first"
        task, mode, trial = key
        self._write(
            Exchange(
                task=task,
                mode=mode,
                trial=trial,
                turn=turn,
                request=request,
                status=status,
                response=response,
            )
        )

    def run(self, key: RunKey, measured: dict[str, Any]) -> None:
        task, mode, trial = key
        self._write(RunLine(task=task, mode=mode, trial=trial, measured=measured))

    def close(self) -> None:
        self._file.close()


class RecordingTransport(httpx.BaseTransport):
    """The model client's transport for one run: sends each request on, and writes its body and
    the reply's to the replay file."""

    def __init__(self, inner: httpx.BaseTransport, writer: ReplayWriter, key: RunKey) -> None:
        self._inner = inner
        self._writer = writer
        self._key = key
        self._turn = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self._inner.handle_request(request)
        body = response.read()
        self._writer.exchange(
            self._key, self._turn, json.loads(request.content), response.status_code, _body(body)
        )
        self._turn += 1
        return response


def _body(content: bytes) -> dict[str, Any] | str:
    """A reply's body: its JSON object, or its text when it is not one (an error page)."""
    text = content.decode("utf-8", errors="replace")
    try:
        parsed: Any = json.loads(text)
    except ValueError:
        return text
    return cast(dict[str, Any], parsed) if isinstance(parsed, dict) else text
