"""The hand-written sqlite3 baseline: the same rows, WAL mode, one transaction per batch."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import orjson
from data import raw_heuristic_row

SCHEMA = """
CREATE TABLE IF NOT EXISTS heuristic (
    id TEXT PRIMARY KEY, agent TEXT, project_id TEXT, confidence REAL, created_at TEXT,
    doc BLOB NOT NULL, embedding BLOB);
CREATE INDEX IF NOT EXISTS heuristic_agent ON heuristic (agent);
CREATE INDEX IF NOT EXISTS heuristic_confidence ON heuristic (confidence);
CREATE TABLE IF NOT EXISTS checkpoint (id TEXT PRIMARY KEY, run_id TEXT, seq INTEGER, state BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS checkpoint_run ON checkpoint (run_id, seq);
"""


def connect(path: Path) -> sqlite3.Connection:
    """WAL, synchronous=NORMAL: the settings of mnemostore's sqlite backend by default."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.executescript(SCHEMA)
    return conn


def insert_heuristics(conn: sqlite3.Connection, dicts: list[dict[str, Any]]) -> None:
    rows = [raw_heuristic_row(d) for d in dicts]
    conn.execute("BEGIN")
    conn.executemany("INSERT OR REPLACE INTO heuristic VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
    conn.execute("COMMIT")


def filtered_query(conn: sqlite3.Connection, agent: str, min_confidence: float, limit: int) -> list[Any]:
    cursor = conn.execute(
        "SELECT doc FROM heuristic WHERE agent = ? AND confidence >= ? ORDER BY confidence DESC, id LIMIT ?",
        (agent, min_confidence, limit))
    return [orjson.loads(doc) for (doc,) in cursor]


def save_checkpoint(conn: sqlite3.Connection, id: str, run_id: str, seq: int, state: dict[str, Any]) -> None:
    conn.execute("INSERT INTO checkpoint VALUES (?, ?, ?, ?)", (id, run_id, seq, orjson.dumps(state)))


def load_checkpoint(conn: sqlite3.Connection, id: str) -> Any:
    row = conn.execute("SELECT state FROM checkpoint WHERE id = ?", (id,)).fetchone()
    return orjson.loads(row[0])


def latest_checkpoint(conn: sqlite3.Connection, run_id: str) -> Any:
    row = conn.execute("SELECT state FROM checkpoint WHERE run_id = ? ORDER BY seq DESC LIMIT 1",
                       (run_id,)).fetchone()
    return orjson.loads(row[0])
