"""The postgres backend's operations as plans (steps.py): statements, parameters and decoding,
written once for the sync backend and its async side, which only execute the steps.

Each public function is one protocol call: it returns a generator to hand to a driver
(`PostgresBackend._run`, `AsyncPostgresSide._run`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from math import isnan
from typing import TYPE_CHECKING, Any

import orjson

from ...core.base64text import from_text
from ...core.errors import UnsupportedCapability, ValidationError
from ...core.filters import Expr
from ...core.protocol import Hit, OrderKey, link_parent
from ...core.records import KINDS, Checkpoint, Record
from ...core.shapes import QueryShape
from ...core.vectors import Vector
from . import rows as decode
from .layout import JsonbBytes, KindLayout, decode_doc, tenant_key
from .steps import Connect, Copy, Pipelined, Plan, Prepare, Run, RunMany

if TYPE_CHECKING:
    from .backend import PostgresBackend

COPY_THRESHOLD = 64
"""Batches at least this large go through binary COPY; smaller ones through executemany."""
SMALL_BATCH = 8
"""Batches of up to this many records (of distinct ids) are one multi-row statement: one round trip,
no transaction around it."""


# preparing and connecting ------------------------------------------------------------
def readable(backend: PostgresBackend, kind: str) -> Plan[KindLayout | None]:
    """The kind's layout, or None if it is an application's kind with no table yet (looked up
    once per store: `PostgresBackend._readable`)."""
    kind_layout = backend._layout(kind)
    if kind in KINDS or kind_layout.table in backend._kind_tables:
        return kind_layout
    found: KindLayout | None = yield Prepare(partial(backend._readable, kind))
    return found


def writable(backend: PostgresBackend, kind: str) -> Plan[KindLayout]:
    """The kind's layout, its table created first if this is an application's kind's first write."""
    kind_layout = backend._layout(kind)
    if kind in KINDS or kind_layout.table in backend._kind_tables:
        return kind_layout
    found: KindLayout = yield Prepare(partial(backend._writable, kind))
    return found


def vectors_typed(backend: PostgresBackend) -> Plan[None]:
    """The embedding columns typed for the store's dimension (`PostgresBackend._ensure_vectors`)."""
    dimension = backend.params.dimension
    if dimension is not None and backend._vectors_ready != dimension:
        yield Prepare(backend._ensure_vectors)


def connect(backend: PostgresBackend, action: str, tenant: str | None = None, *, transaction: bool = False,
            scoped: bool = True) -> Plan[None]:
    """A connection for the statements that follow, working for `tenant` on kind tables if
    `scoped` (named to the row-level security policies when row_security is on)."""
    if not scoped or backend.options.row_security == "off":
        yield Connect(action, transaction)
        return
    from .row_security import SET_TENANT, setting_value

    yield from row_security_checked(backend)
    if backend._own_pool:
        # A store works for one tenant: its value stays set on the session (see `_name_tenant`).
        yield Connect(action, transaction, session_tenant=setting_value(tenant))
    else:
        # A borrowed connection goes back to its owner's pool: name the tenant for this transaction only.
        yield Connect(action, transaction=True)
        yield Run(SET_TENANT, (setting_value(tenant),))


def row_security_checked(backend: PostgresBackend) -> Plan[None]:
    """Under row_security, the policies put on the tables once per store, and whether they apply to
    this role looked up (`PostgresBackend._ensure_row_security`)."""
    if backend.options.row_security != "off" and backend._row_security_active is None:
        yield Prepare(backend._ensure_row_security)


# meta ------------------------------------------------------------------------------
def read_meta(backend: PostgresBackend, key: str) -> Plan[Any]:
    yield from connect(backend, "reading store metadata", scoped=False)
    row = yield Run(backend.statements.read_meta(), (key,), "one")
    return None if row is None else orjson.loads(row[0])


def write_meta(backend: PostgresBackend, key: str, value: Any) -> Plan[None]:
    yield from connect(backend, "writing store metadata", scoped=False)
    yield Run(backend.statements.write_meta(), meta_row(key, value))


def meta_row(key: str, value: Any) -> tuple[str, str]:
    """The parameters of `Statements.write_meta`: the key and the value's JSON."""
    return key, orjson.dumps(value).decode()


