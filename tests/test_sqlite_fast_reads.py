"""The sqlite hot reads (`Connections.one_read`'s lock-free path, `one_row`, `get` by id and a shape's
first record decoded straight): a busy statement is retried as before, any other error is a
BackendError, no connection is lost or kept by a closed pool, a read borrows the writer connection
only when no write has it (and neither waits for the other), and a read sees another store's writes."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import mnemostore
from mnemostore.backends.sqlite.connections import Connections, open_file
from mnemostore.core.errors import BackendError, StoreClosed

_SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _pool(path: Path) -> Connections:
    open_file(path, 5.0)
    return Connections(path, 5.0, "normal")


class _Flaky:
    """A read that fails with each of `errors` in turn (None: succeeds), then answers with its connection."""

    def __init__(self, errors: list[sqlite3.Error | None]) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self, conn: sqlite3.Connection) -> Any:
        self.calls += 1
        if self.errors:
            error = self.errors.pop(0)
            if error is not None:
                raise error
        return conn.execute("SELECT 42").fetchone()[0]


def _busy() -> sqlite3.OperationalError:
    error = sqlite3.OperationalError("database is locked")
    error.sqlite_errorcode = sqlite3.SQLITE_BUSY  # type: ignore[attr-defined]
    return error


def _broken() -> sqlite3.OperationalError:
    error = sqlite3.OperationalError("no such table: nowhere")
    error.sqlite_errorcode = sqlite3.SQLITE_ERROR  # type: ignore[attr-defined]
    return error


@_SETTINGS
@given(warm=st.booleans(), busy=st.integers(0, 3), then_broken=st.booleans())
def test_a_busy_read_is_retried_and_any_other_error_is_a_backend_error(
        tmp_path_factory: Any, warm: bool, busy: int, then_broken: bool) -> None:
    """With an idle connection (the lock-free path) or none, `busy` busy failures are retried until the
    statement runs; an error that is not busy fails at once as a BackendError. Either way the connection
    goes back to the pool: exactly one is idle after the call."""
    db = _pool(Path(tmp_path_factory.mktemp("pool")) / "x.db")
    try:
        if warm:
            db.one_read(lambda conn: None)  # leaves one connection idle
        work = _Flaky([_busy() for _ in range(busy)] + ([_broken()] if then_broken else []))
        if then_broken:
            try:
                db.one_read(work)
            except BackendError as exc:
                assert "no such table" in str(exc)
            else:
                raise AssertionError("a broken statement must fail")
        else:
            assert db.one_read(work) == 42
        assert work.calls == busy + 1
        assert len(db._idle) == 1
    finally:
        db.close()


def test_a_closed_pool_refuses_reads_and_keeps_no_connection(tmp_path: Path) -> None:
    db = _pool(tmp_path / "x.db")
    db.one_read(lambda conn: None)
    db.close()
    try:
        db.one_row("SELECT 1", ())
    except StoreClosed:
        pass
    else:
        raise AssertionError("a closed pool must refuse a read")
    assert db._idle == []


def test_a_read_racing_close_is_answered_or_refused_and_leaves_nothing_open(tmp_path: Path) -> None:
    """Threads read through the lock-free path while the pool closes: each read answers or raises
    StoreClosed/BackendError, and every connection the pool handed out is closed in the end."""
    db = _pool(tmp_path / "x.db")
    handed: list[sqlite3.Connection] = []
    lock = threading.Lock()

    def work(conn: sqlite3.Connection) -> int:
        with lock:
            handed.append(conn)
        return int(conn.execute("SELECT 1").fetchone()[0])

    failures: list[BaseException] = []

    def reader() -> None:
        for _ in range(300):
            try:
                db.one_read(work)
            except (StoreClosed, BackendError):
                return
            except BaseException as exc:  # pragma: no cover - the failure reported below
                failures.append(exc)
                return

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for thread in threads:
        thread.start()
    db.close()
    for thread in threads:
        thread.join()
    assert not failures
    for conn in handed:
        try:
            conn.execute("SELECT 1")
        except sqlite3.ProgrammingError:
            continue
        raise AssertionError("a connection of a closed pool is still open")


def _open(conn: sqlite3.Connection) -> bool:
    try:
        conn.execute("SELECT 1")
    except sqlite3.ProgrammingError:
        return False
    return True


class _Blocked:
    """A thread running `call(work)` whose work signals it started, then waits (at most `WAIT` s) to be
    released: `released` says whether that came in time (a call that waited on it would not be)."""

    WAIT = 20.0

    def __init__(self, call: Any) -> None:
        self.started, self.release = threading.Event(), threading.Event()
        self.released = False
        self.thread = threading.Thread(target=call, args=(self.work,))
        self.thread.start()
        assert self.started.wait(self.WAIT), "the blocked call never started"

    def work(self, conn: sqlite3.Connection) -> None:
        self.started.set()
        self.released = self.release.wait(self.WAIT)

    def end(self) -> None:
        self.release.set()
        self.thread.join(self.WAIT)


def test_a_read_after_a_write_runs_on_the_writer_connection_and_needs_no_pooled_one(tmp_path: Path) -> None:
    """With no write running, a read (one statement, or a snapshot of several) borrows the connection the
    writes use (its page cache is still valid after their commits) and gives it back: it sees the write, and
    no pooled connection is opened."""
    db = _pool(tmp_path / "x.db")
    try:
        db.one_write(lambda conn: conn.execute("CREATE TABLE t (x)").close())
        db.one_write(lambda conn: conn.execute("INSERT INTO t VALUES (7)").close())
        writer = db._writer
        assert writer is not None
        seen: list[sqlite3.Connection] = []

        def read(conn: sqlite3.Connection) -> Any:
            seen.append(conn)
            return conn.execute("SELECT x FROM t").fetchall()

        assert db.one_read(read) == [(7,)]
        assert db.read(read) == [(7,)]  # a snapshot of several statements borrows it too
        assert db.one_row("SELECT count(*) FROM t", ()) == (1,)
        assert seen == [writer, writer] and db._writer is writer and db._idle == []
    finally:
        db.close()
    assert not _open(writer)


def test_a_read_while_a_write_runs_takes_a_pooled_connection_without_waiting(tmp_path: Path) -> None:
    """A read that comes while another thread's write holds the writer connection does not wait for it:
    it runs on a pooled connection, on the snapshot before the write commits."""
    db = _pool(tmp_path / "x.db")
    try:
        db.one_write(lambda conn: conn.execute("CREATE TABLE t (x)").close())
        writer = db._writer

        def write(work: Any) -> None:
            db.write(lambda conn: (conn.execute("INSERT INTO t VALUES (1)").close(), work(conn)))

        blocked = _Blocked(write)
        try:
            seen: list[sqlite3.Connection] = []
            rows = db.one_read(lambda conn: (seen.append(conn), conn.execute("SELECT x FROM t").fetchall())[1])
            assert rows == [] and seen[0] is not writer
        finally:
            blocked.end()
        assert blocked.released  # the read did not wait for the write
        assert db._writer is writer and db.one_row("SELECT count(*) FROM t", ()) == (1,)
    finally:
        db.close()


def test_a_write_while_a_read_has_the_writer_connection_runs_on_another_and_none_is_lost(tmp_path: Path) -> None:
    """A write that comes while a read has borrowed the writer connection does not wait for the read: it
    takes a pooled connection. When the read ends every connection is the writer or idle, and closing
    the pool closes them all."""
    db = _pool(tmp_path / "x.db")
    try:
        db.one_write(lambda conn: conn.execute("CREATE TABLE t (x)").close())
        borrowed = db._writer
        assert borrowed is not None
        blocked = _Blocked(db.one_read)
        try:
            assert db._writer is None  # lent to the blocked read
            db.one_write(lambda conn: conn.execute("INSERT INTO t VALUES (1)").close())
        finally:
            blocked.end()
        assert blocked.released  # the write did not wait for the read
        kept = [conn for conn in [db._writer, *db._idle] if conn is not None]
        assert borrowed in kept and len(kept) == len({id(conn) for conn in kept}) == 2
        assert db.one_row("SELECT count(*) FROM t", ()) == (1,)
    finally:
        db.close()
    assert not any(_open(conn) for conn in kept)


@_SETTINGS
@given(steps=st.lists(st.tuples(st.integers(0, 1), st.sampled_from(["save", "root", "delete"]),
                                st.sampled_from(["main", "b"])), min_size=1, max_size=12))
def test_get_and_latest_see_the_other_stores_writes(tmp_path_factory: Any,
                                                     steps: list[tuple[int, str, str]]) -> None:
    """Two stores on one file write in turn; after each write both read every checkpoint by id and the
    run's latest (of the run and of each branch), and agree with a sorted query of the writer's."""
    path = Path(tmp_path_factory.mktemp("two")) / "store.db"
    with mnemostore.open(f"sqlite:///{path}") as one, mnemostore.open(f"sqlite:///{path}") as two:
        stores = (one, two)
        saved: dict[str, Any] = {}
        for index, (who, step, branch) in enumerate(steps):
            cps = stores[who].checkpoints
            if step == "delete":
                latest = cps.latest("run")
                if latest is not None:
                    cps.delete(latest.id)
                    saved[latest.id] = None
            else:
                written = cps.save("run", {"step": index}, branch=branch,
                                   **({"parent": None} if step == "root" else {}))
                saved[written.id] = written
            for store in stores:
                for id, record in saved.items():
                    assert store.checkpoints.get(id) == record
                for branch_of in (None, "main", "b"):
                    assert store.checkpoints.latest("run", branch_of) == _sorted_first(stores[who], branch_of)


def _sorted_first(store: Any, branch: str | None) -> Any:
    where = mnemostore.F.run_id == "run"
    if branch is not None:
        where = where & (mnemostore.F.branch_id == branch)
    found = store.checkpoints.query(where, order_by=["-sequence", "-created_at", "id"]).items
    return found[0] if found else None


_TEXT_OR_NOT = st.one_of(st.text(max_size=6), st.text(alphabet="ab\x00é", max_size=4), st.integers(), st.none(),
                         st.binary(max_size=3))


@_SETTINGS
@given(run_id=_TEXT_OR_NOT, branch=st.one_of(st.none(), _TEXT_OR_NOT))
@example(run_id="a\x00", branch=None)
@example(run_id="run", branch="b\x00")
@example(run_id="é", branch="main")
def test_latests_arguments_are_those_fetch_checks(tmp_path_factory: Any, run_id: Any, branch: Any) -> None:
    """`latest`'s backend arguments, made without `_fetch_args` for plain text, are what `_fetch_args`
    makes of the same values, or the same ValidationError (NUL, non-text)."""
    from mnemostore.core import async_checkpoints
    from mnemostore.core.errors import ValidationError

    assert not async_checkpoints.LATEST_OF_RUN.needs and not async_checkpoints.LATEST_ON_BRANCH.needs
    path = Path(tmp_path_factory.mktemp("args")) / "store.db"
    with mnemostore.open(f"sqlite:///{path}") as store:
        twin = store.checkpoints._async
        shape, values = ((async_checkpoints.LATEST_OF_RUN, {"run_id": run_id}) if branch is None else
                         (async_checkpoints.LATEST_ON_BRANCH, {"run_id": run_id, "branch_id": branch}))
        outcomes = []
        for make in (lambda: twin._latest_args(run_id, branch), lambda: twin._fetch_args(shape, values, 1, True)):
            try:
                outcomes.append(("ok", make()))
            except ValidationError as exc:
                outcomes.append(("error", str(exc)))
        assert outcomes[0] == outcomes[1]
