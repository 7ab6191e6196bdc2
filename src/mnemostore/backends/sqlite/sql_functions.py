"""The SQL functions mnemostore's statements call, installed on each connection the backend opens."""

from __future__ import annotations

import sqlite3

from ...core.codec import with_created_at_of

CREATED_KEPT = "mnemo_created_kept"
"""(new document, stored document) -> the new one holding the stored `created_at` (`codec.with_created_at_of`):
a replace that keeps a record's first time runs as one statement (`Layout.insert_sql`'s "keep_created")."""


def install(conn: sqlite3.Connection) -> None:
    """Make the functions callable in `conn`'s statements."""
    conn.create_function(CREATED_KEPT, 2, with_created_at_of, deterministic=True)
