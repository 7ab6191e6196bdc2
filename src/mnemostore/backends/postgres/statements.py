"""The postgres backend's SQL: every statement its plans run, rendered once per store and shape.

Composing psycopg.sql objects costs more than a small query's round trip, so a statement is
rendered to bytes once per store and key (kind, statement, filter shape) and kept (see
`STATEMENT_CACHE_SIZE`). No I/O here: plans.py combines these with parameters and rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ...core.filters import Expr, expression_key
from ...core.protocol import OrderKey
from .layout import KindLayout, offset_column

if TYPE_CHECKING:
    from psycopg import sql

    from ...core.shapes import QueryShape
    from .schema import Names

STATEMENT_CACHE_SIZE = 512
"""Rendered statements kept per store (one per kind, statement and filter shape); past that
the cache starts again (a program cycling through more filter shapes only renders again)."""
OPERATORS = {"cosine": "<=>", "dot": "<#>", "l2": "<->"}
TYPE_OIDS = {str: 25, int: 20, float: 701, bool: 16}
TEXT_ARRAY_OID = 1009
_TYPE_NAMES = {25: "text", 20: "bigint", 701: "double precision", 16: "boolean", 17: "bytea", 3802: "jsonb",
               TEXT_ARRAY_OID: "text[]"}


class Statements:
    """A store's statements (its schema's names, pgvector's type), each rendered once per key."""

    def __init__(self, names: Names, vector_oid: int) -> None:
        self.names = names
        self.vector_oid = vector_oid
        self._cache: dict[tuple[Any, ...], Any] = {}

    def clear(self) -> None:
        """Forget every rendered statement (a kind's table gained columns)."""
        self._cache.clear()

    def cached(self, key: tuple[Any, ...], build: Callable[[], Any]) -> Any:
        """`build()` once per store and key (`STATEMENT_CACHE_SIZE` keys, then it starts again)."""
        found = self._cache.get(key)
        if found is None:
            if len(self._cache) >= STATEMENT_CACHE_SIZE:
                self._cache.clear()
            found = self._cache[key] = build()
        return found

    def rendered(self, key: tuple[Any, ...], build: Callable[[], sql.Composable]) -> bytes:
        """`build()`'s statement as bytes, rendered once per key."""
        found: bytes = self.cached(key, lambda: build().as_bytes(None))
        return found

    def condition(self, kind_layout: KindLayout, where: Expr | None,
                  scope_hints: bool = True) -> tuple[bytes, list[Any]]:
        """`where` as SQL on the kind's table and its parameters, compiled once per store and
        expression, values included (an agent searches its own scope call after call; compiling
        took a third of a filtered search's client time); with `scope_hints`, equalities on scope
        fields also compare the prefix their index holds (sql_filters)."""
        if where is None:
            return b"TRUE", []
        from .sql_filters import FilterCompiler

        def build() -> tuple[bytes, list[Any]]:
            compiler = FilterCompiler(kind_layout, scope_hints)
            return compiler.where(where).as_bytes(None), compiler.params

        key = ("where", kind_layout.kind, expression_key(where), scope_hints)
        found: tuple[bytes, list[Any]] = self.cached(key, build)
        return found

    def shape_condition(self, kind_layout: KindLayout, shape: QueryShape) -> tuple[bytes, list[Any]]:
        """`condition` of a shape's filter (its params as `sql_filters.Slot`s), kept by the shape itself:
        no key is made of its filter on each call."""
        found: tuple[bytes, list[Any]] = self.cached(
            ("shape", kind_layout.kind, shape), lambda: self.condition(kind_layout, shape.where))
        return found

    def row_estimate(self, kind_layout: KindLayout) -> bytes:
        """The planner's row count of the kind's table (`pg_class.reltuples`; NULL if it does not exist)."""
        from psycopg import sql

        return self.rendered(("row_estimate", kind_layout.kind), lambda: sql.SQL(
            "SELECT reltuples::float8 FROM pg_class WHERE oid = to_regclass({})").format(
            sql.Literal(self.table(kind_layout).as_string(None))))

    def table(self, kind_layout: KindLayout) -> sql.Identifier:
        return self.names.table(kind_layout.table)

    def select_list(self, kind_layout: KindLayout) -> sql.Composable:
        from psycopg import sql

        return sql.SQL(", ").join(sql.Identifier(c) for c in kind_layout.data_columns)

    # meta ------------------------------------------------------------------------------
    def read_meta(self) -> bytes:
        from psycopg import sql

        return self.rendered(("read_meta",), lambda: sql.SQL("SELECT value::text FROM {} WHERE key = %s").format(
            self.names.meta))

    def write_meta(self) -> bytes:
        from psycopg import sql

        return self.rendered(("write_meta",), lambda: sql.SQL(
            "INSERT INTO {} (key, value) VALUES (%s, %s::jsonb) "
            "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value").format(self.names.meta))

    # reading ---------------------------------------------------------------------------
    def select(self, kind_layout: KindLayout, condition: bytes, vectors: bool, tail_key: tuple[Any, ...],
               tail: Callable[[KindLayout], sql.Composable]) -> bytes:
        """Whole records matching `condition`, the statement ending in `tail` (rendered once per `tail_key`)."""
        from psycopg import sql

        def build() -> sql.Composable:
            columns = self.select_list(kind_layout)
            if vectors:
                columns = sql.SQL("{}, embedding").format(columns)
            return sql.SQL("SELECT {} FROM {} WHERE tenant = %s AND {} {}").format(
                columns, self.table(kind_layout), sql.SQL(condition.decode()), tail(kind_layout))

        return self.rendered(("select", kind_layout.kind, vectors, condition, *tail_key), build)

    def ordered(self, kind_layout: KindLayout, condition: bytes, vectors: bool, order: Sequence[OrderKey],
                limited: bool) -> bytes:
        """`select` in `order`, with a `LIMIT %s` if `limited`."""
        from psycopg import sql

        from .sql_filters import order_by

        def tail(kind_layout: KindLayout) -> sql.Composable:
            ordering = sql.SQL("ORDER BY {}").format(order_by(kind_layout, order))
            return sql.SQL("{} LIMIT %s").format(ordering) if limited else ordering

        key = ("order", tuple((o.field, o.descending) for o in order), not limited)
        return self.select(kind_layout, condition, vectors, key, tail)

    def by_ids(self, kind_layout: KindLayout, vectors: bool) -> bytes:
        """`select` of the ids in a `text[]` parameter."""
        from psycopg import sql

        return self.select(kind_layout, b"TRUE", vectors, ("ids",), lambda _: sql.SQL("AND id = ANY(%s::text[])"))

    def values(self, kind_layout: KindLayout, condition: bytes, fields: Sequence[str], order: Sequence[OrderKey],
               limited: bool) -> bytes:
        """Only the fields' columns (each a column of the table: not a document field)."""
        from psycopg import sql

        from .sql_filters import order_by

        def build() -> sql.Composable:
            columns: list[sql.Composable] = []
            for name in fields:
                columns += [sql.Identifier(column) for column, _ in (
                    kind_layout.field_values(name, None) if name != "id" else [("id", None)])]
            ordering = sql.SQL(" ORDER BY {}").format(order_by(kind_layout, order)) if order else sql.SQL("")
            return sql.SQL("SELECT {} FROM {} WHERE tenant = %s AND {}{}{}").format(
                sql.SQL(", ").join(columns), self.table(kind_layout), sql.SQL(condition.decode()), ordering,
                sql.SQL(" LIMIT %s") if limited else sql.SQL(""))

        key = ("values", kind_layout.kind, tuple(fields), condition, tuple((o.field, o.descending) for o in order),
               not limited)
        return self.rendered(key, build)

    def count_or_delete(self, template: str, kind_layout: KindLayout, condition: bytes) -> bytes:
        """`template` ("SELECT count(*) FROM {} WHERE …" or "DELETE FROM {} WHERE …") on the kind's table."""
        from psycopg import sql

        return self.rendered((template, kind_layout.kind, condition), lambda: sql.SQL(template).format(
            self.table(kind_layout), sql.SQL(condition.decode())))

    def tenants(self, kind_layout: KindLayout) -> bytes:
        from psycopg import sql

        return self.rendered(("tenants", kind_layout.kind), lambda: sql.SQL(
            "SELECT DISTINCT tenant FROM {} ORDER BY tenant").format(self.table(kind_layout)))

    # vector search ---------------------------------------------------------------------
    def nearest(self, kind_layout: KindLayout, metric: str, exact: bool, vectors: bool, explain: bool,
                condition: bytes, limit: int) -> bytes:
        """The nearest rows' statement. The inner query orders only (row address, distance) pairs
        and the outer one reads the columns of the k it kept: a scan that sorts carries narrow
        rows (half the time of the wide ones on a small table), an index scan is unaffected. The
        distance is computed once (ordered by its alias); a record without an embedding is not
        excluded in SQL (a NOT NULL test on the last column runs first and costs every row a full
        decode): its NULL distance sorts last, and the plan drops it. The limit is a literal:
        with a parameter the server would plan every execution anew (a generic plan that does not
        know the limit costs as if it read a tenth of the table), ~0.1 ms each."""
        from psycopg import sql

        def build() -> sql.Composable:
            operator = sql.SQL("OPERATOR({}.{})").format(
                sql.Identifier(self.names.vector_schema), sql.SQL(OPERATORS[metric]))
            distance: sql.Composable = sql.SQL("embedding {} %s").format(operator)
            inner, ordering = sql.SQL(""), sql.SQL("")
            if exact:
                if metric == "cosine":  # a zero vector has no direction: similarity 0 (NULL stays NULL)
                    distance = sql.SQL(
                        "coalesce(nullif({}, 'NaN'::float8), CASE WHEN embedding IS NULL THEN NULL ELSE 1.0 END)"
                    ).format(distance)
                inner, ordering = sql.SQL(", id"), sql.SQL(", s.id")
            table = self.table(kind_layout)
            columns = [sql.Identifier("t", column) for column in kind_layout.data_columns]
            if vectors:
                columns.append(sql.Identifier("t", "embedding"))
            statement = sql.SQL(
                "SELECT {columns}, s.distance FROM (SELECT ctid AS row_ref{inner}, {distance} AS distance FROM {table} "
                "WHERE tenant = %s AND {condition} ORDER BY distance{inner} LIMIT {limit}) AS s "
                "JOIN {table} AS t ON t.ctid = s.row_ref ORDER BY s.distance{ordering}"
            ).format(columns=sql.SQL(", ").join(columns), inner=inner, distance=distance, table=table,
                     condition=sql.SQL(condition.decode()), limit=sql.Literal(limit), ordering=ordering)
            return sql.SQL("EXPLAIN ") + statement if explain else statement

        return self.rendered(("nearest", kind_layout.kind, metric, exact, vectors, explain, condition, limit), build)

    def nearest_many(self, kind_layout: KindLayout, metric: str, vectors: bool, condition: bytes, limit: int,
                     n: int) -> bytes:
        """`nearest`'s index search for `n` query vectors in one statement (a group: core/async_groups.py):
        each walks the index in a LATERAL subquery of its own; rows start with the query's number
        (1 to n), in order of query, then distance. Its placeholders are $1, $2, ... (`Run.raw`):
        the queries, the tenant, then the condition's parameters."""
        return self._group_search(WALKS, kind_layout, metric, vectors, condition, limit, n)

    def scanned_many(self, kind_layout: KindLayout, metric: str, vectors: bool, condition: bytes, limit: int,
                     n: int) -> bytes:
        """`nearest_many`'s rows, exact, from one scan of the matching rows: each row's distances to
        the `n` queries are computed in that scan (an array, kept by a MATERIALIZED CTE), then each
        query's nearest are sorted from them. What a search alone gets when its plan does not walk
        the HNSW index (it scans and sorts: exact too); the scan and each row's decoding, over half
        a scanned search's server time, are paid once for the group. Same placeholders as `nearest_many`."""
        return self._group_search(SCAN, kind_layout, metric, vectors, condition, limit, n)

    def _group_search(self, form: tuple[str, str], kind_layout: KindLayout, metric: str, vectors: bool,
                      condition: bytes, limit: int, n: int) -> bytes:
        """A group search's statement, rendered once per key: `form` is (each query's part, the
        statement), formatted as `WALKS` and `SCAN` say."""
        from psycopg import sql

        def build() -> sql.Composable:
            each_query, template = form
            operator = sql.SQL("OPERATOR({}.{})").format(
                sql.Identifier(self.names.vector_schema), sql.SQL(OPERATORS[metric]))
            vector = sql.Identifier(self.names.vector_schema, "vector")
            queries = sql.SQL(", ").join(
                sql.SQL(each_query.format(i=i + 1)).format(operator=operator, vector=vector) for i in range(n))
            columns = [sql.Identifier("t", column) for column in kind_layout.data_columns]
            if vectors:
                columns.append(sql.Identifier("t", "embedding"))
            return sql.SQL(template).format(
                columns=sql.SQL(", ").join(columns), queries=queries, operator=operator,
                table=self.table(kind_layout), tenant=sql.SQL(str(n + 1)),
                condition=sql.SQL(numbered(condition, n + 2)), n=sql.Literal(n), limit=sql.Literal(limit))

        return self.rendered((form, kind_layout.kind, metric, vectors, condition, limit, n), build)

    # writing ---------------------------------------------------------------------------
    def upsert(self, kind_layout: KindLayout, keep_existing: bool = False, keep_created: bool = False,
               rows: int = 1) -> bytes:
        """`put`'s statement for `rows` rows of distinct ids (`put_missing`'s with `keep_existing`,
        `put_keeping_created`'s with `keep_created`): one statement is atomic without BEGIN and COMMIT.
        Several rows take `$n` placeholders, for `Run(raw=True)`."""

        def build() -> sql.Composable:
            from psycopg import sql  # in here: a `from … import` per call costs ~1 us

            width = len(kind_layout.write_columns)
            if rows == 1:
                row = sql.SQL("({})").format(sql.SQL(", ").join(sql.Placeholder() * width))
            else:  # $n placeholders: a `Run(raw=True)` (psycopg parses a %s statement this long on every call)
                row = sql.SQL(", ").join(
                    sql.SQL("({})").format(sql.SQL(", ").join(sql.SQL(f"${first + n}") for n in range(width)))
                    for first in range(1, rows * width, width))
            source = sql.SQL("VALUES {}").format(row)
            return self._upsert_sql(kind_layout, source, keep_existing=keep_existing, keep_created=keep_created)

        return self.rendered(("upsert", kind_layout.kind, keep_existing, keep_created, rows), build)

    def _upsert_sql(self, kind_layout: KindLayout, source: sql.Composable,
                    keep_existing: bool = False, keep_created: bool = False) -> sql.Composed:
        from psycopg import sql

        columns = kind_layout.write_columns
        names = sql.SQL(", ").join(sql.Identifier(c) for c in columns)
        if keep_existing:
            return sql.SQL("INSERT INTO {} ({}) {} ON CONFLICT (tenant, id) DO NOTHING").format(
                self.table(kind_layout), names, source)
        kept = ("tenant", "id", *(("created_at", offset_column("created_at")) if keep_created else ()))
        updates = sql.SQL(", ").join(
            sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in columns if c not in kept)
        return sql.SQL("INSERT INTO {} ({}) {} ON CONFLICT (tenant, id) DO UPDATE SET {}").format(
            self.table(kind_layout), names, source, updates)

    def copy_types(self, kind_layout: KindLayout) -> list[int]:
        """The OIDs of `write_columns`, for binary COPY."""
        oids = [25, 25]
        oids += [TYPE_OIDS.get(kind_layout.types[name], 20) for name in kind_layout.fields]
        oids += [20] * len(kind_layout.datetimes)
        oids += [TEXT_ARRAY_OID] * len(kind_layout.lists)
        oids += [17] * len(kind_layout.binary)
        return [*oids, 17, 3802, self.vector_oid]

    def copy_into(self, kind_layout: KindLayout, staged: bool) -> bytes:
        """Binary COPY of `write_columns` into the kind's table, or into its staging table."""
        from psycopg import sql

        def build() -> sql.Composable:
            columns = sql.SQL(", ").join(sql.Identifier(c) for c in kind_layout.write_columns)
            target = self._stage(kind_layout) if staged else self.table(kind_layout)
            return sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)").format(target, columns)

        return self.rendered(("copy", kind_layout.kind, staged), build)

    def staging(self, kind_layout: KindLayout, keep_created: bool = False) -> tuple[bytes, bytes, bytes]:
        """Create the staging table (dropped at commit), upsert from it, drop it (the transaction
        may stage another batch): the COPY path when ids may exist or the policies apply."""
        from psycopg import sql

        def build() -> tuple[bytes, bytes, bytes]:
            stage = self._stage(kind_layout)
            columns = sql.SQL(", ").join(sql.Identifier(c) for c in kind_layout.write_columns)
            create = sql.SQL("CREATE TEMP TABLE {} (LIKE {} INCLUDING DEFAULTS) ON COMMIT DROP").format(
                stage, self.table(kind_layout))
            upsert = self._upsert_sql(kind_layout, sql.SQL("SELECT {} FROM {}").format(columns, stage),
                                      keep_created=keep_created)
            drop = sql.SQL("DROP TABLE {}").format(stage)
            return create.as_bytes(None), upsert.as_bytes(None), drop.as_bytes(None)

        found: tuple[bytes, bytes, bytes] = self.cached(("staging", kind_layout.kind, keep_created), build)
        return found

    @staticmethod
    def _stage(kind_layout: KindLayout) -> sql.Identifier:
        from psycopg import sql

        return sql.Identifier(kind_layout.table + "_stage")

    def append(self, kind_layout: KindLayout) -> bytes:
        """`put`'s upsert of one checkpoint from a SELECT whose `sequence` and `parent_ids` come from
        the CTE `latest` (the `checkpoint_latest` function's row) if it has one; returns that
        parent's id and sequence (NULLs for a root)."""
        from psycopg import sql

        def build() -> sql.Composable:
            values: list[sql.Composable] = []
            for column, type_ in zip(kind_layout.write_columns, self._column_types(kind_layout), strict=True):
                value = sql.SQL("%s::{}").format(type_)
                if column == "sequence":
                    value = sql.SQL("coalesce((SELECT sequence + 1 FROM latest), {})").format(value)
                elif column == "parent_ids":
                    value = sql.SQL("coalesce((SELECT ARRAY[id] FROM latest), {})").format(value)
                values.append(value)
            insert = self._upsert_sql(kind_layout, sql.SQL("SELECT {}").format(sql.SQL(", ").join(values)))
            function = self.names.table(self.names.prefix + "checkpoint_latest")
            return sql.SQL("WITH latest AS (SELECT id, sequence FROM {}(%s, %s, %s, %s)) {} "
                           "RETURNING (SELECT id FROM latest), (SELECT sequence FROM latest)").format(function, insert)

        return self.rendered(("append",), build)

    def append_many(self, kind_layout: KindLayout, n: int) -> bytes:
        """`append` of `n` checkpoints in one statement (a group commit: core/async_groups.py): each row
        of the VALUES list is (tenant, run, branch, lock key, `write_columns`) and takes its parent
        from its own `checkpoint_latest` call, in the rows' order; returns each row's id, parent_ids
        and sequence (the parent, if one was found, is parent_ids[1] at sequence - 1). Its
        placeholders are $1, $2, ... (`Run.raw`)."""
        from psycopg import sql

        def build() -> sql.Composable:
            columns = kind_layout.write_columns
            types = ["text"] * 3 + ["bigint"] + [t.as_string(None) for t in self._column_types(kind_layout)]
            width = len(types)  # the rows as plain text: composing n x width casts took ~2 ms a size
            rows = sql.SQL(", ".join(
                "(" + ", ".join(f"${r * width + i + 1}::{t}" for i, t in enumerate(types)) + ")" for r in range(n)))
            names = [sql.Identifier(f"c{i}") for i in range(len(columns))]
            values: list[sql.Composable] = []
            for column, name in zip(columns, names, strict=True):
                value: sql.Composable = sql.SQL("v.{}").format(name)
                if column == "sequence":
                    value = sql.SQL("coalesce(l.sequence + 1, {})").format(value)
                elif column == "parent_ids":
                    value = sql.SQL("CASE WHEN l.id IS NULL THEN {} ELSE ARRAY[l.id] END").format(value)
                values.append(value)
            function = self.names.table(self.names.prefix + "checkpoint_latest")
            source = sql.SQL(
                "SELECT {} FROM (VALUES {}) AS v (tenant_, run_, branch_, lock_, {}) "
                "LEFT JOIN LATERAL {}(v.tenant_, v.run_, v.branch_, v.lock_) AS l ON TRUE").format(
                sql.SQL(", ").join(values), rows, sql.SQL(", ").join(names), function)
            return sql.SQL("{} RETURNING id, parent_ids, sequence").format(self._upsert_sql(kind_layout, source))

        return self.rendered(("append_many", n), build)

    def _column_types(self, kind_layout: KindLayout) -> list[sql.Composable]:
        """The SQL types of `write_columns`, for casts: the names of `copy_types`' OIDs."""
        from psycopg import sql

        vector = sql.Identifier(self.names.vector_schema, "vector")
        return [vector if oid == self.vector_oid else sql.SQL(_TYPE_NAMES[oid])
                for oid in self.copy_types(kind_layout)]

    def lock_doc(self, kind_layout: KindLayout) -> bytes:
        """The row's document and list columns, locked for an update that rewrites the document."""
        from psycopg import sql

        return self.rendered(("lock_doc", kind_layout.kind), lambda: sql.SQL(
            "SELECT {} FROM {} WHERE tenant = %s AND id = %s FOR UPDATE").format(
            sql.SQL(", ").join([sql.Identifier("doc"), *(sql.Identifier(name) for name in kind_layout.lists)]),
            self.table(kind_layout)))

    def update(self, kind_layout: KindLayout, assignments: Sequence[tuple[str, bool]]) -> bytes:
        """`UPDATE … SET` each (column, whether it is incremented) `WHERE tenant = %s AND id = %s`,
        returning the row as `select` reads it with its embedding."""
        from psycopg import sql

        def build() -> sql.Composable:
            sets = [sql.SQL("{0} = {0} + %s" if increment else "{0} = %s").format(sql.Identifier(column))
                    for column, increment in assignments]
            return sql.SQL("UPDATE {} SET {} WHERE tenant = %s AND id = %s RETURNING {}, embedding").format(
                self.table(kind_layout), sql.SQL(", ").join(sets), self.select_list(kind_layout))

        return self.rendered(("update", kind_layout.kind, tuple(assignments)), build)


