"""A runner killed with SIGKILL in the middle of a record migration: the store stays usable, the
lock frees itself, and running again finishes the job from the last saved batch."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tests.slow_migration import MIGRATION

import mnemostore
from mnemostore.core.store import open_backend
from mnemostore.migrations import Runner
from mnemostore.migrations.ledger import PROGRESS_KEY

SCRIPT = textwrap.dedent("""
    import sys
    import mnemostore
    from tests.slow_migration import MIGRATION
    mnemostore.open(sys.argv[1], migrations=[MIGRATION]).close()
""")


def test_a_killed_record_migration_resumes_and_finishes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with mnemostore.open(url) as store:
        store.outcomes.put([{"id": f"o{i:03d}", "task_type": "t", "success": True} for i in range(60)])
    root = Path(__file__).parent.parent
    worker = subprocess.Popen([sys.executable, "-c", SCRIPT, url], cwd=root,
                              env={**os.environ, "PYTHONPATH": str(root)})
    backend = open_backend(url)
    try:
        deadline = time.monotonic() + 60
        while backend.read_meta(PROGRESS_KEY) is None:  # wait until at least one batch is saved
            assert worker.poll() is None and time.monotonic() < deadline, "the worker never saved progress"
            time.sleep(0.02)
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
        saved = backend.read_meta(PROGRESS_KEY)[MIGRATION.id]
        assert saved["kind"] == "outcome" and saved["after"] < "o059"
        runner = Runner(backend, [MIGRATION], lock_wait=5)
        assert runner.lock_holder() is None  # the kernel released the dead runner's lock file
        assert [m.id for m in runner.status().pending] == [MIGRATION.id]
        assert runner.up() == [MIGRATION.id]
        assert backend.read_meta(PROGRESS_KEY) is None
    finally:
        backend.close()
    with mnemostore.open(url, migrations=[MIGRATION]) as store:
        assert all(r.metadata.get("migrated") is True for r in store.outcomes.all())
        assert store.outcomes.count() == 60
