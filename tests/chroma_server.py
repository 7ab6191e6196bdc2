"""One real Chroma server for the test session (`chroma run`, shipped with chromadb).

Started on first use on a free local port with a throwaway directory (in memory where the machine has
/dev/shm), checked through its heartbeat, and stopped at the end. A server that cannot start is an
error, never a skip.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

START_SECONDS = 60.0
MEMORY_DIRECTORY = Path("/dev/shm")
"""Where the server keeps its throwaway data if the machine has it: a tmpfs, so the ~3 collections each
test's fresh store makes cost no disk syncs (a store's open and first write: 96 -> 77 ms)."""


def chroma_command() -> str:
    """The `chroma` CLI of the running interpreter's environment."""
    beside = Path(sys.executable).with_name("chroma")
    found = str(beside) if beside.exists() else shutil.which("chroma")
    if found is None:
        raise RuntimeError("the Chroma tests need the `chroma` CLI from chromadb: pip install -e '.[dev]'")
    return found


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class ChromaTestServer:
    """A running `chroma run` process and URLs of fresh stores on it."""

    def __init__(self) -> None:
        memory = MEMORY_DIRECTORY if os.access(MEMORY_DIRECTORY, os.W_OK | os.X_OK) else None
        self.directory = Path(tempfile.mkdtemp(prefix="mnemostore-chroma-", dir=memory))
        self.port = free_port()
        self.log = self.directory / "server.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [chroma_command(), "run", "--path", str(self.directory / "data"), "--host", "127.0.0.1",
                 "--port", str(self.port)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self._wait()
        import mnemostore

        # Held open for the session: every store on this server then shares its client
        # (the backend shares clients per process), instead of building one per test.
        self.keeper = mnemostore.open(self.url())

    @property
    def base_url(self) -> str:
        return f"chroma+http://127.0.0.1:{self.port}"

    def url(self) -> str:
        """A fresh, empty store: its own collection prefix on the shared server."""
        return f"{self.base_url}?prefix=t{uuid.uuid4().hex[:12]}_"

    def _wait(self) -> None:
        deadline = time.monotonic() + START_SECONDS
        heartbeat = f"http://127.0.0.1:{self.port}/api/v2/heartbeat"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                with urllib.request.urlopen(heartbeat, timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        detail = self.log.read_text(errors="replace")[-4000:]
        self.stop()
        raise RuntimeError(f"the test Chroma server did not start on port {self.port}:\n{detail}")

    def stop(self) -> None:
        keeper = getattr(self, "keeper", None)
        if keeper is not None:
            keeper.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(15)
        shutil.rmtree(self.directory, ignore_errors=True)


@pytest.fixture(scope="session")
def chroma_server() -> Iterator[ChromaTestServer]:
    """Import this fixture into a test module; every test shares one server."""
    server = ChromaTestServer()
    yield server
    server.stop()
