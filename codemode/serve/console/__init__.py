"""The operator console of ``codemode serve --transport http --console``.

Runs and their calls with each call's evidence chain, the approvals serve's runs are waiting
for (approve or deny), dry runs' plans (approve or reject, as ``codemode approve --plan``),
saved skills (approve or revoke, as ``codemode skill``), servers with their state and pin drift,
and the ledger's verification, in a server-rendered page for principals with the ``operator``
role. Each operator sees and answers only the tenants of its token (``console_tenants``; see
:mod:`._scope`).

Nothing is imported here: :mod:`codemode.serve._app` imports :mod:`._desk` while
:mod:`._auth` imports it back, so each user imports the submodule it needs.
"""
