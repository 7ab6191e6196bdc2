"""The `mnemostore` command line: `demo`, `backends`, `info`, `conformance`, `migrate`, `copy`, `export`, `import`."""

from .app import main

__all__ = ["main"]
