"""The conformance suite: every backend, ours or a plugin's, proves itself against it.

Opt in from a plugin's tests with a few lines::

    from mnemostore.testing import ConformanceSuite

    class TestMyStore(ConformanceSuite):
        @pytest.fixture
        def store_url(self, tmp_path):
            return f"mystore://{tmp_path}"   # an empty store, fresh for each test

Tests that need a capability the backend does not declare are skipped with the reason.
"""

from __future__ import annotations

from .requirements import requires
from .suite import ConformanceSuite

__all__ = ["ConformanceSuite", "requires"]
