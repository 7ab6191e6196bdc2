"""mnemostore-lmdb: a mnemostore backend on LMDB, written as any third-party plugin would be."""

from .backend import LMDBBackend, LMDBOptions

__all__ = ["LMDBBackend", "LMDBOptions"]
