"""Lone writes on a connection of the store's own sync pool, run at the libpq level.

A write run alone outside a transaction (a saver's `put_writes`, a store's one-item put) costs
psycopg's execute ~40-50 us of client CPU around what libpq itself spends: its generators and
wait loop, query conversion, prepared-statement bookkeeping and result objects. Here its
parameters are dumped by psycopg's own Transformer (the connection's adapters: the same types and
formats psycopg sends), the statement is prepared on its second execution (as psycopg's
statements are, under names of our own) and executed by one blocking libpq call, which releases
the GIL. A server error is raised as the psycopg error psycopg would raise for it.

psycopg deallocates every prepared statement of a connection after a rollback or a DROP or ALTER
it ran while it held prepared statements of its own: a write outside a transaction whose name the
server no longer knows was not run, so its statement is prepared again and it runs once more (each
such name is found out at its next use; the server never holds more than `MAX_PREPARED` of ours).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Any, cast

import psycopg
from psycopg import pq
from psycopg.adapt import PyFormat, Transformer

from .statements import numbered

if TYPE_CHECKING:
    from .steps import Run

MAX_PREPARED = 64
"""Statements a connection keeps prepared here; past that the least recently used is deallocated."""
MAX_SEEN = 256
"""Statements seen once (prepared at their second execution) a connection remembers; past that it starts again."""
IDLE = pq.TransactionStatus.IDLE
COMMAND_OK = pq.ExecStatus.COMMAND_OK
BAD = pq.ConnStatus.BAD
UNKNOWN_STATEMENT = b"26000"
"""SQLSTATE invalid_sql_statement_name: a prepared statement the server has deallocated."""

Key = tuple[bytes, tuple[int, ...]]


class LoneWrites:
    """A connection's lone writes (`usable`), their statements prepared by name."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._pgconn = conn.pgconn
        self._conn = conn
        self._tx = Transformer(conn)
        self._queries: dict[bytes | str, bytes] = {}
        """Statements as the server reads them ($n placeholders), by statement as plans give it."""
        self._names: OrderedDict[Key, bytes] = OrderedDict()
        self._seen: set[Key] = set()
        self._count = 0
        self._formats: dict[int, list[PyFormat]] = {}

    def usable(self) -> bool:
        """Whether a write can run here: the connection is open and outside a transaction."""
        pgconn = self._pgconn
        return pgconn.transaction_status == IDLE and pgconn.status != BAD

    def run(self, step: Run) -> int:
        """Execute `step` (no rows to read); its row count."""
        query = self._queries.get(step.statement)
        if query is None:
            query = self._query(step)
        params = step.params or ()
        formats = self._formats.get(len(params))
        if formats is None:
            formats = self._formats[len(params)] = [PyFormat.AUTO] * len(params)
        tx = self._tx
        # NULLs go as None (libpq's NULL), which psycopg's stub for exec_prepared leaves out
        values = cast("list[bytes]", tx.dump_sequence(params, formats))
        key = (query, tx.types or ())
        name = self._names.get(key)
        if name is None and key not in self._seen:
            if len(self._seen) >= MAX_SEEN:
                self._seen.clear()
            self._seen.add(key)
            result = self._pgconn.exec_params(query, values, key[1], tx.formats)
        else:
            if name is None:
                name = self._prepare(key)
            else:
                self._names.move_to_end(key)
            result = self._pgconn.exec_prepared(name, values, tx.formats)
            if result.status != COMMAND_OK and result.error_field(pq.DiagnosticField.SQLSTATE) == UNKNOWN_STATEMENT:
                del self._names[key]  # psycopg deallocated it (and the rest): the write was not run
                result = self._pgconn.exec_prepared(self._prepare(key), values, tx.formats)
        if result.status != COMMAND_OK:
            raise self._error(result)
        return result.command_tuples or 0

    def _query(self, step: Run) -> bytes:
        statement = step.statement
        query = statement if type(statement) is bytes else str(statement).encode()
        if not step.raw:
            query = numbered(query, 1).encode()
        if len(self._queries) >= MAX_SEEN:
            self._queries.clear()
        self._queries[statement] = query
        return query

    def _prepare(self, key: Key) -> bytes:
        """A name for `key`'s statement, prepared on the server (past `MAX_PREPARED`, the least recently
        used is deallocated first)."""
        if len(self._names) >= MAX_PREPARED:
            _, old = self._names.popitem(last=False)
            gone = self._pgconn.exec_(b"DEALLOCATE " + old)
            if gone.status != COMMAND_OK and gone.error_field(pq.DiagnosticField.SQLSTATE) != UNKNOWN_STATEMENT:
                raise self._error(gone)  # (unknown: psycopg deallocated it already)
        name = f"_mnemo_{self._count}".encode()
        self._count += 1
        self._check(self._pgconn.prepare(name, key[0], key[1]))
        self._names[key] = name
        return name

    def _check(self, result: pq.abc.PGresult) -> None:
        if result.status != COMMAND_OK:
            raise self._error(result)

    def _error(self, result: pq.abc.PGresult) -> psycopg.Error:
        """The error psycopg raises for a failed statement's result (OperationalError for a lost connection)."""
        if self._pgconn.status == BAD:
            message = self._pgconn.get_error_message(self._conn.info.encoding)
            return psycopg.OperationalError(f"consuming input failed: {message}")
        return psycopg.errors.error_from_result(result, encoding=self._conn.info.encoding)
