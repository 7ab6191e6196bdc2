"""The pytest plugin (entry point `pytest11`): registers the suite's marker.

It runs no test by itself; opting a URL into the suite from the command line is a
separate, explicit switch.
"""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "mnemostore_requires(*capabilities): a conformance clause needs these capabilities"
    )