# reading ---------------------------------------------------------------------------
def query(backend: PostgresBackend, kind: str, tenant: str | None, where: Expr | None, order: Sequence[OrderKey],
          limit: int | None, vectors: bool = True) -> Plan[list[Record]]:
    kind_layout = yield from readable(backend, kind)
    if kind_layout is None:
        return []
    condition, params = backend.statements.condition(kind_layout, where)
    return (yield from _ordered(backend, kind_layout, tenant, condition, params, order, limit, vectors))


def query_shape(backend: PostgresBackend, kind: str, tenant: str | None, shape: QueryShape, values: Mapping[str, Any],
                limit: int | None, vectors: bool = True) -> Plan[list[Record]]:
    """`query` of a shape: its condition compiled once per store (`Statements.shape_condition`: the
    params are `Slot`s), the values bound; a None value takes `query`."""
    from .sql_filters import bound_params  # imports psycopg: not before a store is opened

    if None in values.values():
        return (yield from query(backend, kind, tenant, shape.where_with(values), shape.order, limit, vectors))
    kind_layout = yield from readable(backend, kind)
    if kind_layout is None:
        return []
    condition, params = backend.statements.shape_condition(kind_layout, shape)
    return (yield from _ordered(backend, kind_layout, tenant, condition, bound_params(params, values), shape.order,
                                limit, vectors))


def query_shapes_documents(backend: PostgresBackend, tenant: str | None,
                           reads: Sequence[tuple[str, QueryShape, Mapping[str, Any], int | None]],
                           ) -> Plan[list[list[dict[str, Any]]] | None]:
    """`query_shape` of several (kind, shape, values, limit) reads without vectors, their records as stored fields
    (`KindLayout.document`), the statements pipelined: one round trip for a reader that needs two reads at once
    (the LangGraph saver's checkpoint and its writes). None where a value is None (the caller takes `query_shape`)."""
    from .sql_filters import bound_params  # imports psycopg: not before a store is opened

    if any(None in values.values() for _, _, values, _ in reads):
        return None
    found: list[list[dict[str, Any]]] = [[] for _ in reads]
    runs: list[Run] = []
    places: list[tuple[int, KindLayout]] = []
    statements = backend.statements
    for place, (kind, shape, values, limit) in enumerate(reads):
        kind_layout = yield from readable(backend, kind)
        if kind_layout is None:
            continue  # an application's kind with no table yet: no records
        condition, params = statements.shape_condition(kind_layout, shape)
        runs.append(Run(statements.ordered(kind_layout, condition, False, shape.order, limit is not None),
                        [tenant_key(tenant), *bound_params(params, values), *([] if limit is None else [limit])],
                        "all", binary=True))
        places.append((place, kind_layout))
    if not runs:
        return found
    yield from connect(backend, f"reading {', '.join(kind_layout.kind for _, kind_layout in places)} records", tenant)
    rows_of: list[Any] = [(yield runs[0])] if len(runs) == 1 else (yield Pipelined(tuple(runs), transaction=False))
    for (place, kind_layout), rows in zip(places, rows_of, strict=True):
        document = kind_layout.document
        found[place] = [document(row) for row in rows]
    return found


def _ordered(backend: PostgresBackend, kind_layout: KindLayout, tenant: str | None, condition: bytes,
             params: list[Any], order: Sequence[OrderKey], limit: int | None, vectors: bool) -> Plan[list[Record]]:
    statement = backend.statements.ordered(kind_layout, condition, vectors, order, limit is not None)
    return (yield from _records(backend, kind_layout, tenant, statement,
                                [tenant_key(tenant), *params, *([] if limit is None else [limit])], vectors))


def get(backend: PostgresBackend, kind: str, tenant: str | None, ids: Sequence[str],
        vectors: bool = True) -> Plan[list[Record]]:
    kind_layout = yield from readable(backend, kind)
    if kind_layout is None:
        return []
    statement = backend.statements.by_ids(kind_layout, vectors)
    return (yield from _records(backend, kind_layout, tenant, statement, [tenant_key(tenant), list(ids)], vectors))


def _records(backend: PostgresBackend, kind_layout: KindLayout, tenant: str | None, statement: bytes,
             params: list[Any], vectors: bool) -> Plan[list[Record]]:
    yield from connect(backend, f"reading {kind_layout.kind} records", tenant)
    found = yield Run(statement, params, "all", binary=True)
    return [decode.record(kind_layout, row, vectors) for row in found]


