"""Secret redaction: credentials never reach the program, the model, the ledger, a terminal, a
log or a span.

Several signals find a secret, because each alone misses some:

======================  ==============================================  ===========================
Signal                  Example                                         Replaced by
======================  ==============================================  ===========================
known value             the value of a configured ``${VAR}``, or its    ``[REDACTED:${VAR}]``
                        base64, hex or URL-encoded form
shape of the value      ``AKIA…``, ``ghp_…``, PEM blocks, JWTs          ``[REDACTED:<kind>]``
URL credentials         ``postgres://app:pw@db/x``                      password hidden, user kept
field name (any depth)  ``{"SecretAccessKey": "wJalr…"}``               ``[REDACTED:<field>]``
name/value pair         ``{"Name": "DB_PASSWORD", "Value": "…"}``       ``[REDACTED:<name>]``
label inside a string   ``log: DB_PASSWORD=…``, ``"token": "…"``        label kept, value hidden
======================  ==============================================  ===========================

==========  ===========================================================================
module      its job
==========  ===========================================================================
_known      the values of configured secrets, remembered when the config names them
_rules      every rule of the table applied to a text or a JSON value
_logs       the same for every log record of the process
==========  ===========================================================================

False positives cost a little data; false negatives leak a secret, so the rules lean towards
matching. Stdlib only: the config, the ledger, the broker, the host and the CLI all use it.
"""

from __future__ import annotations

from codemode._redaction._known import (
    MIN_SECRET_CHARS,
    NOT_SECRET_VARIABLES,
    encoded_forms,
    forget_secrets,
    known_secret_in,
    redact_known,
    remember_secret,
)
from codemode._redaction._rules import (
    any_word_pattern,
    is_secret_field,
    might_hold_secrets,
    reads_as_credential,
    redact_secrets,
    redact_value,
    redact_value_counting,
    secret_kinds_in,
)

__all__ = [
    "MIN_SECRET_CHARS",
    "NOT_SECRET_VARIABLES",
    "any_word_pattern",
    "encoded_forms",
    "forget_secrets",
    "install_log_redaction",
    "is_secret_field",
    "known_secret_in",
    "might_hold_secrets",
    "reads_as_credential",
    "redact_known",
    "redact_secrets",
    "redact_value",
    "redact_value_counting",
    "remember_secret",
    "secret_kinds_in",
]


def install_log_redaction() -> None:
    """Make every log record of this process pass the rules (see :mod:`._logs`); idempotent.
    Imported on first use: most users of this package never touch logging."""
    from codemode._redaction._logs import install_log_redaction as install

    install()
