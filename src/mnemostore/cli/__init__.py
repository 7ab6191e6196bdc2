"""The `mnemostore` command line: `demo`, `backends` and `info`."""

from .app import main

__all__ = ["main"]
