"""Row-level security: each kind table admits only the rows of the tenant the session names.

With the `row_security` option on, `mnemostore.tenant` holds `tenant:<tenant id>` (`tenant:`
alone for the default tenant) whenever a statement touches a kind table: set for the session of
a pooled connection when it changes (`PostgresBackend._name_tenant`), or for the transaction on a
borrowed connection and for each tenant of a batch of several. The policy compares it with the
row's tenant. The prefix keeps a setting that was reset ('' once a transaction set it, NULL
before) from reading as the default tenant, whose rows are stored with tenant ''.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...core.errors import BackendError
from ...core.records import KINDS
from .layout import tenant_key
from .schema import Names, quote_ident

if TYPE_CHECKING:
    import psycopg

SETTING = "mnemostore.tenant"
PREFIX = "tenant:"
POLICY = "mnemostore_tenant"
SET_TENANT = f"SELECT set_config('{SETTING}', %s, true)"
"""Names the tenant for the rest of the current transaction (run it inside one)."""
SET_TENANT_SESSION = f"SELECT set_config('{SETTING}', %s, false)"
"""Names the tenant for the session (outside a transaction, or one that commits)."""
_CURRENT = f"current_setting('{SETTING}', true)"
CONDITION = f"tenant = CASE WHEN starts_with({_CURRENT}, '{PREFIX}') THEN substr({_CURRENT}, {len(PREFIX) + 1}) END"
"""The policy's USING and WITH CHECK expression: one comparison of the column with a stable
value, so the planner estimates it as an equality on `tenant` and can use the (tenant, …)
indexes for it (with the prefix test as a second clause it guessed one row and planned scans)."""


def setting_value(tenant: str | None) -> str:
    """What `mnemostore.tenant` holds while a statement works for `tenant` (None: the default)."""
    return PREFIX + tenant_key(tenant)


def row_security_sql(schema: str = "public", table_prefix: str = "mnemo_", *, force: bool = False) -> list[str]:
    """The statements that put the tenant policy on a store's built-in kind tables (run by their owner;
    an application's kind's table gets it from mnemostore as it is created, with row_security on).

    Idempotent. `force` subjects the owner too (`FORCE ROW LEVEL SECURITY`); the meta table
    holds no tenant's data and gets no policy."""
    names = Names(schema, table_prefix)
    return policy_statements(names, [names.prefix + kind for kind in KINDS], force=force)


def policy_statements(names: Names, tables: list[str], *, force: bool) -> list[str]:
    """ENABLE (and FORCE) row-level security and (re)create the tenant policy on `tables`."""
    statements = []
    for table in tables:
        qualified = f"{quote_ident(names.schema)}.{quote_ident(table)}"
        statements += [
            f"ALTER TABLE {qualified} ENABLE ROW LEVEL SECURITY",
            *([f"ALTER TABLE {qualified} FORCE ROW LEVEL SECURITY"] if force else []),
            f"DROP POLICY IF EXISTS {POLICY} ON {qualified}",
            f"CREATE POLICY {POLICY} ON {qualified} USING ({CONDITION}) WITH CHECK ({CONDITION})",
        ]
    return statements


@dataclass(frozen=True)
class TableState:
    """What the catalog says about one kind table, for the connected role."""

    table: str
    exists: bool
    enabled: bool
    forced: bool
    has_policy: bool
    owned: bool
    active: bool
    """Whether the policies apply to this role (`row_security_active`): not for a superuser, a
    BYPASSRLS role, or the owner unless forced."""

    def needs(self, force: bool) -> bool:
        return self.exists and (not self.enabled or not self.has_policy or (force and not self.forced))


def table_states(conn: psycopg.Connection[tuple[object, ...]], names: Names) -> list[TableState]:
    tables = [kind.table for kind in names.layouts()]
    rows = conn.execute(
        "SELECT c.oid IS NOT NULL, coalesce(c.relrowsecurity, false), coalesce(c.relforcerowsecurity, false), "
        "EXISTS (SELECT 1 FROM pg_policy p WHERE p.polrelid = c.oid AND p.polname = %s), "
        "coalesce(pg_has_role(c.relowner, 'USAGE'), false), coalesce(row_security_active(c.oid), false) "
        "FROM unnest(%s::text[]) WITH ORDINALITY AS n(name, i) LEFT JOIN pg_class c ON c.oid = to_regclass(n.name) "
        "ORDER BY n.i",
        (POLICY, [f"{quote_ident(names.schema)}.{quote_ident(table)}" for table in tables])).fetchall()
    return [TableState(table, *(bool(value) for value in row)) for table, row in zip(tables, rows, strict=True)]


def ensure(conn: psycopg.Connection[tuple[object, ...]], names: Names, force: bool) -> bool:
    """Put the policy on every existing kind table lacking it (this role must own those), then
    return whether the policies apply to this role."""
    states = table_states(conn, names)
    missing = [state for state in states if state.needs(force)]
    if missing:
        foreign = [state.table for state in missing if not state.owned]
        if foreign:
            role = conn.execute("SELECT current_user").fetchone()
            mode = "force" if force else "on"
            raise BackendError(
                f"row_security={mode}: table {names.schema}.{foreign[0]} lacks the {POLICY!r} policy"
                f"{' (forced)' if force else ''} and role {role[0] if role else '?'} does not own it; have its owner "
                "run the statements of mnemostore.backends.postgres.row_security.row_security_sql("
                f"{names.schema!r}, {names.prefix!r}{', force=True' if force else ''}), or open the store once "
                f"with row_security={mode} as the owner")
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (names.lock_key(),))
            for statement in policy_statements(names, [state.table for state in missing], force=force):
                conn.execute(statement)
        states = table_states(conn, names)
    return any(state.active for state in states)


def active_tables_sql(names: Names) -> tuple[str, list[str]]:
    """A scalar subquery (and its parameter): whether the policies of any existing kind table
    apply to the connected role."""
    tables = [f"{quote_ident(names.schema)}.{quote_ident(kind.table)}" for kind in names.layouts()]
    return ("(SELECT coalesce(bool_or(row_security_active(c)), false) "
            "FROM unnest(%s::text[]) AS n(name), to_regclass(n.name) AS c WHERE c IS NOT NULL)", tables)
