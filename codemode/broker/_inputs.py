"""Input that a downstream server asks for during a tool call (MCP elicitation and sampling), and
who gives it.

A server may pause a tool call to ask for input, for example to confirm a destructive action.
The answer must come from the person behind the run, never from the program: the program is
the party whose action is being confirmed. So the request goes to the run's :class:`Elicitor`
(the terminal of ``codemode run``, the Python API's callback), and a run without one declines.

Form requests carry a flat JSON schema (MCP restricts it to one level of string, number,
integer, boolean and enum properties). :func:`complete_form` turns an answer into what the
server receives, whoever gave it:

==================  ===========================================================================
schema              what the answer must hold
==================  ===========================================================================
``required``        every listed property, after defaults are filled in
``default``         used for a property the answer leaves out (SEP-1034)
``enum``/``oneOf``  one of the listed values (``oneOf`` items name theirs in ``const``)
``type: string``    text, within ``minLength``/``maxLength``
``type: integer``   a whole number (``"42"`` typed at a prompt becomes 42), within bounds
``type: number``    a number, within ``minimum``/``maximum``
``type: boolean``   true or false (``y``/``yes``/``true``/``n``/``no``/``false`` at a prompt)
anything else       refused: the host does not send what it cannot check
==================  ===========================================================================

A server may also ask for a model completion (MCP sampling, ``[servers.X] sampling = "relay"``).
That goes to the run's :class:`Sampler` (the MCP client's model under ``codemode serve``, the
Python API's callback), never to the program; ``codemode run`` has no model and refuses
(:class:`RefusingSampler`). What the sampler sees and what the server gets back are filtered and
budgeted by the broker (:mod:`codemode.broker._sampling`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, cast
from urllib.parse import urlsplit

import mcp_types

ElicitationAction = Literal["accept", "decline", "cancel"]

_TRUE = frozenset({"y", "yes", "true", "1"})
_FALSE = frozenset({"n", "no", "false", "0"})


class FormError(ValueError):
    """An answer that does not fit the requested schema (the message says which field and why)."""


@dataclass(frozen=True)
class ElicitationRequest:
    """What the person is asked, and for which call."""

    call_id: str
    principal: str
    tenant: str
    server: str
    tool: str
    message: str
    mode: Literal["form", "url"] = "form"
    schema: Mapping[str, Any] = field(default_factory=lambda: {})
    """The requested schema (form mode)."""
    url: str | None = None
    """The page the server asks the person to open (url mode). codemode opens nothing itself."""
    elicitation_id: str | None = None
    """The server's id for a URL request (it may later report the interaction complete)."""

    @property
    def url_host(self) -> str:
        return urlsplit(self.url or "").hostname or "(no host)"


@dataclass(frozen=True)
class ElicitationAnswer:
    action: ElicitationAction
    content: Mapping[str, Any] | None = None
    """The form's values (accept only); defaults are filled in by :func:`complete_form`."""
    answered_by: str = "callback"
    """Who answered (``terminal``, ``callback``, ``host``…), for the ledger."""


class Elicitor(Protocol):
    async def elicit(self, request: ElicitationRequest) -> ElicitationAnswer: ...


class CallbackElicitor:
    """Answers with a function: for embedding applications, tests and scripted operators."""

    def __init__(
        self, answer: Callable[[ElicitationRequest], Awaitable[ElicitationAnswer]], name: str = "callback"
    ) -> None:
        self._answer = answer
        self.name = name

    async def elicit(self, request: ElicitationRequest) -> ElicitationAnswer:
        return await self._answer(request)


@dataclass(frozen=True)
class SamplingRequest:
    """A model completion a server asks for during one call, as the sampler gets it."""

    call_id: str
    principal: str
    tenant: str
    server: str
    tool: str
    params: mcp_types.CreateMessageRequestParams
    """The request after the result filter (secrets redacted, PII as placeholders)."""


@dataclass(frozen=True)
class SamplingAnswer:
    """The completion (``result``), or why there is none (``refusal``: the server is told)."""

    result: mcp_types.CreateMessageResult | None = None
    answered_by: str = "callback"
    """Who answered (``mcp-client``, ``callback``, ``host``…), for the ledger."""
    refusal: str | None = None

    @classmethod
    def text(cls, text: str, *, model: str, answered_by: str = "callback") -> SamplingAnswer:
        """A plain text completion from ``model``."""
        content = mcp_types.TextContent(type="text", text=text)
        return cls(mcp_types.CreateMessageResult(role="assistant", content=content, model=model), answered_by)


class Sampler(Protocol):
    async def sample(self, request: SamplingRequest) -> SamplingAnswer: ...


class CallbackSampler:
    """Answers with a function (a model the embedding application calls, or a test's script)."""

    def __init__(
        self, answer: Callable[[SamplingRequest], Awaitable[SamplingAnswer]], name: str = "callback"
    ) -> None:
        self._answer = answer
        self.name = name

    async def sample(self, request: SamplingRequest) -> SamplingAnswer:
        return await self._answer(request)


