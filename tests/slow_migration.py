"""A slow, idempotent record migration shared by a test and the worker process it kills."""

from __future__ import annotations

import time
from typing import Any

from mnemostore.migrations import RecordMigration


def _mark(record: Any) -> dict[str, Any] | None:
    time.sleep(0.01)
    return None if record.metadata.get("migrated") else {"metadata": {**record.metadata, "migrated": True}}


MIGRATION = RecordMigration("test.slow_mark", kinds=("outcome",), change=_mark, batch_size=5)
