"""The embedded SQLite backend (`sqlite:///path.db`), the default store."""

from .backend import SQLiteBackend, SQLiteOptions

__all__ = ["SQLiteBackend", "SQLiteOptions"]
