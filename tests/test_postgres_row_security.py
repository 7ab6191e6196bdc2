"""Row-level security: a role the tenant policies apply to sees and writes one tenant's rows only,
through the store and through hand-written SQL alike."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg_pool import ConnectionPool
from tests.postgres_server import PostgresTestServer, postgres_server

import mnemostore
from mnemostore.backends.postgres import PostgresBackend
from mnemostore.backends.postgres.row_security import POLICY, row_security_sql
from mnemostore.core.errors import BackendError, ConfigError, MigrationError, UnsupportedCapability
from mnemostore.core.filters import F
from mnemostore.core.store import Store
from mnemostore.testing import ConformanceSuite
from mnemostore.testing.clauses.tenancy import TenancyClauses
from mnemostore.testing.factories import make, vectors

__all__ = ["postgres_server"]

PASSWORD = "rls-Pw-4417"
DIMENSION = 8
Admin = psycopg.Connection[tuple[Any, ...]]


def as_role(url: str, role: str) -> str:
    """`url` connecting as `role` (with the test password) instead of its own user."""
    return re.sub(r"^(postgres(?:ql)?://)[^@/]*@", rf"\g<1>{role}:{PASSWORD}@", url, count=1)


def backend_of(store: Store) -> PostgresBackend:
    assert isinstance(store.backend, PostgresBackend)
    return store.backend


@pytest.fixture(scope="module")
def admin(postgres_server: PostgresTestServer) -> Iterator[Admin]:
    """A superuser connection (the test server's own user)."""
    with mnemostore.open(postgres_server.url()) as store:  # also creates pgvector, which roles cannot
        info = backend_of(store).conninfo()
    with psycopg.connect(info, autocommit=True) as conn:
        yield conn


def _role(admin: Admin, *privileges: str) -> Iterator[str]:
    name = f"mnemo_rls_{uuid.uuid4().hex[:10]}"
    admin.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {} NOSUPERUSER NOBYPASSRLS").format(
        sql.Identifier(name), sql.Literal(PASSWORD)))
    for privilege in privileges:
        admin.execute(sql.SQL(privilege).format(role=sql.Identifier(name), db=sql.Identifier(admin.info.dbname)))
    yield name
    admin.execute(sql.SQL("DROP OWNED BY {0} CASCADE; DROP ROLE {0}").format(sql.Identifier(name)))


@pytest.fixture(scope="module")
def app_role(admin: Admin) -> Iterator[str]:
    """An application role that owns nothing: the policies apply to it."""
    yield from _role(admin)


@pytest.fixture(scope="module")
def owner_role(admin: Admin) -> Iterator[str]:
    """A role that creates (and so owns) its stores' schemas, neither superuser nor BYPASSRLS."""
    yield from _role(admin, "GRANT CREATE ON DATABASE {db} TO {role}")


def lay_out(postgres_server: PostgresTestServer, admin: Admin, app_role: str, *, policies: bool) -> str:
    """A store laid out by the superuser (vector columns typed), its tables granted to `app_role`
    and, if `policies`, secured by the statements a DBA runs; returns the schema."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with mnemostore.open(postgres_server.url(schema), dimension=DIMENSION) as owner:
        owner.embeddings.search(vectors(1, DIMENSION)[0], k=1)  # types every embedding column
    if policies:
        for statement in row_security_sql(schema):
            admin.execute(statement)
    admin.execute(sql.SQL("GRANT USAGE ON SCHEMA {0} TO {1}; "
                          "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {0} TO {1}").format(
        sql.Identifier(schema), sql.Identifier(app_role)))
    return schema


@pytest.fixture
def secured(postgres_server: PostgresTestServer, admin: Admin, app_role: str) -> str:
    """The app role's URL of a store under the tenant policies, with row_security on."""
    schema = lay_out(postgres_server, admin, app_role, policies=True)
    return as_role(postgres_server.url(schema, row_security="on"), app_role)


def raw(url: str) -> psycopg.Connection[tuple[Any, ...]]:
    """A plain connection with the URL's role, outside mnemostore."""
    with mnemostore.open(url) as store:
        info = backend_of(store).conninfo()
    return psycopg.connect(info, autocommit=True)


def table(url: str, kind: str = "heuristic") -> sql.Composed:
    schema = re.search(r"schema=([^&]+)", url)
    assert schema is not None
    return sql.SQL("{}").format(sql.Identifier(schema.group(1), f"mnemo_{kind}"))


