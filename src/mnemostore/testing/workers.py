"""The subprocess side of the multi-process and crash clauses: `python -P workers.py JOB`.

A worker imports only mnemostore's core, never `mnemostore.testing` (whose import pulls
in pytest and hypothesis), so it starts quickly; the parent runs this file by path.
The parent writes one JSON line to stdin, `{"url", "options", "params"}` (stdin, not
argv, so a password in the URL never shows in a process listing). The worker answers on
stdout: `ready {json}` once the store is open, then the job's lines, then `done`.
The record builders here are shared with the parent, which rebuilds what was written.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

import mnemostore
from mnemostore.core.errors import UnknownBackend
from mnemostore.core.records import Checkpoint, Heuristic, Record
from mnemostore.core.store import Store
from mnemostore.core.store import open as open_store
from mnemostore.core.vectors import vectors_equal
from mnemostore.migrations.model import RecordMigration
from mnemostore.migrations.runner import Runner

BASE_TIME = datetime(2025, 3, 1, tzinfo=UTC)
CONTENDED_ID = "contended"
UNKNOWN_BACKEND_EXIT = 3
"""Exit status of a worker whose process cannot find the backend (registered in-process only)."""
CRASH_DIMENSION = 64


def emit(word: str, payload: Any = None) -> None:
    """One protocol line on stdout, flushed at once (the parent counts it as acknowledged)."""
    line = word if payload is None else f"{word} {json.dumps(payload)}"
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def own_heuristic(worker: int, i: int) -> Heuristic:
    """The i-th record a contending worker puts under its own id."""
    return Heuristic(id=f"worker{worker}-{i:03d}", condition=f"worker {worker}", strategy=f"put {i}",
                     agent=f"agent-{worker}", created_at=BASE_TIME + timedelta(seconds=i),
                     updated_at=BASE_TIME + timedelta(seconds=i), metadata={"worker": worker, "i": i})


def contended_version(worker: int) -> Heuristic:
    """Worker `worker`'s version of the one record every worker upserts: every field differs."""
    vector = np.random.default_rng(1000 + worker).standard_normal(CRASH_DIMENSION).astype(np.float32)
    return Heuristic(
        id=CONTENDED_ID, agent=f"agent-{worker}", project_id=f"project-{worker}",
        condition=f"condition of worker {worker} " * 40, strategy=f"strategy {worker}",
        confidence=worker / 10, occurrence_count=worker * 1000, success_count=worker,
        created_at=BASE_TIME + timedelta(days=worker), updated_at=BASE_TIME + timedelta(days=worker, hours=1),
        last_validated=BASE_TIME + timedelta(days=worker, hours=2),
        metadata={"worker": worker, "payload": [worker] * 400, "nested": {"w": str(worker) * 300}},
        embedding=vector)


def batch_records(round: int, batch: int, size: int) -> list[Heuristic]:
    """Batch `batch` of crash round `round`: `size` heuristics with embeddings, tagged in metadata."""
    matrix = np.random.default_rng([round, batch]).standard_normal((size, CRASH_DIMENSION)).astype(np.float32)
    return [Heuristic(id=f"r{round}-b{batch:04d}-{i:03d}", condition=f"round {round}", strategy=f"batch {batch}",
                      confidence=i / size, occurrence_count=i, created_at=BASE_TIME, updated_at=BASE_TIME,
                      metadata={"round": round, "batch": batch, "i": i}, embedding=matrix[i])
            for i in range(size)]


def large_state(batch: int, megabytes: float) -> dict[str, Any]:
    """A deterministic checkpoint state of at least `megabytes` MB of JSON, varied by `batch`."""
    chunk = f"batch {batch} ✓ " * 100
    count = int(megabytes * 1024 * 1024 / len(chunk.encode())) + 1
    return {"batch": batch, "messages": [{"n": n, "text": chunk, "score": n / 7} for n in range(count)]}


def large_checkpoint(round: int, batch: int, megabytes: float) -> Checkpoint:
    """Batch `batch` of a large-state crash round: one checkpoint holding a large state."""
    return Checkpoint(id=f"r{round}-b{batch:04d}", run_id=f"crash-{round}", sequence=batch,
                      created_at=BASE_TIME, updated_at=BASE_TIME, metadata={"round": round, "batch": batch},
                      state=large_state(batch, megabytes))


def crash_batch(kind: str, round: int, batch: int, params: dict[str, Any]) -> list[Record]:
    """What a crash writer puts as one batch of `kind` (rebuilt by the parent to check it)."""
    if kind == "checkpoint":
        return [large_checkpoint(round, batch, params["megabytes"])]
    return list(batch_records(round, batch, params["size"]))


def wait_for_go() -> bool:
    """Block until the parent says `go`; False if it went away instead."""
    return sys.stdin.readline().strip() == "go"


def increments(store: Store, params: dict[str, Any]) -> None:
    """Reinforce the shared heuristic and put one record of its own, `times` times."""
    worker, shared = params["worker"], params["id"]
    if not wait_for_go():
        return
    for i in range(params["times"]):
        store.heuristics.reinforce(shared, success=i % 2 == 0)
        store.heuristics.put([own_heuristic(worker, i)])


