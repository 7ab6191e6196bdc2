"""What a LangGraph store batch's rows cost SQLite to write, apart from the Python that makes them: the rows
`MnemostoreStore` writes (captured from its batches) replayed through raw sqlite3 on the same table, in
variants of the row's design, beside `SqliteStore`'s rows on its own table. Where `profile_store_wall.py`
splits our batch into its parts, this asks which row design would make the write part as cheap as theirs.

    python bench/profile_store_rows.py                    # batches of 1,000 items, 7 after the first
    python bench/profile_store_rows.py --n 300 --batches 11

Variants (the same items, batch after batch into one table, our pragmas, `wal_autocheckpoint = 0` on every
side so that WAL bytes count every page written): `ours` as written today; `ordered ids` with each id its
namespace and key (neighbours in the (tenant, id) index) instead of a hash; `narrow doc` with a document
holding none of the fields the row's columns hold; both; `theirs`, `SqliteStore`'s rows and statement.
Each is written with `executemany` and as one multi-row INSERT (`SqliteStore` makes one statement a batch).
"""

from __future__ import annotations

import argparse
import gc
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from case_langgraph_store import _items
from langgraph.store.base import PutOp

import mnemostore
from mnemostore.integrations.langgraph import MnemostoreStore

Batch = tuple[str, list[tuple[Any, ...]]]
PRAGMAS = ("PRAGMA journal_mode = WAL", "PRAGMA synchronous = NORMAL", "PRAGMA cache_size = -16384",
           "PRAGMA mmap_size = 268435456", "PRAGMA temp_store = MEMORY", "PRAGMA wal_autocheckpoint = 0")
THEIRS = ("CREATE TABLE store (prefix text NOT NULL, key text NOT NULL, value text NOT NULL, created_at TIMESTAMP "
          "DEFAULT CURRENT_TIMESTAMP, updated_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP, expires_at TIMESTAMP, "
          "ttl_minutes REAL, PRIMARY KEY (prefix, key))", "CREATE INDEX store_prefix_idx ON store (prefix)")
THEIR_INSERT = ("INSERT OR REPLACE INTO store (prefix, key, value, created_at, updated_at, expires_at, ttl_minutes) "
                "VALUES (?, ?, ?, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, ?, ?)")


def _captured(where: Path, items: list[Any], n: int, batches: int) -> tuple[list[Batch], list[str]]:
    """Each batch's INSERT and rows as `MnemostoreStore` wrote them, and its table's DDL."""
    seen: list[Batch] = []
    path = where / "ours.db"
    with mnemostore.open(f"sqlite:///{path}") as store:
        db: Any = store.backend.db  # type: ignore[attr-defined]
        write = db.write

        class Spy:
            def __init__(self, conn: sqlite3.Connection) -> None:
                self.conn = conn

            def executemany(self, sql: str, rows: Any) -> sqlite3.Cursor:
                rows = list(rows)
                if _writes_items(sql):
                    seen.append((sql, rows))
                return self.conn.executemany(sql, rows)

            def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
                if _writes_items(sql) and args:  # `schema.insert_rows`: several rows a statement
                    seen.append(_one_row_each(sql, args[0]))
                return self.conn.execute(sql, *args)

            def __getattr__(self, name: str) -> Any:
                return getattr(self.conn, name)

        db.write = lambda work: write(lambda conn: work(Spy(conn)))
        ours = MnemostoreStore(store)
        for b in range(batches + 1):
            ours.batch([PutOp(*item) for item in items[b * n:(b + 1) * n]])
    with sqlite3.connect(path) as conn:
        ddl = [sql for (sql,) in conn.execute("SELECT sql FROM sqlite_master WHERE tbl_name = "
                                              "'mnemo_langgraph_item' AND sql IS NOT NULL")]
    return seen, ddl


def _writes_items(sql: str) -> bool:
    """Whether `sql` writes LangGraph items' rows (not the store's metadata or its declarations)."""
    return sql.startswith("INSERT") and "mnemo_langgraph_item" in sql


def _one_row_each(sql: str, values: list[Any]) -> Batch:
    """A multi-row INSERT's statement for one row and its rows (`_one_statement` undone)."""
    head, marks = sql.split(" VALUES ", 1)
    marks, on, tail = marks.partition(" ON CONFLICT")
    count = marks.count("), (") + 1
    width = len(values) // count
    one = marks.split("), (")[0] + ("" if count == 1 else ")")
    return (f"{head} VALUES {one}{on}{tail}",
            [tuple(values[i:i + width]) for i in range(0, len(values), width)])


