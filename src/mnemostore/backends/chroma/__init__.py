"""The Chroma backend: `chroma:///dir`, `chroma://memory`, `chroma+http://host:port`, `chroma+https://…`."""

from .backend import ChromaBackend, ChromaServerBackend

__all__ = ["ChromaBackend", "ChromaServerBackend"]
