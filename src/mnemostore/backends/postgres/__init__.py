"""The PostgreSQL + pgvector backend (`postgresql://`, `postgres://`)."""

from .backend import PostgresBackend

__all__ = ["PostgresBackend"]
