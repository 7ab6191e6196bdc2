"""The parent side of the worker processes: start, synchronise, collect, kill — all bounded.

Every wait has a deadline, so a backend that deadlocks fails its clause instead of
hanging the run; workers still running when a clause ends are killed. A backend that a
fresh process cannot find (registered with `registry.register()` only) skips the clause.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import pytest

import mnemostore

from ..core.registry import registry
from ..core.url import StoreURL
from . import workers

WAIT_SECONDS = 60.0
"""The longest any clause waits for a worker to answer or to finish."""


def _environment() -> dict[str, str]:
    """The parent's environment, with this mnemostore's source directory first on the path.

    Not when mnemostore lives in site-packages: a fresh interpreter finds it there anyway,
    and putting site-packages before the standard library could shadow it."""
    env = dict(os.environ)
    root = Path(mnemostore.__file__).resolve().parent.parent
    if root.name not in ("site-packages", "dist-packages"):
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH")) if p)
    return env


def _command(job: str) -> list[str]:
    """Run workers.py by path with -P (no script directory on sys.path), or as a module if zipped."""
    script = Path(workers.__file__)
    if script.is_file():
        return [sys.executable, "-P", str(script), job]
    return [sys.executable, "-m", workers.__name__, job]


class Worker:
    """One worker process running `job` against the store at `url`."""

    def __init__(self, job: str, url: str, options: dict[str, Any], params: dict[str, Any]) -> None:
        try:
            spec = json.dumps({"url": url, "options": options, "params": params})
        except TypeError as exc:
            pytest.skip(f"store_options must be JSON to reach a worker process ({exc})")
        self.job = job
        self._scheme = StoreURL.parse(url).scheme
        self._stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close())
        self._lines: queue.Queue[str | None] = queue.Queue()
        self.process = subprocess.Popen(_command(job), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=self._stderr, env=_environment(), text=True, encoding="utf-8")
        assert self.process.stdin is not None and self.process.stdout is not None
        self._reader = threading.Thread(target=self._read, args=(self.process.stdout,), daemon=True)
        self._reader.start()
        self._send(spec)

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def _send(self, line: str) -> None:
        assert self.process.stdin is not None
        with contextlib.suppress(BrokenPipeError):  # it died: the next read reports why
            self.process.stdin.write(line + "\n")
            self.process.stdin.flush()

    def stderr(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode("utf-8", "replace")[-4000:]

    def _problem(self, what: str) -> str:
        return f"worker {self.process.pid} ({self.job}) {what}; its stderr:\n{self.stderr()}"

    def _next(self, timeout: float) -> str | None:
        """The next line it printed, or None once it exited; raises queue.Empty after `timeout` s."""
        return self._lines.get(timeout=max(0.0, timeout))

    def line(self, timeout: float = WAIT_SECONDS) -> str | None:
        """The next line it printed, or None once it exited; fails after `timeout` seconds."""
        try:
            return self._next(timeout)
        except queue.Empty:
            pytest.fail(self._problem(f"printed nothing for {timeout:.0f} s"))

    def ready(self) -> None:
        """Wait until its store is open; skip if a fresh process cannot find the same backend."""
        line = self.line()
        if line is None:
            self.process.wait(timeout=WAIT_SECONDS)
            pytest.fail(self._problem(f"exited with status {self.process.returncode} before opening the store"))
        word, _, payload = line.partition(" ")
        if word == "unknown-backend":
            pytest.skip(f"a fresh process cannot find the backend for {self._scheme!r} (registered only in-process "
                        "with register()?); register it under the `mnemostore.backends` entry-point group to run the "
                        f"multi-process and crash clauses: {json.loads(payload)['error']}")
        assert word == "ready", self._problem(f"said {line!r} instead of ready")
        info = json.loads(payload)
        cls = registry.for_scheme(self._scheme)
        here = f"{cls.__module__}:{cls.__qualname__}"
        if info["backend"] != here:
            pytest.skip(f"a fresh process opens {self._scheme!r} with {info['backend']}, not {here} (registered "
                        "only in-process?), so the multi-process and crash clauses cannot test it")
        if Path(info["mnemostore"]).resolve() != Path(mnemostore.__file__).resolve():
            pytest.skip(f"a fresh process imports mnemostore from {info['mnemostore']}, not {mnemostore.__file__}")

    def go(self) -> None:
        self._send("go")

    def finish(self, timeout: float = WAIT_SECONDS) -> list[str]:
        """Wait for it to exit; fail unless it finished its job. Returns the job's lines."""
        deadline = time.monotonic() + timeout
        lines: list[str] = []
        try:
            while (line := self._next(deadline - time.monotonic())) is not None:
                lines.append(line)
            self.process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except (queue.Empty, subprocess.TimeoutExpired):
            self.kill()
            pytest.fail(self._problem(f"did not finish within {timeout:.0f} s (a deadlock?)"))
        status = self.process.returncode
        assert status == 0 and lines[-1:] == ["done"], self._problem(f"failed (exit status {status})")
        return lines[:-1]

    def kill(self) -> list[str]:
        """SIGKILL it and return the lines it printed before it died that were not read yet."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=WAIT_SECONDS)
        self._reader.join(timeout=WAIT_SECONDS)
        lines: list[str] = []
        while not self._lines.empty() and (line := self._lines.get_nowait()) is not None:
            lines.append(line)
        return lines

    def close(self) -> None:
        """Kill it if it still runs and release its pipes."""
        if self.process.poll() is None:
            self.kill()
        self._reader.join(timeout=WAIT_SECONDS)  # it reads stdout until EOF: close that after it
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self._stderr.close()


@contextlib.contextmanager
def workers_running(job: str, url: str, options: dict[str, Any],
                    params: Sequence[dict[str, Any]]) -> Iterator[list[Worker]]:
    """Start one worker per params entry; all are killed (if still running) when the block ends."""
    started: list[Worker] = []
    try:
        for entry in params:
            started.append(Worker(job, url, options, entry))
        yield started
    finally:
        for worker in started:
            worker.close()


def run_together(job: str, url: str, options: dict[str, Any],
                 params: Sequence[dict[str, Any]]) -> list[list[str]]:
    """Start the workers, let them all begin at once when every store is open, and wait for them.

    Returns each worker's job lines."""
    with workers_running(job, url, options, params) as started:
        for worker in started:
            worker.ready()
        for worker in started:
            worker.go()
        deadline = time.monotonic() + WAIT_SECONDS
        return [worker.finish(max(1.0, deadline - time.monotonic())) for worker in started]
