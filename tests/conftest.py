"""Imports made before any test runs.

CPython 3.11.7 leaks its AST constructor's depth counter when building an AST fails (gh-106905: e.g. a
RecursionError, a module first imported deep in a test's stack), and every later `ast` parse in that
process then fails with "SystemError: AST constructor recursion depth mismatch". pytest parses each
module of this distribution as it is first imported (its `pytest11` entry point marks them for assertion
rewriting), and the PostgreSQL backend imports its drivers at a store's first call. So a worker that ran
such a test before its first PostgreSQL store failed there (seen twice, in `read_meta`). The drivers are
imported here, in the main thread, before any test.
"""

import importlib

for _driver in ("mnemostore.backends.postgres.sync_driver", "mnemostore.backends.postgres.async_driver"):
    importlib.import_module(_driver)
