"""The file, chroma and qdrant backends under the migration runner: pre-ledger stores adopted,
record migrations across tenants, tenants(), and each mode's migration lock."""

from __future__ import annotations

import json
import os
import shutil
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.chroma_server import ChromaTestServer, chroma_server
from tests.legacy_fixtures import with_new_defaults

import mnemostore
from mnemostore.core.calls import run_sync
from mnemostore.core.errors import LockHeld, PendingMigrations
from mnemostore.core.protocol import Backend
from mnemostore.core.records import KINDS
from mnemostore.core.store import open_backend
from mnemostore.migrations import Runner, rename_metadata_key
from mnemostore.migrations.ledger import Ledger, whoami
from mnemostore.migrations.locking import LOCK_KEY, LockInfo, MetaLock, MigrationLock, holding
from mnemostore.migrations.plan import library_migrations

__all__ = ["chroma_server"]

LEGACY = Path(__file__).parent / "fixtures" / "legacy" / "layout1"
QDRANT_SERVER = os.environ.get("MNEMOSTORE_TEST_QDRANT_URL")
RENAME = rename_metadata_key("app.0001_rename_team", "team", "squad")

LIBRARY = [m.id for m in library_migrations()]
"""mnemostore's own record migrations, in every store's history after the layout steps."""


def legacy_url(name: str, root: Path) -> str:
    return {"file": f"file://{root}", "chroma": f"chroma://{root}", "qdrant": f"qdrant://{root}"}[name]


@pytest.mark.parametrize("name", ["file", "chroma", "qdrant"])
def test_pre_ledger_store_opens_gets_a_ledger_and_reads_back(name: str, tmp_path: Path) -> None:
    expected = with_new_defaults(json.loads((LEGACY / "expected.json").read_text()))
    root = tmp_path / name
    shutil.copytree(LEGACY / name, root)
    url = legacy_url(name, root)
    for tenant in expected["tenants"]:
        with mnemostore.open(url, tenant=tenant) as store:
            ledger = Runner(store.backend).status()
            assert [(e.id, e.how) for e in ledger.applied] == [(id, "applied") for id in LIBRARY]
            assert {"dimension": store.params.dimension, "metric": store.params.metric} == expected["params"]
            found = [{"kind": kind, "record": r.model_dump(mode="json")}
                     for kind in KINDS for r in store.collection(kind).all()]
            wanted = [e for e in expected["records"] if e["record"]["tenant_id"] == tenant]
            key = lambda e: (e["kind"], e["record"]["id"])  # noqa: E731
            assert sorted(found, key=key) == sorted(wanted, key=key)
            assert sorted(store.backend.tenants("outcome"), key=lambda t: t or "") == [None, "acme"]
            assert store.backend.tenants("heuristic") == [None]


# embedded modes: a record migration through mnemostore.open ------------------------------
def embedded_urls(tmp_path: Path) -> dict[str, str]:
    return {
        "file": f"file://{tmp_path}/file",
        "chroma-dir": f"chroma://{tmp_path}/chroma",
        "chroma-memory": f"chroma://memory?prefix=m{uuid.uuid4().hex[:10]}_",
        "qdrant-dir": f"qdrant://{tmp_path}/qdrant",
        "qdrant-memory": f"qdrant://memory/{uuid.uuid4().hex}",
    }


EMBEDDED = ["file", "chroma-dir", "chroma-memory", "qdrant-dir", "qdrant-memory"]


def write_teams(url: str, metric: str = "dot") -> None:
    """Two tenants, records with and without vectors, all carrying metadata `team`."""
    for tenant, team in ((None, "core"), ("acme", "ops")):
        with mnemostore.open(url, tenant=tenant, dimension=3, metric=metric) as store:
            store.outcomes.put([
                dict(id="o1", task_type="t", success=True, metadata={"team": team, "n": 1}, embedding=[1.0, 2.0, 3.0]),
                dict(id="o2", task_type="t", success=False, metadata={"team": team}),
                dict(id="o3", task_type="t", success=False, metadata={"squad": "kept", "team": team}),
            ])
            store.heuristics.put([dict(id="h1", condition="c", strategy="s", metadata={"team": team},
                                       embedding=[0.5, -1.0, 2.0])])