class RefusingSampler:
    """A run with no model to ask (``codemode run``): every request is refused, saying why."""

    def __init__(self, reason: str, name: str = "host") -> None:
        self.reason = reason
        self.name = name

    async def sample(self, request: SamplingRequest) -> SamplingAnswer:
        return SamplingAnswer(answered_by=self.name, refusal=self.reason)


def form_properties(schema: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    properties: object = schema.get("properties", {})
    if not isinstance(properties, Mapping):
        raise FormError("the requested schema's properties are not an object")
    checked: dict[str, Mapping[str, Any]] = {}
    for name, spec in cast("Mapping[str, object]", properties).items():
        if not isinstance(spec, Mapping):
            raise FormError(f"field {name!r}: its schema is not an object")
        checked[name] = cast("Mapping[str, Any]", spec)
    return checked


def choices(spec: Mapping[str, Any]) -> list[Any] | None:
    """The values a field allows, if it is an enumeration (``enum``, or ``oneOf``/``anyOf`` consts)."""
    enum: object = spec.get("enum")
    if isinstance(enum, list):
        return list(cast("list[Any]", enum))
    for key in ("oneOf", "anyOf"):
        options: object = spec.get(key)
        if isinstance(options, list):
            items = cast("list[object]", options)
            if all(isinstance(o, Mapping) and "const" in o for o in items):
                return [cast("Mapping[str, Any]", o)["const"] for o in items]
    return None


def complete_form(schema: Mapping[str, Any], content: Mapping[str, Any] | None) -> dict[str, Any]:
    """The answer as the server will get it: defaults filled in, every value checked.

    Raises:
        FormError: a required field is missing, a value has the wrong type or is out of range,
            or the answer names a field the schema does not have.
    """
    properties = form_properties(schema)
    given = dict(content or {})
    unknown = sorted(set(given) - set(properties))
    if unknown:
        raise FormError(f"the form has no field {', '.join(map(repr, unknown))}")
    answer: dict[str, Any] = {}
    for name, spec in properties.items():
        if name in given and given[name] is not None:
            answer[name] = check_field(name, spec, given[name])
        elif "default" in spec:
            answer[name] = check_field(name, spec, spec["default"])
    required: object = schema.get("required", [])
    listed = cast("list[object]", required) if isinstance(required, list) else []
    missing = [str(name) for name in listed if name not in answer]
    if missing:
        raise FormError(f"required field {', '.join(map(repr, missing))} has no value")
    return answer


def check_field(name: str, spec: Mapping[str, Any], value: Any) -> Any:
    """One field's value as the server gets it (a typed-in ``"42"`` becomes 42), or FormError."""
    allowed = choices(spec)
    kind = spec.get("type", "string" if allowed is not None else None)
    if kind == "array" and allowed is None:  # a multi-select: items carry the enumeration
        items: object = spec.get("items", {})
        allowed_items = choices(cast("Mapping[str, Any]", items)) if isinstance(items, Mapping) else None
        if not isinstance(value, list) or allowed_items is None:
            raise FormError(f"field {name!r} takes a list of the listed values")
        picked = cast("list[object]", value)
        wrong = [v for v in picked if v not in allowed_items]
        if wrong:
            raise FormError(f"field {name!r}: {wrong!r} not among {allowed_items!r}")
        return list(picked)
    if kind not in ("string", "integer", "number", "boolean"):
        raise FormError(f"field {name!r} has type {kind!r}, which an elicitation form cannot hold")
    converted = _converted(name, kind, value)
    if allowed is not None and converted not in allowed:
        raise FormError(f"field {name!r} must be one of {allowed!r}, not {converted!r}")
    _check_bounds(name, spec, converted)
    return converted


def _converted(name: str, kind: str, value: Any) -> Any:
    if kind == "boolean":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise FormError(f"field {name!r} takes yes or no, not {value!r}")
    if kind == "string":
        if not isinstance(value, str):
            raise FormError(f"field {name!r} takes text, not {value!r}")
        return value
    if isinstance(value, bool):
        raise FormError(f"field {name!r} takes a number, not {value!r}")
    if isinstance(value, str):
        try:
            value = int(value) if kind == "integer" else float(value)
        except ValueError:
            raise FormError(
                f"field {name!r} takes {'a whole number' if kind == 'integer' else 'a number'}"
            ) from None
    if kind == "integer" and not (
        isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    ):
        raise FormError(f"field {name!r} takes a whole number, not {value!r}")
    if not isinstance(value, int | float):
        raise FormError(f"field {name!r} takes a number, not {value!r}")
    return int(value) if kind == "integer" else value


def _check_bounds(name: str, spec: Mapping[str, Any], value: Any) -> None:
    if isinstance(value, str):
        low, high = spec.get("minLength"), spec.get("maxLength")
        if isinstance(low, int) and len(value) < low:
            raise FormError(f"field {name!r} needs at least {low} characters")
        if isinstance(high, int) and len(value) > high:
            raise FormError(f"field {name!r} takes at most {high} characters")
    elif isinstance(value, int | float) and not isinstance(value, bool):
        low, high = spec.get("minimum"), spec.get("maximum")
        if isinstance(low, int | float) and value < low:
            raise FormError(f"field {name!r} must be at least {low}")
        if isinstance(high, int | float) and value > high:
            raise FormError(f"field {name!r} must be at most {high}")
