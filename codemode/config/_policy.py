"""The ``[policy]`` section: who may call what, on which resources, with whose consent, how often.

The policy is data; the broker's gates evaluate it. Everything unknown is rejected at load
time, so a misspelt rule is an error instead of a rule that silently never matches.

Tool selectors are globs over ``server/tool`` (``crm/*``, ``*/get_*``, ``*``). Risk levels:

- ``low``: declared read-only by this policy (``consent.read_only``), or ``readOnlyHint`` on a
  server configured ``trusted = true`` or on a tool whose hints were accepted at review
  (``codemode pin --accept-hints``);
- ``medium``: ``destructiveHint: false`` on such a server or tool (it writes, but only additively);
- ``high``: everything else: any tool with ``destructiveHint: true``, contradictory hints, and
  every other tool of an untrusted server (its hints are claims nobody checked, so they never
  lower risk).

By default ``medium`` and above need approval, so any tool not known to be read-only needs consent.
"""

from __future__ import annotations

import functools
from typing import Annotated, Any, Literal, cast

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from codemode.config._quotas import QuotaPolicy
from codemode.errors import PolicyError

Risk = Literal["low", "medium", "high"]
RISK_ORDER: dict[str, int] = {"low": 0, "medium": 1, "high": 2}


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _name_selector(what: str) -> AfterValidator:
    def check(value: str) -> str:
        if not value or value.count("/") > 1 or (value != "*" and "/" not in value):
            raise ValueError(
                f"{value!r} is not a {what} selector: write SERVER/{what.upper()} with * globs, or *"
            )
        return value

    return AfterValidator(check)


def _check_resource_selector(value: str) -> str:
    server, slash, uri = value.partition("/")
    if value != "*" and (not slash or not server or not uri or ":" in server):
        raise ValueError(
            f"{value!r} is not a resource selector: write SERVER/URI-GLOB "
            "(crm/crm://customers/*), SERVER/* for all of a server's resources, or *"
        )
    return value


ToolSelector = Annotated[str, _name_selector("tool")]
"""``server/tool`` with ``*`` and ``?`` globs, or ``*`` for everything."""
PromptSelector = Annotated[str, _name_selector("prompt")]
"""``server/prompt`` with ``*`` and ``?`` globs, or ``*`` for everything."""
ResourceSelector = Annotated[str, AfterValidator(_check_resource_selector)]
"""``server/URI-GLOB``: a server glob, then a glob over the resource's URI with the rules of a
``kind = "glob"`` scope rule (``*`` does not cross ``/``, ``**`` does, a ``scheme://host/...``
glob is matched as a URL); ``server/*`` is every resource of the server, ``*`` every resource."""


class ScopeRule(_Section):
    """Limits arguments of the matching tools to allowed values.

    A ``path`` rule also covers every argument that looks like a path (by name or by its pinned
    schema's ``format``), so a tool cannot slip a path past it under another name.
    """

    tools: list[ToolSelector] = Field(min_length=1)
    argument: str | None = Field(default=None, min_length=1)
    """The argument (JSON property name) that names the resource, e.g. ``path`` or ``customer_id``;
    every occurrence counts, nested ones too (``items[0].customer_id``)."""
    arguments: list[str] = Field(default_factory=lambda: [])
    """More arguments the rule limits, e.g. ``["source", "destination"]`` (with ``argument`` or alone)."""
    kind: Literal["path", "glob"] = "glob"
    """``path``: filesystem paths, decoded, normalised and real-path checked against ``allow`` prefixes;
    ``glob``: record ids, repo names and similar, matched against ``allow`` globs, where ``*`` does
    not cross ``/`` (``**`` does), no wildcard matches ``?``, ``#`` or ``@``, a ``scheme://host/…``
    glob is matched as a URL (host label by label), and values with ``..`` segments, backslashes
    or control characters are refused (see :mod:`codemode.broker.gates._scope`)."""
    allow: list[str] = Field(min_length=1)
    access: Literal["read", "write"] = "write"
    """``read`` grants only read-risk tools on these resources; a write-risk tool is refused."""

    @model_validator(mode="after")
    def _names_an_argument(self) -> ScopeRule:
        if self.argument is None and not self.arguments:
            raise ValueError("a scope rule needs 'argument' or 'arguments' (the arguments it limits)")
        if any(not name for name in self.arguments):
            raise ValueError("'arguments' must not contain empty names")
        return self

    @property
    def argument_names(self) -> tuple[str, ...]:
        """Every argument this rule names explicitly."""
        named = [self.argument] if self.argument is not None else []
        return tuple(dict.fromkeys([*named, *self.arguments]))


