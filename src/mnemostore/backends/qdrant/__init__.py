"""The qdrant backends; `qdrant_client` is imported only when a store is opened."""

from .backend import QdrantBackend, QdrantServerBackend

__all__ = ["QdrantBackend", "QdrantServerBackend"]
