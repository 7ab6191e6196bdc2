"""The `file` backend: a readable directory of checksummed JSON-lines logs, one per kind.

See `backend.py` for the layout and guarantees; `FileBackend` is the registered class.
"""

from .backend import FileBackend, FileOptions

__all__ = ["FileBackend", "FileOptions"]