class PrincipalPolicy(_Section):
    tenants: list[str] = Field(default_factory=lambda: ["default"], min_length=1)
    """Tenants this principal may act in; a run bound to any other tenant is refused."""
    tools: list[ToolSelector] = Field(default_factory=lambda: ["*"])
    """Tool selectors this principal may call (and see in the stub tree). Unset: every tool in
    allow mode, none in deny mode (see :class:`PolicyConfig`)."""
    deny_tools: list[ToolSelector] = Field(default_factory=lambda: [])
    """Wins over every grant; ``server/*`` (or ``*``) also takes the server's resources and prompts."""
    scopes: list[ScopeRule] = Field(default_factory=lambda: [])
    resources: list[ResourceSelector] | None = None
    """Resources this principal may read (``crm/crm://customers/*``, ``docs/*``), whatever its
    tools and scope rules (``deny_tools`` of a whole server still wins). Unset: a server's
    resources go with its tools: in deny mode only with a grant of all of them (``crm/*`` or
    ``*``), in allow mode with a grant of any; either way not on a server its scope rules limit,
    as a URI cannot be checked against those rules."""
    prompts: list[PromptSelector] | None = None
    """Prompts this principal may get (``crm/summarise_*``). Unset: as for ``resources``."""
    # -- saved skills (issue 41) -------------------------------------------------------------
    skills: list[str] | None = None
    """Saved skills this principal's runs see (names or ``fnmatch`` patterns: ``renewals_*``).
    Unset: every approved, current skill of the run's tenant. A skill never widens what the
    principal may call: its tool calls pass every gate as the principal's own."""
    approve_own_skills: bool = False
    """Whether this principal may approve a skill it proposed from inside a run (default: a
    person or another principal approves it)."""


class ConsentPolicy(_Section):
    require_at_risk: Risk = "medium"
    """Calls at or above this risk need an approval."""
    always: list[ToolSelector] = Field(default_factory=lambda: [])
    """Tools that always need approval, whatever their risk."""
    never: list[ToolSelector] = Field(default_factory=lambda: [])
    """Tools that never need approval (use with care: it overrides risk; ``always`` overrides it)."""
    read_only: list[ToolSelector] = Field(default_factory=lambda: [])
    """Tools this policy declares read-only (risk ``low``), whatever the server says."""
    approval_ttl_s: float = Field(default=300.0, gt=0, le=7 * 86_400)


class BudgetPolicy(_Section):
    calls_per_run: int = Field(default=1_000, ge=0)
    calls_per_tool: dict[ToolSelector, int] = Field(default_factory=lambda: {})
    """Per-run caps for matching tools, e.g. ``{ "crm/record_payment" = 5 }``."""
    result_bytes_per_run: int = Field(default=64 * 1024 * 1024, ge=0)
    """Total size of tool results a run may receive."""
    concurrent_calls: int = Field(default=16, ge=1, le=1024)
    wall_time_s: float = Field(default=600.0, gt=0)
    """No call starts after a run has lasted this long."""
    money_per_run: float | None = Field(default=None, ge=0)
    costs: dict[ToolSelector, float] = Field(default_factory=lambda: {})
    """Price per call for matching tools, in the unit of ``money_per_run``."""
    sampling_tokens_per_run: int = Field(default=20_000, ge=0)
    """Tokens of model completions relayed for servers (``sampling = "relay"``) in one run: each
    request's prompt and reply. A request is refused before anyone is asked when its prompt plus
    its ``maxTokens`` would not fit in what is left."""