def appends(store: Store, params: dict[str, Any]) -> None:
    """Save `times` checkpoints with the default parent on the run `shared`."""
    if not wait_for_go():
        return
    for step in range(params["times"]):
        store.checkpoints.save("shared", {"worker": params["worker"], "step": step})


def version_differences(got: Record | None, versions: list[Record]) -> list[list[str]]:
    """For each version, the fields in which `got` differs from it (an empty list: equal)."""
    if got is None:
        return [["<missing>"] for _ in versions]
    found: list[list[str]] = []
    for version in versions:
        names = [name for name in type(version).model_fields if name != "embedding"
                 and getattr(got, name) != getattr(version, name)]
        if not vectors_equal(got.embedding, version.embedding):
            names.append("embedding")
        found.append(names)
    return found


def upserts(store: Store, params: dict[str, Any]) -> None:
    """Upsert this worker's version of the contended record `times` times, reading it back after each.

    Every read must equal some worker's whole version; the reads that did not are reported."""
    versions: list[Record] = [contended_version(w) for w in range(params["workers"])]
    mine = versions[params["worker"]]
    mixed: list[list[list[str]]] = []
    if not wait_for_go():
        return
    for _ in range(params["times"]):
        store.heuristics.put([mine])
        differences = version_differences(store.heuristics.get(CONTENDED_ID), versions)
        if all(differences):
            mixed.append(differences)
    emit("mixed", {"reads": params["times"], "mixed": len(mixed), "first": mixed[:1]})


def crash_writer(store: Store, params: dict[str, Any]) -> None:
    """Put batch after batch, printing each batch number once its put returned, until killed.

    Bounded in batches and seconds so a writer the parent forgot never runs for long."""
    kind, round = params["kind"], params["round"]
    deadline = time.monotonic() + params["seconds"]
    for batch in range(params["max_batches"]):
        if time.monotonic() > deadline:
            return
        store.collection(kind).put(crash_batch(kind, round, batch, params))
        emit(str(batch))


def searching_writer(store: Store, params: dict[str, Any]) -> None:
    """Put batch after batch, replace the records of the batch before with new vectors, and search,
    printing each batch number once done, until killed (bounded like `crash_writer`)."""
    round, size = params["round"], params["size"]
    deadline = time.monotonic() + params["seconds"]
    for batch in range(params["max_batches"]):
        if time.monotonic() > deadline:
            return
        records = batch_records(round, batch, size)
        store.heuristics.put(records)
        if batch:  # upserts: a quarter of the batch before, with new vectors
            store.heuristics.put([record.model_copy(update={"embedding": -record.embedding, "strategy": "replaced"})
                                  for record in batch_records(round, batch - 1, size)[: size // 4]])
        store.heuristics.search(records[0].embedding, k=10)
        emit(str(batch))


def counting_migration(id: str, *, kinds: tuple[str, ...] = ("heuristic",), batch_size: int = 500,
                       delay: float = 0.0, fail_on: str | None = None) -> RecordMigration:
    """A record migration that is not idempotent on purpose: it adds 1 to `metadata["runs"]`, so a
    record changed twice reads 2. It sleeps `delay` s per record and raises on the record `fail_on`."""

    def change(record: Record) -> dict[str, Any]:
        if record.id == fail_on:
            raise RuntimeError(f"the change refuses {record.id} (the suite's deliberate failure)")
        time.sleep(delay)
        return {"metadata": {**record.metadata, "runs": record.metadata.get("runs", 0) + 1}}

    def revert(record: Record) -> dict[str, Any]:
        return {"metadata": {**record.metadata, "runs": record.metadata.get("runs", 0) - 1}}

    return RecordMigration(id, kinds=kinds, change=change, revert=revert, batch_size=batch_size,
                           parameters=("counting", delay), description="metadata['runs'] += 1")


def migrate(store: Store, params: dict[str, Any]) -> None:
    """Apply the counting migration at the parent's `go`: by opening the store again with it, or with
    `Runner.up()` on the store already open. Prints the ids this worker's runner applied (None: by open)."""
    migration = counting_migration(params["id"], batch_size=params["batch_size"], delay=params["delay"])
    if not wait_for_go():
        return
    if params["via"] == "open":
        open_store(store.backend.url.raw, migrations=[migration], migrate="auto", **params["options"]).close()
        emit("migrated", {"applied": None})
    else:
        emit("migrated", {"applied": Runner(store.backend, [migration]).up()})


JOBS: dict[str, Callable[[Store, dict[str, Any]], None]] = {
    "increments": increments,
    "appends": appends,
    "upserts": upserts,
    "crash-writer": crash_writer,
    "searching-writer": searching_writer,
    "migrate": migrate,
}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in JOBS:
        sys.stderr.write(f"usage: workers.py {{{','.join(JOBS)}}} (spec as one JSON line on stdin)\n")
        return 2
    spec = json.loads(sys.stdin.readline())
    try:
        store = open_store(spec["url"], **spec["options"])
    except UnknownBackend as exc:
        emit("unknown-backend", {"error": str(exc)})
        return UNKNOWN_BACKEND_EXIT
    backend = type(store.backend)
    with store:
        emit("ready", {"backend": f"{backend.__module__}:{backend.__qualname__}", "mnemostore": mnemostore.__file__})
        JOBS[argv[0]](store, spec["params"])
    emit("done")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BrokenPipeError:  # the parent went away: nobody is listening
        sys.exit(1)