def query_values(backend: PostgresBackend, kind: str, tenant: str | None, where: Expr | None,
                 order: Sequence[OrderKey], limit: int | None, fields: Sequence[str]) -> Plan[list[tuple[Any, ...]]]:
    """Only the fields' columns (a checkpoint's id and sequence, not its state); fields kept in the
    document are read through whole records."""
    kind_layout = yield from readable(backend, kind)
    if kind_layout is None:
        return []
    if any(name != "id" and name not in kind_layout.types for name in fields):
        records = yield from query(backend, kind, tenant, where, order, limit, False)
        return [tuple(getattr(found, name) for name in fields) for found in records]
    condition, params = backend.statements.condition(kind_layout, where)
    statement = backend.statements.values(kind_layout, condition, fields, order, limit is not None)
    yield from connect(backend, f"reading {kind} records", tenant)
    found = yield Run(statement, [tenant_key(tenant), *params, *([] if limit is None else [limit])], "all",
                      binary=True)
    return [decode.field_values(kind_layout, fields, row) for row in found]


def count(backend: PostgresBackend, kind: str, tenant: str | None, where: Expr | None) -> Plan[int]:
    return (yield from _count_or_delete(backend, "SELECT count(*) FROM {} WHERE tenant = %s AND {}", kind, tenant,
                                        where))


def delete(backend: PostgresBackend, kind: str, tenant: str | None, where: Expr | None) -> Plan[int]:
    return (yield from _count_or_delete(backend, "DELETE FROM {} WHERE tenant = %s AND {}", kind, tenant, where))


def _count_or_delete(backend: PostgresBackend, template: str, kind: str, tenant: str | None,
                     where: Expr | None) -> Plan[int]:
    kind_layout = yield from readable(backend, kind)
    if kind_layout is None:
        return 0
    condition, params = backend.statements.condition(kind_layout, where)
    statement = backend.statements.count_or_delete(template, kind_layout, condition)
    reading = template.startswith("SELECT")
    yield from connect(backend, f"{template.split()[0].lower()} of {kind} records", tenant)
    found = yield Run(statement, [tenant_key(tenant), *params], "one" if reading else "rowcount")
    if reading:
        return int(found[0]) if found else 0
    return int(found)


def tenants(backend: PostgresBackend, kind: str) -> Plan[list[str | None]]:
    kind_layout = yield from readable(backend, kind)
    if kind_layout is None:
        return []
    yield from row_security_checked(backend)
    if backend._row_security_active:
        raise UnsupportedCapability(
            f"row_security={backend.options.row_security}: the tenant policies apply to this role, so it "
            "sees one tenant at a time and cannot list them all; run migrations and copies as the "
            "tables' owner (unless forced) or a role with BYPASSRLS")
    yield from connect(backend, f"listing the tenants of {kind} records", scoped=False)
    found = yield Run(backend.statements.tenants(kind_layout), None, "all")
    return [tenant or None for (tenant,) in found]


# vector search ---------------------------------------------------------------------
def search(backend: PostgresBackend, kind: str, tenant: str | None, vector: Vector, k: int, where: Expr | None,
           vectors: bool = True) -> Plan[list[Hit]]:
    kind_layout = yield from readable(backend, kind)
    if kind_layout is None:
        return []
    yield from vectors_typed(backend)
    yield from connect(backend, f"searching {kind} records", tenant)
    exact = backend.options.index == "exact"
    found = yield from nearest(backend, kind_layout, tenant, vector, k, where, exact, vectors)
    return (yield from _hits(backend, kind_layout, tenant, vector, k, where, vectors, found, exact))


def _hits(backend: PostgresBackend, kind_layout: KindLayout, tenant: str | None, vector: Vector, k: int,
          where: Expr | None, vectors: bool, found: list[tuple[Any, ...]], exact: bool) -> Plan[list[Hit]]:
    """The hits of the rows `nearest` found, after the exact scan if the index's rows may be short of them."""
    if not exact and (len(found) < k or (len(found) > k and found[k][-1] == found[k - 1][-1])
                      or any(map(isnan, map(decode.distance, found)))):
        # The index scan gave up early (a very selective filter), a tie straddles the k-th
        # place, or a distance is NaN (a zero vector, the query or a stored one, has no
        # direction; the exact scan scores it as cosine similarity 0): the exact scan returns
        # k whenever k match, ties broken by id.
        found = yield from nearest(backend, kind_layout, tenant, vector, k, where, True, vectors)
    return decode.hits(kind_layout, found[:k], vector, k, backend.params.metric, vectors)