def check_renamed(store: mnemostore.Store, team: str) -> None:
    outcomes = {r.id: r for r in store.outcomes.all()}
    assert outcomes["o1"].metadata == {"squad": team, "n": 1}
    assert outcomes["o1"].embedding is not None and outcomes["o1"].embedding.tolist() == [1.0, 2.0, 3.0]
    assert outcomes["o2"].metadata == {"squad": team}
    assert outcomes["o3"].metadata == {"squad": "kept", "team": team}  # `squad` was set: left alone
    [heuristic] = store.heuristics.all()
    assert heuristic.metadata == {"squad": team}
    assert heuristic.embedding is not None and heuristic.embedding.tolist() == [0.5, -1.0, 2.0]
    hits = store.outcomes.search([1.0, 2.0, 3.0], k=1)  # the index still answers with the store's metric
    assert [h.record.id for h in hits] == ["o1"] and hits[0].score == pytest.approx(14.0)


@pytest.mark.parametrize("mode", EMBEDDED)
def test_record_migration_applied_on_open_across_tenants(mode: str, tmp_path: Path) -> None:
    url = embedded_urls(tmp_path)[mode]
    write_teams(url)
    with mnemostore.open(url, migrations=[RENAME]) as store:
        assert sorted(store.backend.tenants("outcome"), key=lambda t: t or "") == [None, "acme"]
        assert [e.id for e in Runner(store.backend, [RENAME]).status().applied] == [*LIBRARY, RENAME.id]
        assert store.backend.read_meta("migration_progress") is None
        check_renamed(store, "core")
    with mnemostore.open(url, tenant="acme", migrations=[RENAME]) as store:
        check_renamed(store, "ops")
        assert Runner(store.backend, [RENAME]).down() == [RENAME.id]
        assert store.outcomes.get("o1").metadata == {"team": "ops", "n": 1}  # type: ignore[union-attr]


def test_private_qdrant_memory_store_migrates_through_its_backend() -> None:
    """`qdrant://memory` is private to one open: the runner works on that open's backend."""
    with mnemostore.open("qdrant://memory", tenant="acme", dimension=3) as store:
        store.outcomes.put([dict(id="o1", task_type="t", success=True, metadata={"team": "x"})])
        assert Runner(store.backend, [RENAME]).up() == [RENAME.id]
        assert store.outcomes.get("o1").metadata == {"squad": "x"}  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", EMBEDDED)
def test_tenants_leaves_out_emptied_tenants(mode: str, tmp_path: Path) -> None:
    url = embedded_urls(tmp_path)[mode]
    write_teams(url)
    with mnemostore.open(url, tenant="acme") as store:
        assert store.outcomes.delete(where={}) == 3
        backend = store.backend
        assert backend.tenants("outcome") == [None]
        assert sorted(backend.tenants("heuristic"), key=lambda t: t or "") == [None, "acme"]
        assert backend.tenants("checkpoint") == []
        if mode.startswith("qdrant"):  # the scroll a server without facets falls back to agrees
            for kind in ("outcome", "heuristic"):
                scrolled = run_sync(backend.operations.scrolled_tenant_values(  # type: ignore[attr-defined]
                    backend.layout.name(kind)))
                assert {v or None for v in scrolled} == set(backend.tenants(kind))


@pytest.mark.parametrize("mode", EMBEDDED)
def test_meta_none_reads_back_as_none(mode: str, tmp_path: Path) -> None:
    with mnemostore.open(embedded_urls(tmp_path)[mode]) as store:
        backend = store.backend
        backend.write_meta("probe", {"a": 1})
        backend.write_meta("probe", None)
        assert backend.read_meta("probe") is None
        backend.write_meta("never-set", None)
        assert backend.read_meta("never-set") is None