def test_the_store_works_per_tenant_for_a_role_under_the_policies(secured: str) -> None:
    with (mnemostore.open(secured, tenant="a", dimension=DIMENSION) as a,
          mnemostore.open(secured, tenant="b", dimension=DIMENSION) as b,
          mnemostore.open(secured, dimension=DIMENSION) as default):
        matrix = vectors(200, DIMENSION, seed=3)
        mine = a.embeddings.put([make("embedding", i, agent=f"g{i % 4}", embedding=matrix[i]) for i in range(100)])
        theirs = b.embeddings.put([make("embedding", i, embedding=matrix[i]) for i in range(3)])  # same ids
        default.heuristics.put([make("heuristic", 1)])
        assert a.embeddings.count() == 100 and b.embeddings.count() == 3 and default.embeddings.count() == 0
        assert a.embeddings.get(mine[0].id) == mine[0] and b.embeddings.get(mine[0].id) == theirs[0]
        assert b.embeddings.get(mine[50].id) is None
        assert {r.id for r in a.embeddings.query(where=F.agent == "g1")} == {r.id for r in mine if r.agent == "g1"}
        hits = b.embeddings.search(matrix[1], k=10)
        assert [h.record.id for h in hits][:1] == [theirs[1].id] and len(hits) == 3
        filtered = a.embeddings.search(matrix[5], k=5, where=F.agent == "g1")
        assert [h.record.id for h in filtered][:1] == [mine[5].id] and all(h.record.agent == "g1" for h in filtered)
        heuristic = a.heuristics.add(make("heuristic", 2, occurrence_count=0, success_count=0))
        a.heuristics.reinforce(heuristic.id)
        a.heuristics.update(heuristic.id, set={"strategy": "new", "metadata": {"v": 2}})
        assert (a.heuristics[heuristic.id].occurrence_count, a.heuristics[heuristic.id].strategy) == (1, "new")
        assert b.heuristics.get(heuristic.id) is None and default.heuristics.count() == 1
        a.checkpoints.save("run", {"n": 1})
        assert b.checkpoints.latest("run") is None
        assert a.checkpoints.latest("run").state == {"n": 1}  # type: ignore[union-attr]
        assert b.embeddings.delete(where={}) == 3 and a.embeddings.count() == 100
        assert backend_of(a).describe()["row_security"] == "on"