def searches_grouped(backend: PostgresBackend, k: int) -> bool:
    """Whether searches for `k` can go in groups (`search_many`): the index search with the
    session's preset settings, on the store's own pool."""
    options = backend.options
    return backend._own_pool and options.index != "exact" and k <= options.hnsw_ef_search


def search_many(backend: PostgresBackend, kind: str, tenant: str | None, queries: Sequence[Vector], k: int,
                where: Expr | None, vectors: bool = True) -> Plan[list[list[Hit]]]:
    """`search` of each query vector in one statement (`searches_grouped` must hold): each query's
    hits are those `search` returns for it alone. The index walks go in one statement; a group
    of `index_walks.GROUP` or more whose search alone the planner scans is one scan (index_walks.py)."""
    from .index_walks import GROUP

    kind_layout = yield from readable(backend, kind)
    if kind_layout is None:
        return [[] for _ in queries]
    yield from vectors_typed(backend)
    yield from connect(backend, f"searching {kind} records", tenant)
    statements, estimates, walks = backend.statements, backend.row_estimates, backend.index_walks
    metric, n = backend.params.metric, len(queries)
    hinted = where is None or estimates.scope_index_pays(kind_layout.table)
    condition, condition_params = statements.condition(kind_layout, where, hinted)
    params = [*queries, tenant_key(tenant), *condition_params]

    def grouped(scan: bool) -> Run:
        render = statements.scanned_many if scan else statements.nearest_many
        return Run(render(kind_layout, metric, vectors, condition, k + 1, n), params, "all", binary=True, raw=True)

    shape = (kind_layout.table, condition, k, vectors)
    scanning = n >= GROUP and walks.scans(shape)
    if scanning or (n >= GROUP and walks.due(shape)):  # with the EXPLAIN of the first search alone
        explain = Run(statements.nearest(kind_layout, metric, False, vectors, True, condition, k + 1),
                      [queries[0], tenant_key(tenant), *condition_params], "all")
        rows, plan = yield from _counted(backend, kind_layout, where, grouped(scanning), explain)
        if walks.record(shape, plan) and scanning:  # a search alone walks the index now: so does the group
            rows, = yield from _counted(backend, kind_layout, where, grouped(False))
    else:
        rows, = yield from _counted(backend, kind_layout, where, grouped(False))
    found: list[list[tuple[Any, ...]]] = [[] for _ in queries]
    for row in rows:
        if row[-1] is not None:  # records without an embedding sort last: dropped, as `nearest` does
            found[row[0] - 1].append(row[1:])
    hits = []
    for query, rows_of in zip(queries, found, strict=True):
        hits.append((yield from _hits(backend, kind_layout, tenant, query, k, where, vectors, rows_of, False)))
    return hits


def _counted(backend: PostgresBackend, kind_layout: KindLayout, where: Expr | None,
             *runs: Run) -> Plan[list[Any]]:
    """The results of `runs` (one round trip); with a filter, the table's row estimate read in it too when due."""
    estimates = backend.row_estimates
    counting = where is not None and estimates.stale(kind_layout.table)
    if counting:
        runs = (*runs, Run(backend.statements.row_estimate(kind_layout), None, "one"))
    if len(runs) == 1:
        return [(yield runs[0])]
    found: list[Any] = yield Pipelined(runs, transaction=False)
    if counting:
        estimate = found.pop()
        estimates.record(kind_layout.table, None if estimate is None else estimate[0])
    return found


def explain_search(backend: PostgresBackend, kind: str, tenant: str | None, vector: Vector, k: int,
                   where: Expr | None) -> Plan[str]:
    """The server's plan for the index search `search` runs first (EXPLAIN; a diagnostic)."""
    yield from vectors_typed(backend)
    yield from connect(backend, f"searching {kind} records", tenant)
    plan = yield from nearest(backend, backend._layout(kind), tenant, vector, k, where,
                              backend.options.index == "exact", True, explain=True)
    return "\n".join(str(row[0]) for row in plan)


