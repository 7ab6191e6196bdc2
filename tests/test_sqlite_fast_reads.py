"""The sqlite hot reads (`Connections.one_read`'s lock-free path, `one_row`, `get` by id and a shape's
first record decoded straight): a busy statement is retried as before, any other error is a
BackendError, no connection is lost or kept by a closed pool, and a read sees another store's writes."""

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

    assert not async_checkpoints._LATEST_OF_RUN.needs and not async_checkpoints._LATEST_ON_BRANCH.needs
    path = Path(tmp_path_factory.mktemp("args")) / "store.db"
    with mnemostore.open(f"sqlite:///{path}") as store:
        twin = store.checkpoints._async
        shape, values = ((async_checkpoints._LATEST_OF_RUN, {"run_id": run_id}) if branch is None else
                         (async_checkpoints._LATEST_ON_BRANCH, {"run_id": run_id, "branch_id": branch}))
        outcomes = []
        for make in (lambda: twin._latest_args(run_id, branch), lambda: twin._fetch_args(shape, values, 1, True)):
            try:
                outcomes.append(("ok", make()))
            except ValidationError as exc:
                outcomes.append(("error", str(exc)))
        assert outcomes[0] == outcomes[1]
