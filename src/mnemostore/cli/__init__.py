"""The `mnemostore` command line: `demo`, `backends`, `info` and `conformance`."""

from .app import main

__all__ = ["main"]