def nearest(backend: PostgresBackend, kind_layout: KindLayout, tenant: str | None, vector: Vector, k: int,
            where: Expr | None, exact: bool, vectors: bool, explain: bool = False) -> Plan[list[tuple[Any, ...]]]:
    """Rows of the nearest records (data columns, the embedding if `vectors`, the server's
    distance); one more than k from the index. Search settings, and the table's row count when
    it is due (row_estimates.py), share the round trip."""
    # While the table is small, a filter on agent or project_id also compares the prefix its
    # scope index holds (sql_filters), so the planner can read the matching rows by that index
    # and sort them (exact) instead of walking the HNSW graph and filtering as it goes. The
    # redundant clause lowers its row estimate, which offsets pgvector's estimate of a filtered
    # walk (too cheap: it leaves out the iterative scan): measured on 384-dim vectors, a 10%
    # agent filter over 2,000 / 10,000 rows read by index 0.1 / 0.4-1.0 ms against 0.2 (a scan)
    # / 2.3-3.7 ms (the walk). Over 100,000 rows the index read sorts 10,000 (19 ms of server
    # CPU against 2.7 for the walk), so large tables go without the hints.
    statements, options, estimates = backend.statements, backend.options, backend.row_estimates
    hinted = where is None or estimates.scope_index_pays(kind_layout.table)
    condition, condition_params = statements.condition(kind_layout, where, hinted)
    limit = k if exact else k + 1
    statement = statements.nearest(kind_layout, backend.params.metric, exact, vectors, explain, condition, limit)
    steps = [Run(statement, [vector, tenant_key(tenant), *condition_params], "all", binary=True)]
    if exact:
        steps.insert(0, Run("SELECT set_config('enable_indexscan', 'off', true)"))
    else:
        ef_search = min(1000, max(options.hnsw_ef_search, k))
        if not backend._own_pool or ef_search != options.hnsw_ef_search:  # else preset: PostgresBackend._configure
            steps.insert(0, Run(
                "SELECT set_config('hnsw.ef_search', %s, true), set_config('hnsw.iterative_scan', %s, true)",
                (str(ef_search), options.iterative_scan)))
    counting = where is not None and not exact and estimates.stale(kind_layout.table)
    if counting:
        steps.append(Run(statements.row_estimate(kind_layout), None, "one"))
    if len(steps) == 1:
        rows: list[tuple[Any, ...]] = yield steps[0]
    else:
        found = yield Pipelined(tuple(steps), transaction=len(steps) - counting > 1)
        rows = found[-1 - counting]
        if counting:
            estimates.record(kind_layout.table, None if found[-1] is None else found[-1][0])
    if not explain and rows and rows[-1][-1] is None:  # records without an embedding sort last
        rows = [row for row in rows if row[-1] is not None]
    return rows


# writing ---------------------------------------------------------------------------
def insert(backend: PostgresBackend, kind: str, records: Sequence[Record], keep_existing: bool,
           keep_created: bool = False) -> Plan[None]:
    """Upsert `records`, or with `keep_existing` insert only those not stored (ON CONFLICT DO
    NOTHING), or with `keep_created` upsert leaving a stored row's `created_at`: all or none of
    them. Under row-level security a batch is written tenant by tenant, each named to the policies first."""
    if not records:
        return
    kind_layout = yield from writable(backend, kind)
    yield from vectors_typed(backend)
    encoded = [kind_layout.encode(record) for record in records]
    batches: dict[str | None, list[tuple[Any, ...]]] = (
        decode.by_tenant(encoded) if backend.options.row_security != "off" else {None: encoded})
    one_tenant = len(batches) == 1
    copying = len(encoded) >= COPY_THRESHOLD and not keep_existing
    yield from row_security_checked(backend)
    yield from connect(backend, f"writing {len(encoded)} {kind} records", next(iter(batches)),
                       transaction=copying, scoped=one_tenant)
    naming = _tenant_naming(backend, batches, one_tenant)
    statements = backend.statements
    if copying:
        for tenant, batch in batches.items():
            if naming:
                yield naming[tenant]
            yield from _copy_upsert(backend, kind_layout, batch, direct=not backend._row_security_active,
                                    keep_created=keep_created)
        return
    if not naming and len(encoded) <= SMALL_BATCH and len({row[:2] for row in encoded}) == len(encoded):
        # one statement (of distinct ids: an upsert cannot touch a row twice): atomic without BEGIN and COMMIT
        if len(encoded) == 1:
            yield Run(statements.upsert(kind_layout, keep_existing, keep_created), encoded[0])
        else:
            yield Run(statements.upsert(kind_layout, keep_existing, keep_created, len(encoded)),
                      [value for row in encoded for value in row], raw=True)
        return
    statement = statements.upsert(kind_layout, keep_existing, keep_created)
    steps: list[Run | RunMany] = []  # BEGIN, the upserts and COMMIT in one round trip
    for tenant, batch in batches.items():
        if naming:
            steps.append(naming[tenant])
        steps.append(RunMany(statement, batch))
    yield Pipelined(tuple(steps))