class ResultPolicy(_Section):
    max_tool_result_bytes: int = Field(default=1_048_576, ge=1024)
    """Each tool result is cut to this size (with a truncation marker) before the program sees it."""
    content_types: list[str] = Field(
        default_factory=lambda: ["text", "image", "audio", "resource", "resource_link"]
    )
    mime_types: dict[Literal["image", "audio"], list[str]] = Field(
        default_factory=lambda: {
            "image": ["image/png", "image/jpeg", "image/gif", "image/webp"],
            "audio": ["audio/wav", "audio/x-wav", "audio/mpeg", "audio/ogg", "audio/flac", "audio/webm"],
        }
    )
    """MIME types allowed per content type; a block of another type, or whose bytes do not match
    its declared type, is replaced by a note saying why."""
    redact_secrets: bool = True
    pii: Literal["tokenize", "redact", "off"] = "tokenize"
    """``tokenize``: replace PII by stable placeholders the broker maps back when passed to a tool."""
    pii_kinds: list[Literal["email", "phone", "card", "iban", "ssn"]] = Field(
        default_factory=lambda: ["email", "phone", "card", "iban", "ssn"]
    )
    pii_masked_tools: list[ToolSelector] = Field(default_factory=lambda: [])
    """Tools that get placeholders exactly as the program passed them, never the values behind
    them: tools that hand their input back transformed (encode, compress, echo, translate), whose
    output the result filter would not recognise as the value it masked."""


class PolicyConfig(_Section):
    mode: Literal["allow", "deny"] = "allow"
    """``deny``: deny by default - only configured principals, only the tools they list (none
    without ``tools``), a server's resources and prompts only with all of its tools or by name
    (``resources``, ``prompts``)."""
    default_principal: str = "local"
    default_tenant: str = "default"
    principals: dict[str, PrincipalPolicy] = Field(default_factory=lambda: {})
    consent: ConsentPolicy = Field(default_factory=ConsentPolicy)
    budget: BudgetPolicy = Field(default_factory=BudgetPolicy)
    results: ResultPolicy = Field(default_factory=ResultPolicy)
    quotas: QuotaPolicy = Field(default_factory=QuotaPolicy)
    """Runs, tool calls and money per minute/hour/day and concurrent runs, per principal and
    tenant, counted in the ledger's database (see :mod:`codemode.config._quotas`)."""
    compensate: Literal["off", "on_failure"] = "off"
    """``on_failure``: a run that fails after side effects has them undone by the calls of
    ``[compensation]`` (as ``codemode run --compensate`` does)."""
    strict_arguments: bool = True
    """Refuse arguments the tool's pinned schema does not declare, nested ones too (stops smuggled
    fields)."""

    @model_validator(mode="before")
    @classmethod
    def _deny_mode_grants_only_what_is_listed(cls, data: Any) -> Any:
        """In deny mode a principal without ``tools`` gets none: the field's default (every
        tool) is allow mode's, and a table that only names tenants must not open everything."""
        if not isinstance(data, dict):
            return data
        fields = cast(dict[str, Any], data)
        principals = fields.get("principals")
        if fields.get("mode") != "deny" or not isinstance(principals, dict):
            return fields
        resolved: dict[Any, Any] = {}
        for name, rules in cast(dict[Any, Any], principals).items():
            if isinstance(rules, dict) and "tools" not in rules:
                resolved[name] = {**cast(dict[str, Any], rules), "tools": list[str]()}
            elif isinstance(rules, PrincipalPolicy) and "tools" not in rules.model_fields_set:
                resolved[name] = rules.model_copy(update={"tools": list[str]()})
            else:
                resolved[name] = rules
        return {**fields, "principals": resolved}

    @model_validator(mode="after")
    def _deny_mode_needs_principals(self) -> PolicyConfig:
        if self.mode == "deny" and not self.principals:
            raise ValueError("mode = 'deny' needs at least one [policy.principals.<name>] table")
        return self

    def principal(self, name: str) -> PrincipalPolicy | None:
        """The rules for ``name``; in allow mode an unconfigured principal gets the open default."""
        if name in self.principals:
            return self.principals[name]
        if self.mode == "allow":
            return _open_principal(self.default_tenant)
        return None

    def identity(self, principal: str | None, tenant: str | None) -> tuple[str, str]:
        """The principal and tenant a run is bound to when these are asked for (None: the
        defaults; a principal's tenant defaults to the policy's if it belongs there, else its first).

        Raises:
            PolicyError: the principal is unknown (the policy denies by default).
        """
        who = principal or self.default_principal
        rules = self.principal(who)
        if rules is None:
            raise PolicyError(f"unknown principal {who!r}: the policy denies by default")
        where = tenant or (self.default_tenant if self.default_tenant in rules.tenants else rules.tenants[0])
        return who, where


@functools.lru_cache(maxsize=64)
def _open_principal(tenant: str) -> PrincipalPolicy:
    # Built once per tenant, not on every call that asks (the model is frozen, so sharing is safe).
    # Not cached on the policy: model_copy would carry a cached value over to a changed copy.
    return PrincipalPolicy(tenants=[tenant])