WALKS = ("({i}, ${i}::{{vector}})",
         "SELECT q.n, {columns}, s.distance FROM (VALUES {queries}) AS q (n, v) CROSS JOIN LATERAL "
         "(SELECT ctid AS row_ref, embedding {operator} q.v AS distance FROM {table} "
         "WHERE tenant = ${tenant} AND {condition} ORDER BY distance LIMIT {limit}) AS s "
         "JOIN {table} AS t ON t.ctid = s.row_ref ORDER BY q.n, s.distance")
"""`nearest_many`: each query's (number, vector), and the statement walking the index for each in a LATERAL
subquery. In both forms `{i}` is a query's number, and `{queries}` the parts of all."""
SCAN = ("embedding {{operator}} ${i}::{{vector}}",
        "WITH r AS MATERIALIZED (SELECT ctid AS row_ref, ARRAY[{queries}] AS distances FROM {table} "
        "WHERE tenant = ${tenant} AND {condition}) "
        "SELECT q.n, {columns}, s.distance FROM generate_series(1, {n}) AS q (n) CROSS JOIN LATERAL "
        "(SELECT row_ref, distances[q.n] AS distance FROM r ORDER BY distance LIMIT {limit}) AS s "
        "JOIN {table} AS t ON t.ctid = s.row_ref ORDER BY q.n, s.distance")
"""`scanned_many`: each query's distance to a row, and the statement sorting each query's distances of one scan."""


def numbered(fragment: bytes, first: int) -> str:
    """A SQL fragment written for psycopg (%s placeholders, %% for a percent sign) with the server's
    own placeholders instead: $first, $first + 1, ... (for a `Run.raw` statement)."""
    import re

    count = iter(range(first, first + fragment.count(b"%s") + 1))
    return re.sub(r"%%|%s", lambda m: "%" if m.group() == "%%" else f"${next(count)}", fragment.decode())