def insert_fields(backend: PostgresBackend, kind: str, fields: dict[str, Any], keep_existing: bool) -> Plan[None]:
    """`insert` of one record given as its fields (every one of the model's), unvalidated: one upsert, no
    record made (`PostgresBackend.field_writer`)."""
    kind_layout = yield from writable(backend, kind)
    yield from vectors_typed(backend)
    row = kind_layout.encode_fields(fields)
    yield from connect(backend, f"writing 1 {kind} records", fields["tenant_id"])
    yield Run(backend.statements.upsert(kind_layout, keep_existing, False), row)


def _tenant_naming(backend: PostgresBackend, batches: Mapping[str | None, Any],
                   one_tenant: bool) -> dict[str | None, Run]:
    """The statements naming each tenant of a batch of several inside the write's transaction
    (none when row_security is off, or for one tenant: `connect` names it)."""
    if one_tenant or backend.options.row_security == "off":
        return {}
    from .row_security import SET_TENANT, setting_value

    return {tenant: Run(SET_TENANT, (setting_value(tenant),)) for tenant in batches}


def _copy_upsert(backend: PostgresBackend, kind_layout: KindLayout, batch: list[tuple[Any, ...]],
                 direct: bool, keep_created: bool = False) -> Plan[None]:
    """Binary COPY straight into the table (if `direct`: the server refuses COPY FROM into a
    table whose policies apply); if an id exists already, or not `direct`, COPY into a
    staging table and upsert from it instead (both in the plan's transaction)."""
    import psycopg

    statements = backend.statements
    types = statements.copy_types(kind_layout)
    if direct:
        try:
            yield Copy(statements.copy_into(kind_layout, staged=False), types, batch, savepoint=True)
            return
        except psycopg.errors.UniqueViolation:
            pass
    create, upsert, drop = statements.staging(kind_layout, keep_created)
    yield Run(create)
    yield Copy(statements.copy_into(kind_layout, staged=True), types, batch)
    yield Run(upsert)
    yield Run(drop)


def append_checkpoint(backend: PostgresBackend, record: Checkpoint) -> Plan[Checkpoint]:
    """The parent lookup and the write in one statement: an INSERT … SELECT whose parent comes
    from the layout's `checkpoint_latest` function (migrations.py), which takes an advisory
    lock on the record's (tenant, run, branch) for the transaction and then reads the latest
    checkpoint with a fresh snapshot: racing saves to one run and branch queue up, and each
    links to the one committed before it. The function's query is what core's `latest` and
    `order` select (tested against `LATEST_CHECKPOINT_ORDER`), so they are not compiled here."""
    import psycopg

    yield from vectors_typed(backend)
    kind_layout = backend._layout("checkpoint")
    tenant = tenant_key(record.tenant_id)
    lock = backend.names.append_lock_key(tenant, record.run_id, record.branch_id)
    params = [tenant, record.run_id, record.branch_id, lock, *kind_layout.encode(record)]
    yield from connect(backend, f"writing checkpoint {record.id!r}", record.tenant_id)
    try:
        parent = yield Run(backend.statements.append(kind_layout), params, "one", binary=True)
    except psycopg.errors.NumericValueOutOfRange:
        raise ValidationError.one(
            "sequence", f"would exceed a 64-bit integer (the latest of run {record.run_id!r} is at the "
                        "limit)") from None
    assert parent is not None
    return link_parent(record, None if parent[0] is None else (parent[0], parent[1]))


def groupable_append(record: Checkpoint) -> bool:
    """Whether `append_checkpoints` can write `record` in a group (a root, as the facade makes them)."""
    return not record.parent_ids and record.sequence == 0