def _parameters(sql: str) -> dict[str, int]:
    """Column -> its parameter's index in an INSERT whose VALUES write some columns as NULL literals."""
    columns = sql[sql.index("(") + 1:sql.index(")")].split(", ")
    values = sql[sql.index("VALUES (") + 8:].split(")")[0].split(", ")
    marks = [column for column, value in zip(columns, values, strict=True) if value == "?"]
    return {column: i for i, column in enumerate(marks)}


def _ours(ordered: bool, narrow: bool) -> Callable[[Batch], Batch]:
    def variant(batch: Batch) -> Batch:
        sql, rows = batch
        at = _parameters(sql)
        changed = []
        for row in rows:
            values = list(row)
            if ordered:
                values[at['"id"']] = values[at['"namespace"']] + values[at['"key"']]
            if narrow:
                values[at["doc"]] = b"{}"
            changed.append(tuple(values))
        return sql, changed
    return variant


def _theirs(batch: Batch) -> Batch:
    sql, rows = batch
    at = _parameters(sql)
    prefix = len("langgraph:")
    return THEIR_INSERT, [(row[at['"namespace"']][prefix:].rstrip("/").replace("/", "."), row[at['"key"']],
                           row[at["meta"]], None, None) for row in rows]


def _one_statement(sql: str, rows: list[tuple[Any, ...]]) -> tuple[str, list[Any]]:
    """The same rows as one multi-row INSERT."""
    head, marks = sql.split(" VALUES ", 1)
    marks, _, tail = marks.partition(" ON CONFLICT")
    return (f"{head} VALUES {', '.join([marks] * len(rows))}{' ON CONFLICT' + tail if tail else ''}",
            [value for row in rows for value in row])


def _write(path: Path, ddl: list[str] | tuple[str, ...], batches: list[Batch], one: bool) -> list[tuple[float, int]]:
    """Seconds and WAL bytes of each batch, written in one transaction each."""
    conn = sqlite3.connect(path, isolation_level=None)
    for statement in (*PRAGMAS, *ddl):
        conn.execute(statement)
    wal, seen = Path(f"{path}-wal"), []
    try:
        for sql, rows in batches:
            before = wal.stat().st_size if wal.exists() else 0
            gc.collect()
            start = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            if one:
                conn.execute(*_one_statement(sql, rows))
            else:
                conn.executemany(sql, rows)
            conn.execute("COMMIT")
            seen.append((time.perf_counter() - start, wal.stat().st_size - before))
    finally:
        conn.close()
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1000, help="items a batch")
    parser.add_argument("--batches", type=int, default=7, help="timed batches after the first")
    parser.add_argument("--rounds", type=int, default=3, help="times each variant is written, in turns")
    args = parser.parse_args()
    variants: dict[str, Callable[[Batch], Batch]] = {
        "ours": _ours(False, False), "ordered ids": _ours(True, False), "narrow doc": _ours(False, True),
        "ordered ids, narrow doc": _ours(True, True), "theirs (SqliteStore)": _theirs}
    seen: dict[tuple[str, bool], list[tuple[float, int]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        captured, ddl = _captured(where, _items((args.batches + 1) * args.n), args.n, args.batches)
        files = 0
        for _ in range(args.rounds):
            for name, variant in variants.items():
                for one in (False, True):
                    tables = THEIRS if name.startswith("theirs") else ddl
                    files += 1
                    path = where / f"{files}.db"
                    seen.setdefault((name, one), []).extend(
                        _write(path, tables, [variant(batch) for batch in captured], one)[1:])  # the first makes pages
    per = 1e6 / args.n
    print(f"batches of {args.n:,} items after the first, medians of {args.batches} x {args.rounds}, per item")
    print(f"  {'rows':26} {'executemany us':>15} {'one INSERT us':>14} {'WAL bytes':>10}")
    for name in variants:
        many, one = seen[(name, False)], seen[(name, True)]
        wal = statistics.median(b for _, b in many) / args.n
        print(f"  {name:26} {statistics.median(s for s, _ in many) * per:15.2f} "
              f"{statistics.median(s for s, _ in one) * per:14.2f} {wal:10.0f}")


if __name__ == "__main__":
    main()