@pytest.mark.parametrize("mode", EMBEDDED)
def test_second_runner_gets_lock_held_naming_the_holder(mode: str, tmp_path: Path) -> None:
    url = embedded_urls(tmp_path)[mode]
    with mnemostore.open(url) as first, mnemostore.open(url) as second:
        runner = Runner(first.backend)
        other = Runner(second.backend, [RENAME], lock_wait=0.2)
        with holding(runner.lock, 1.0):
            with pytest.raises(LockHeld, match=whoami()):
                other.up()
            assert other.lock_holder() is not None
        assert other.up() == [RENAME.id]


def test_lock_kinds_per_mode(tmp_path: Path) -> None:
    urls = embedded_urls(tmp_path)
    with mnemostore.open(urls["file"]) as store:
        assert store.backend.migration_lock().path == tmp_path / "file" / "migrate.lock"  # type: ignore[attr-defined]
    with mnemostore.open(urls["chroma-dir"]) as store:
        assert store.backend.migration_lock().path == tmp_path / "chroma" / "mnemo_migrate.lock"  # type: ignore[attr-defined]
    with mnemostore.open(urls["qdrant-dir"]) as store:
        path = store.backend.migration_lock().path  # type: ignore[attr-defined]
        assert path == tmp_path / "qdrant" / "mnemostore_migrate.lock"
    with mnemostore.open("qdrant://memory") as one, mnemostore.open("qdrant://memory") as two:
        assert one.backend.migration_lock() is not two.backend.migration_lock()  # two private stores


def test_server_classes_do_not_migrate_on_open() -> None:
    from mnemostore.backends.chroma.backend import ChromaBackend, ChromaServerBackend
    from mnemostore.backends.file import FileBackend
    from mnemostore.backends.qdrant.backend import QdrantBackend, QdrantServerBackend

    assert not ChromaServerBackend.auto_migrate and not QdrantServerBackend.auto_migrate
    assert ChromaBackend.auto_migrate and QdrantBackend.auto_migrate and FileBackend.auto_migrate


# the Chroma server -------------------------------------------------------------------------
@pytest.fixture
def server_backends(chroma_server: ChromaTestServer) -> Iterator[tuple[str, Backend, Backend]]:
    url = chroma_server.url()
    mnemostore.open(url, dimension=3, metric="dot").close()  # fresh: initialised (empty ledger) even on a server
    one, two = open_backend(url), open_backend(url)
    yield url, one, two
    one.close()
    two.close()


def test_chroma_server_record_migration_through_the_runner(server_backends: tuple[str, Backend, Backend]) -> None:
    url, backend, _ = server_backends
    assert Ledger.read(backend).ids == LIBRARY  # mnemostore's own, recorded on a new store
    write_teams(url)
    with pytest.raises(PendingMigrations, match="mnemostore migrate up"):
        mnemostore.open(url, migrations=[RENAME])
    assert sorted(backend.tenants("outcome"), key=lambda t: t or "") == [None, "acme"]
    assert Runner(backend, [RENAME]).up() == [RENAME.id]
    for tenant, team in ((None, "core"), ("acme", "ops")):
        with mnemostore.open(url, tenant=tenant, migrations=[RENAME]) as store:
            check_renamed(store, team)


def test_chroma_server_lock_held_names_the_holder(server_backends: tuple[str, Backend, Backend]) -> None:
    _, one, two = server_backends
    runner = Runner(one)
    other = Runner(two, [RENAME], lock_wait=0.3)
    with holding(runner.lock, 1.0) as info:
        with pytest.raises(LockHeld, match=whoami()):
            other.up()
        holder = other.lock_holder()
        assert holder is not None and holder.token == info.token
        assert two.read_meta(LOCK_KEY)["token"] == info.token  # the lock row is a meta value
    assert other.lock_holder() is None and two.read_meta(LOCK_KEY) is None
    assert other.up() == [RENAME.id]


def race(locks: list[MigrationLock], infos: list[LockInfo]) -> list[bool]:
    """Every lock tries to take the lock at once, from its own thread; who succeeded."""
    won = [False] * len(locks)
    start = threading.Barrier(len(locks))

    def attempt(i: int) -> None:
        start.wait()
        won[i] = locks[i].try_acquire(infos[i])

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(len(locks))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return won