def append_checkpoints(backend: PostgresBackend, records: Sequence[Checkpoint]) -> Plan[list[Checkpoint]]:
    """`append_checkpoint` of each record (roots of one tenant, on distinct runs or branches, with
    distinct ids) in one statement: one commit for them all. Each row links to its own run's latest
    (`checkpoint_latest`, its lock taken in key order: two groups never wait on each other in a
    circle). An error fails them all; the caller retries them one by one (core/async_groups.py)."""
    yield from vectors_typed(backend)
    kind_layout = backend._layout("checkpoint")
    tenant = tenant_key(records[0].tenant_id)
    lock_key = backend.names.append_lock_key
    params: list[Any] = []
    for lock, record in sorted(((lock_key(tenant, r.run_id, r.branch_id), r) for r in records),
                               key=lambda pair: pair[0]):
        params += [tenant, record.run_id, record.branch_id, lock, *kind_layout.encode(record)]
    yield from connect(backend, f"writing {len(records)} checkpoints", records[0].tenant_id)
    rows = yield Run(backend.statements.append_many(kind_layout, len(records)), params, "all", binary=True, raw=True)
    linked = {id: (parents[0], sequence - 1) if parents else None for id, parents, sequence in rows}
    return [link_parent(record, linked[record.id]) for record in records]


def update(backend: PostgresBackend, kind: str, tenant: str | None, id: str, set: Mapping[str, Any],
           inc: Mapping[str, int | float]) -> Plan[Record | None]:
    """One `UPDATE … RETURNING`: counters are incremented by the server, so racing updates all
    count. A change of a field kept in the document reads the row `FOR UPDATE` first, in the
    same transaction."""
    import psycopg

    kind_layout = yield from readable(backend, kind)
    if kind_layout is None:
        return None
    if "embedding" in set and set["embedding"] is not None:
        yield from vectors_typed(backend)
    assignments: list[tuple[str, bool]] = []
    params: list[Any] = []
    doc_changes: dict[str, Any] = {}
    for name, value in set.items():
        if name in kind_layout.types:
            for column, stored in kind_layout.field_values(name, value):
                assignments.append((column, False))
                params.append(stored)
        elif name == "embedding" or name in kind_layout.lists:
            assignments.append((name, False))
            params.append(value)
        elif name in kind_layout.binary:
            assignments.append((name, False))
            params.append(kind_layout.encode_binary(name, value))
        else:
            doc_changes[name] = value
    for name, amount in inc.items():
        assignments.append((name, True))
        params.append(amount)
    key = (tenant_key(tenant), id)
    yield from connect(backend, f"updating {kind} {id!r}", tenant, transaction=bool(doc_changes))
    try:
        if doc_changes:
            row = yield Run(backend.statements.lock_doc(kind_layout), key, "one")
            if row is None:
                return None
            _rewrite_doc(kind_layout, set, doc_changes, row, assignments, params)
        found = yield Run(backend.statements.update(kind_layout, assignments), [*params, *key], "one",
                          binary=True)
    except psycopg.errors.NumericValueOutOfRange:
        raise ValidationError.one("inc", f"would take a counter of {kind} {id!r} past 2**63 - 1") from None
    return None if found is None else decode.record(kind_layout, found, True)


def _rewrite_doc(kind_layout: KindLayout, set: Mapping[str, Any], doc_changes: dict[str, Any],
                 row: tuple[Any, ...], assignments: list[tuple[str, bool]], params: list[Any]) -> None:
    """Add the assignments of a document change to those of an update, from the locked row
    (its document, then its list columns), moving values older layouts kept in the document."""
    data = decode_doc(row[0])
    data.update(doc_changes)
    for name, stored in zip(kind_layout.lists, row[1:], strict=True):
        if stored is None and name not in set:  # a row from before layout 3: move it
            assignments.append((name, False))
            params.append(data.get(name, []))
    for name in kind_layout.binary:
        held = data.get(name)
        if type(held) is str and name not in set:  # base64 from before layout 5: move it
            assignments.append((name, False))
            params.append(kind_layout.encode_binary(name, from_text(held)))
    assignments.append(("doc", False))
    params.append(kind_layout.encode_doc(data))
    if "metadata" in doc_changes:
        assignments.append(("metadata", False))
        params.append(JsonbBytes(orjson.dumps(doc_changes["metadata"])))