def test_raw_sql_of_the_role_sees_and_writes_only_the_tenant_it_names(secured: str) -> None:
    with (mnemostore.open(secured, tenant="a") as a, mnemostore.open(secured, tenant="b") as b,
          mnemostore.open(secured) as default):
        a.heuristics.put([make("heuristic", i) for i in range(3)])
        b.heuristics.put([make("heuristic", i) for i in range(2)])
        default.heuristics.put([make("heuristic", 9)])
    heuristics = table(secured)
    count = sql.SQL("SELECT count(*) FROM {}").format(heuristics)
    with raw(secured) as conn:
        assert conn.execute(count).fetchone() == (0,)  # no tenant named: no row
        with conn.transaction(force_rollback=True):
            conn.execute("SELECT set_config('mnemostore.tenant', 'tenant:a', true)")
            tenants = conn.execute(sql.SQL("SELECT DISTINCT tenant FROM {}").format(heuristics)).fetchall()
            assert tenants == [("a",)] and conn.execute(count).fetchone() == (3,)
            assert conn.execute(sql.SQL("UPDATE {} SET agent = 'x'").format(heuristics)).rowcount == 3
            assert conn.execute(sql.SQL("DELETE FROM {}").format(heuristics)).rowcount == 3
        for statement in ("INSERT INTO {} (tenant, id, doc, metadata) VALUES ('b', 'forged', '\\x7b7d', '{{}}')",
                          "UPDATE {} SET tenant = 'b'"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"), \
                    conn.transaction():
                conn.execute("SELECT set_config('mnemostore.tenant', 'tenant:a', true)")
                conn.execute(sql.SQL(statement).format(heuristics))
        # Once a transaction set it, the setting reads '': still no row, the default tenant's neither.
        assert conn.execute("SELECT current_setting('mnemostore.tenant')").fetchone() == ("",)
        assert conn.execute(count).fetchone() == (0,)
        for value, expected in (("a", 0), ("tenant:", 1), ("tenant:b", 2)):
            conn.execute("SELECT set_config('mnemostore.tenant', %s, false)", (value,))
            assert conn.execute(count).fetchone() == (expected,), value
    with mnemostore.open(secured, tenant="a") as a:
        assert a.heuristics.count() == 3 and {h.agent for h in a.heuristics.all()} != {"x"}


def test_a_restrictive_policy_pins_a_role_to_one_tenant_whatever_it_names(
        secured: str, admin: Admin, app_role: str) -> None:
    with mnemostore.open(secured, tenant="a") as a, mnemostore.open(secured, tenant="b") as b:
        a.heuristics.put([make("heuristic", 1)])
        b.heuristics.put([make("heuristic", 2)])
        admin.execute(sql.SQL("CREATE POLICY a_only ON {} AS RESTRICTIVE TO {} USING (tenant = 'a') "
                              "WITH CHECK (tenant = 'a')").format(table(secured), sql.Identifier(app_role)))
        assert a.heuristics.count() == 1 and b.heuristics.count() == 0  # the docs' recipe
        with pytest.raises(BackendError, match="row-level security"):
            b.heuristics.put([make("heuristic", 3)])


@pytest.mark.parametrize("size", [3, 70], ids=["pipelined", "copy"])
def test_a_batch_of_several_tenants_is_written_tenant_by_tenant(secured: str, size: int) -> None:
    with mnemostore.open(secured, tenant="a") as a, mnemostore.open(secured, tenant="b") as b:
        records = [make("outcome", i, tenant_id="a" if i % 3 else "b") for i in range(size)]
        backend_of(a).put("outcome", records)  # as record migrations and copies write
        assert a.outcomes.count() == sum(1 for r in records if r.tenant_id == "a")
        assert b.outcomes.count() == sum(1 for r in records if r.tenant_id == "b")
        backend_of(a).put("outcome", records)  # again: the upsert path
        assert a.outcomes.count() + b.outcomes.count() == size
        for tenant in ("b", "a", None, "b"):  # one backend (its pooled connection) switching tenants
            expected = sum(1 for r in records if r.tenant_id == tenant)
            assert backend_of(a).count("outcome", tenant, None) == expected, tenant


def test_records_written_as_fields_go_to_the_stores_tenant(secured: str) -> None:
    """A prepared field write (`PostgresBackend.field_writer`: the LangGraph saver's `put` and `put_writes`)
    names the store's tenant to the policies as `put` does; one keeping existing records leaves them."""
    with mnemostore.open(secured, tenant="a") as a, mnemostore.open(secured, tenant="b") as b:
        for store, agent in ((a, "mine"), (b, "theirs"), (a, "ignored")):
            records = [make("outcome", i, agent=agent, embedding=None) for i in range(3)]
            each = [{k: v for k, v in r.__dict__.items() if k not in ("tenant_id", "embedding")} for r in records]
            write = store.outcomes._field_writer({}, list(each[0]), keep_existing=agent == "ignored")
            for fields in each:
                write(fields)
        assert hasattr(backend_of(a), "field_writer")
        ids = [make("outcome", i).id for i in range(3)]
        assert sorted((r.id, r.agent) for r in a.outcomes.all()) == [(id, "mine") for id in ids]
        assert sorted((r.id, r.agent) for r in b.outcomes.all()) == [(id, "theirs") for id in ids]


def test_a_borrowed_pool_gets_its_connections_back_with_no_tenant_named(secured: str) -> None:
    with raw(secured) as probe:
        info = probe.info.dsn + f" password={PASSWORD}"
    with ConnectionPool(info, min_size=1, max_size=1, open=True) as pool:
        with (mnemostore.open(secured, tenant="a", pool=pool) as a,
              mnemostore.open(secured, tenant="b", pool=pool) as b):
            a.heuristics.put([make("heuristic", i) for i in range(2)])
            b.heuristics.put([make("heuristic", 1)])
            a.heuristics.reinforce(make("heuristic", 1).id)
            assert (a.heuristics.count(), b.heuristics.count()) == (2, 1)
            assert a.heuristics[make("heuristic", 1).id].occurrence_count == 2
            assert b.heuristics.delete(where={}) == 1 and a.heuristics.count() == 2
        with pool.connection() as conn:
            assert conn.execute("SELECT current_setting('mnemostore.tenant', true)").fetchone() in [(None,), ("",)]
            assert conn.execute(sql.SQL("SELECT count(*) FROM {}").format(table(secured))).fetchone() == (0,)


def test_a_role_under_the_policies_cannot_list_every_tenant(secured: str) -> None:
    with mnemostore.open(secured, tenant="a") as a:
        a.heuristics.put([make("heuristic", 1)])
        with pytest.raises(UnsupportedCapability, match="BYPASSRLS"):
            backend_of(a).tenants("heuristic")


def test_a_role_under_the_policies_must_open_with_row_security(secured: str) -> None:
    with pytest.raises(ConfigError, match="row_security is off"):
        mnemostore.open(secured.replace("row_security=on", "row_security=off"))


def test_tables_without_the_policies_are_refused_to_a_role_that_cannot_add_them(
        postgres_server: PostgresTestServer, admin: Admin, app_role: str) -> None:
    schema = lay_out(postgres_server, admin, app_role, policies=False)
    url = as_role(postgres_server.url(schema, row_security="on"), app_role)
    with mnemostore.open(url) as store, pytest.raises(BackendError, match=r"lacks the 'mnemostore_tenant' policy"):
        store.heuristics.count()


def policies(admin: Admin, schema: str) -> set[tuple[str, bool, bool]]:
    """(table, row security enabled, forced) of the kind tables carrying the tenant policy."""
    rows = admin.execute(
        "SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity FROM pg_policy p "
        "JOIN pg_class c ON c.oid = p.polrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND p.polname = %s", (schema, POLICY)).fetchall()
    return set(rows)


def test_the_owner_opening_with_row_security_adds_the_policies_and_still_sees_every_tenant(
        postgres_server: PostgresTestServer, admin: Admin, owner_role: str) -> None:
    url = as_role(postgres_server.url(row_security="on"), owner_role)
    with mnemostore.open(url, tenant="a") as a, mnemostore.open(url, tenant="b") as b:
        schema = backend_of(a).options.schema_name
        a.heuristics.put([make("heuristic", 1)])
        b.heuristics.put([make("heuristic", 2)])
        assert policies(admin, schema) == {(f"mnemo_{kind}", True, False) for kind in
                                           ("outcome", "heuristic", "anti_pattern", "checkpoint", "embedding")}
        assert backend_of(a).tenants("heuristic") == ["a", "b"]  # not forced: the owner bypasses them
        with raw(url) as conn:
            assert conn.execute(sql.SQL("SELECT count(*) FROM {}").format(table(url))).fetchone() == (2,)


def test_force_subjects_the_owner_too(postgres_server: PostgresTestServer, admin: Admin, owner_role: str) -> None:
    url = as_role(postgres_server.url(row_security="force"), owner_role)
    with mnemostore.open(url, tenant="a") as a, mnemostore.open(url, tenant="b") as b:
        a.heuristics.put([make("heuristic", i) for i in range(2)])
        b.heuristics.put([make("heuristic", 1)])
        assert a.heuristics.count() == 2 and b.heuristics.count() == 1
        schema = backend_of(a).options.schema_name
        assert {forced for _, _, forced in policies(admin, schema)} == {True}
        with pytest.raises(UnsupportedCapability):
            backend_of(a).tenants("heuristic")
    with raw(url) as conn:
        assert conn.execute(sql.SQL("SELECT count(*) FROM {}").format(table(url))).fetchone() == (0,)
    with pytest.raises(ConfigError, match="row_security is off"):
        mnemostore.open(url.replace("row_security=force", "row_security=off"))
    with mnemostore.open(url.replace("row_security=force", "row_security=on"), tenant="a") as again:
        assert again.heuristics.count() == 2  # `on` adds what is missing, never lifts FORCE
        assert {forced for _, _, forced in policies(admin, schema)} == {True}


def test_a_record_migration_under_forced_policies_fails_naming_the_way_out(
        postgres_server: PostgresTestServer, owner_role: str) -> None:
    from mnemostore.testing.workers import counting_migration

    url = as_role(postgres_server.url(row_security="force"), owner_role)
    with mnemostore.open(url, tenant="a") as a:
        a.heuristics.put([make("heuristic", 1)])
    with pytest.raises(MigrationError, match="BYPASSRLS"):
        mnemostore.open(url, migrations=[counting_migration("rls.count")], migrate="auto").close()


class TestTenancyUnderForcedPolicies(TenancyClauses):
    """The suite's tenancy clauses with every statement under the policies (the full suite takes
    minutes; these cover each kind's reads, writes, counters, searches and checkpoints)."""

    store_options = ConformanceSuite.store_options
    facade = ConformanceSuite.facade
    pytest_generate_tests = ConformanceSuite.pytest_generate_tests
    open_store = ConformanceSuite.open_store
    store = ConformanceSuite.store

    @pytest.fixture
    def store_url(self, postgres_server: PostgresTestServer, owner_role: str) -> str:
        return as_role(postgres_server.url(row_security="force"), owner_role)



def test_an_application_kinds_table_is_made_with_the_policy_by_a_role_that_may_create_it(
        postgres_server: PostgresTestServer, admin: Admin, owner_role: str, app_role: str, secured: str) -> None:
    from mnemostore.testing.specimen import SPECIMEN, registered

    with registered():
        with mnemostore.open(secured, tenant="a") as store, pytest.raises(
                BackendError, match=f"no table for the {SPECIMEN} kind yet and this role may not create it"):
            store.collection(SPECIMEN).add(make(SPECIMEN, 1))
        url = as_role(postgres_server.url(row_security="on"), owner_role)
        with mnemostore.open(url, tenant="a") as a, mnemostore.open(url, tenant="b") as b:
            schema = backend_of(a).options.schema_name
            assert a.collection(SPECIMEN).count() == 0 and (f"mnemo_{SPECIMEN}", True, False) not in policies(
                admin, schema)  # a read makes nothing
            a.collection(SPECIMEN).put([make(SPECIMEN, 1), make(SPECIMEN, 2)])
            b.collection(SPECIMEN).put([make(SPECIMEN, 1)])
            assert (f"mnemo_{SPECIMEN}", True, False) in policies(admin, schema)
            grant = ("GRANT USAGE ON SCHEMA {0} TO {1}; "
                     "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {0} TO {1}")
            admin.execute(sql.SQL(grant).format(sql.Identifier(schema), sql.Identifier(app_role)))
        with raw(as_role(url, app_role)) as conn:
            conn.execute("SELECT set_config('mnemostore.tenant', 'tenant:b', false)")
            assert conn.execute(sql.SQL("SELECT count(*) FROM {}").format(table(url, SPECIMEN))).fetchone() == (1,)


def test_async_groups_under_forced_policies_keep_each_tenant_to_its_rows(
        postgres_server: PostgresTestServer, owner_role: str) -> None:
    """Two AsyncStores (tenants a and b) on one forced-policy store save, put and search concurrently
    through the async side's groups (core/async_groups.py): a group is one tenant's, named to the
    policies, so each tenant's chains, records and hits are its own."""
    import asyncio

    import numpy as np

    url = as_role(postgres_server.url(row_security="force"), owner_role)
    with mnemostore.open(url, tenant="a", dimension=DIMENSION), mnemostore.open(url, tenant="b"):
        pass
    found = vectors(40, DIMENSION, seed=3)

    async def work(tenant: str) -> None:
        async with await mnemostore.open_async(url, tenant=tenant) as store:
            records = [make("heuristic", i, tenant_id=tenant, embedding=found[i]) for i in range(40)]
            await asyncio.gather(*(store.heuristics.put([r]) for r in records))
            saves = await asyncio.gather(*(store.checkpoints.save(f"run-{i % 5}", {"t": tenant, "i": i})
                                           for i in range(30)))
            hits = await asyncio.gather(*(store.search("heuristic", np.asarray(found[i]), k=3) for i in range(40)))
            assert [h[0].record.id for h in hits] == [r.id for r in records]
            assert all(hit.record.tenant_id == tenant for h in hits for hit in h)
            for run in range(5):
                history = await store.checkpoints.history(f"run-{run}")
                assert sorted(c.id for c in history) == sorted(c.id for c in saves if c.run_id == f"run-{run}")
                assert [c.sequence for c in history] == list(range(6))
                assert {c.state["t"] for c in history} == {tenant}

    async def both() -> None:
        await asyncio.gather(work("a"), work("b"))

    asyncio.run(both())