def test_chroma_server_lock_has_one_winner_among_racers(server_backends: tuple[str, Backend, Backend]) -> None:
    url, _, _ = server_backends
    backends = [open_backend(url) for _ in range(6)]
    try:
        for _ in range(3):
            locks = [b.migration_lock() for b in backends]
            infos = [LockInfo.mine(120.0) for _ in locks]
            won = race(locks, infos)
            assert won.count(True) == 1
            winner = won.index(True)
            assert all(lock.holder() == infos[winner] for lock in locks)
            locks[(winner + 1) % len(locks)].release(infos[(winner + 1) % len(locks)])  # not the holder: no-op
            assert locks[0].holder() == infos[winner]
            locks[winner].release(infos[winner])
            assert locks[0].holder() is None
    finally:
        for backend in backends:
            backend.close()


def test_chroma_server_lock_expiry_refresh_and_break(server_backends: tuple[str, Backend, Backend]) -> None:
    _, one, two = server_backends
    mine, theirs = one.migration_lock(), two.migration_lock()
    stale = LockInfo.mine(-1.0)  # a crashed holder's lock, already expired
    assert mine.try_acquire(stale)
    fresh = LockInfo.mine(120.0)
    assert theirs.try_acquire(fresh)  # takes the expired lock over
    with pytest.raises(LockHeld, match="taken over"):
        mine.refresh(stale)
    refreshed = theirs.refresh(fresh)
    assert refreshed.expires_at != fresh.expires_at and theirs.holder() == refreshed
    assert mine.force_release() == refreshed
    assert theirs.holder() is None


@pytest.mark.parametrize("leftover", ["none", "metalock"])
def test_chroma_server_lock_takes_over_rows_it_did_not_write(
        leftover: str, server_backends: tuple[str, Backend, Backend]) -> None:
    """A None-valued row, or an expired MetaLock record (no token metadata), does not block the lock."""
    _, one, _ = server_backends
    meta: Any = one._meta  # type: ignore[attr-defined]
    import numpy as np

    document = "null" if leftover == "none" else json.dumps(LockInfo.mine(-1.0).__dict__)
    meta.upsert(ids=[LOCK_KEY], embeddings=np.ones((1, 1), dtype=np.float32), documents=[document])
    lock = one.migration_lock()
    info = LockInfo.mine(120.0)
    assert lock.try_acquire(info) and lock.holder() == info
    lock.release(info)


def test_chroma_server_meta_none_reads_back_as_none(server_backends: tuple[str, Backend, Backend]) -> None:
    _, one, two = server_backends
    one.write_meta("probe", [1, 2])
    assert two.read_meta("probe") == [1, 2]
    one.write_meta("probe", None)
    assert two.read_meta("probe") is None


# a Qdrant server, when one is configured ----------------------------------------------------
@pytest.mark.skipif(QDRANT_SERVER is None, reason="set MNEMOSTORE_TEST_QDRANT_URL=qdrant+http://host:6333 to run")
def test_qdrant_server_runner_and_meta_lock() -> None:
    assert QDRANT_SERVER is not None
    url = f"{QDRANT_SERVER}{'&' if '?' in QDRANT_SERVER else '?'}prefix=t{uuid.uuid4().hex[:12]}_"
    write_teams(url)
    with pytest.raises(PendingMigrations):
        mnemostore.open(url, migrations=[RENAME])
    one, two = open_backend(url), open_backend(url)
    try:
        assert isinstance(one.migration_lock(), MetaLock)
        assert sorted(one.tenants("outcome"), key=lambda t: t or "") == [None, "acme"]
        with holding(Runner(one).lock, 1.0), pytest.raises(LockHeld, match=whoami()):
            Runner(two, [RENAME], lock_wait=0.3).up()
        assert one.read_meta(LOCK_KEY) is None
        assert Runner(two, [RENAME]).up() == [RENAME.id]
        for tenant, team in ((None, "core"), ("acme", "ops")):
            with mnemostore.open(url, tenant=tenant, migrations=[RENAME]) as store:
                check_renamed(store, team)
    finally:
        one.close()
        two.close()
