"""Archives: export to JSON lines (.gz by name), import verified against the footer, and a
damaged, truncated or edited archive refused before the destination is touched."""

from __future__ import annotations

import base64
import gzip
from pathlib import Path

import numpy as np
import orjson
import pytest
from tests.copy_data import DIMENSION, Interrupted, StopAfter, assert_same_stores, checksums, fill, params_of, snapshot

import mnemostore
from mnemostore.core.errors import MigrationError, SchemaMismatch
from mnemostore.core.store import open_backend
from mnemostore.migrations.archive import check_archive, export_archive, import_archive
from mnemostore.migrations.copying import copy
from mnemostore.migrations.destination import COPY_PROGRESS_KEY

SOURCE = "memory://archive-source"


@pytest.fixture(scope="module")
def source() -> str:
    fill(SOURCE)
    return SOURCE


@pytest.fixture
def archive(source: str, tmp_path: Path) -> Path:
    path = tmp_path / "store.jsonl"
    export_archive(source, path)
    return path


def lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines()


def write_lines(path: Path, items: list[bytes]) -> Path:
    path.write_bytes(b"\n".join(items) + b"\n")
    return path


def untouched(url: str) -> bool:
    backend = open_backend(url)
    try:
        return backend.read_meta(COPY_PROGRESS_KEY) is None
    finally:
        backend.close()


@pytest.mark.parametrize("name", ["store.jsonl", "store.jsonl.gz"])
def test_round_trip_keeps_every_record(source: str, name: str, tmp_path: Path) -> None:
    path = tmp_path / name
    exported = export_archive(source, path)
    destination = f"sqlite:///{tmp_path / 'imported.db'}"
    imported = import_archive(path, destination, batch_size=6)
    assert_same_stores(source, destination)
    assert params_of(destination) == params_of(source)
    assert {k: (r.count, r.checksum) for k, r in exported.kinds.items()} == \
        {k: (r.count, r.checksum) for k, r in imported.kinds.items()} == checksums(source)
    assert imported.copied == imported.count == exported.count >= 100
    assert not list(tmp_path.glob("*.partial"))
    if name.endswith(".gz"):
        assert path.read_bytes()[:2] == b"\x1f\x8b"
        assert gzip.decompress(path.read_bytes()).count(b"\n") == exported.count + 2


def test_the_format_header_records_footer(source: str, archive: Path) -> None:
    header, *records, footer = (orjson.loads(line) for line in lines(archive))
    assert header["format"] == "mnemostore-archive" and header["version"] == 1
    assert header["params"] == {"dimension": DIMENSION, "metric": "cosine", "embedding_model": None}
    assert header["source"] == source and header["created_at"].endswith("+00:00")
    assert list(footer) == ["footer"] and set(footer["footer"]) == {"counts", "checksums"}
    assert sum(footer["footer"]["counts"].values()) == len(records)
    kinds = [item["kind"] for item in records]
    assert kinds == sorted(kinds, key=list(mnemostore.KINDS).index)
    with mnemostore.open(source) as store:
        for item in records:
            if item["record"]["tenant_id"] is None and item["record"]["embedding"] is not None:
                original = store.collection(item["kind"]).get(item["record"]["id"])
                vector = np.frombuffer(base64.b64decode(item["record"]["embedding"]), dtype="<f4")
                assert np.array_equal(vector, original.embedding)
                assert item["record"]["created_at"] == original.created_at.isoformat()
                break
        else:
            pytest.fail("no record with an embedding")


def test_a_password_in_the_source_url_is_masked(tmp_path: Path) -> None:
    url = "memory://agent:s3cret@archive-masked"
    with mnemostore.open(url) as store:
        store.outcomes.add(task_type="t", success=True)
    path = tmp_path / "masked.jsonl"
    report = export_archive(url, path)
    assert b"s3cret" not in path.read_bytes() and "s3cret" not in str(report.to_json())
    assert orjson.loads(lines(path)[0])["source"] == "memory://agent:***@archive-masked"


@pytest.mark.parametrize(("damage", "message"), [
    (lambda ls: ls[:-1], "ends without its footer line"),
    (lambda ls: ls[:-10], "ends without its footer line"),
    (lambda ls: [*ls[:5], ls[5][: len(ls[5]) // 2], *ls[6:]], "line 6: not valid JSON"),
    (lambda ls: [ls[0], *ls[2:]], "do not match the footer"),
    (lambda ls: [ls[0], ls[2], ls[1], *ls[3:]], "out of order"),
    (lambda ls: [*ls, ls[1]], "lines after the footer"),
    (lambda ls: [ls[0], ls[1].replace(b'"success":', b'"success":"maybe","x":'), *ls[2:]], "line 2: invalid outcome"),
    (lambda ls: [ls[0], ls[1].replace(b'"agent":"', b'"agent":"edited '), *ls[2:]], "do not match the footer"),
    (lambda ls: [ls[0].replace(b'"version":1', b'"version":7'), *ls[1:]], "format version 7"),
    (lambda ls: [b'{"hello": 1}', *ls[1:]], "is not a mnemostore archive"),
])
def test_a_damaged_archive_is_refused_and_the_destination_keeps_everything(
        archive: Path, tmp_path: Path, damage: object, message: str) -> None:
    damaged = write_lines(tmp_path / "damaged.jsonl", damage(lines(archive)))  # type: ignore[operator]
    destination = f"sqlite:///{tmp_path / 'dest.db'}"
    with mnemostore.open(destination) as store:
        store.outcomes.add(task_type="kept", success=True, id="kept")
    with pytest.raises(MigrationError, match=message):
        import_archive(damaged, destination, overwrite=True)
    with mnemostore.open(destination) as store:
        assert [r.id for r in store.outcomes.all()] == ["kept"]
    assert untouched(destination)


def test_an_embedding_of_the_wrong_size_or_not_finite_is_refused(archive: Path, tmp_path: Path) -> None:
    items = lines(archive)
    index = next(i for i, line in enumerate(items) if b'"embedding":"' in line)
    item = orjson.loads(items[index])
    for bad, message in ((np.ones(3, dtype="<f4"), "3-dimensional"),
                         (np.full(DIMENSION, np.nan, dtype="<f4"), "finite")):
        item["record"]["embedding"] = base64.b64encode(bad.tobytes()).decode()
        damaged = write_lines(tmp_path / "vector.jsonl", [*items[:index], orjson.dumps(item), *items[index + 1:]])
        with pytest.raises(MigrationError, match=message):
            check_archive(damaged)


def test_a_truncated_gzip_archive_is_refused(source: str, tmp_path: Path) -> None:
    path = tmp_path / "cut.jsonl.gz"
    export_archive(source, path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    destination = "memory://archive-cut"
    with pytest.raises(MigrationError, match="damaged or truncated"):
        import_archive(path, destination)
    assert all(not records for records in snapshot(destination).values())


def test_export_does_not_replace_a_file_unless_asked(source: str, archive: Path) -> None:
    before = archive.read_bytes()
    with pytest.raises(MigrationError, match="exists"):
        export_archive(source, archive)
    assert archive.read_bytes() == before
    export_archive(source, archive, overwrite=True, kinds=["heuristic"])
    assert orjson.loads(lines(archive)[0])["kinds"] == ["heuristic"]


@pytest.mark.parametrize("name", ["half.jsonl", "half.jsonl.gz"])
def test_an_interrupted_export_leaves_no_archive(source: str, tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    with pytest.raises(Interrupted):
        export_archive(source, path, batch_size=5, progress=StopAfter(3))
    assert not path.exists() and not list(tmp_path.iterdir())


def test_an_interrupted_import_resumes(source: str, archive: Path, tmp_path: Path) -> None:
    destination = f"file://{tmp_path / 'resumed'}"
    with pytest.raises(Interrupted):
        import_archive(archive, destination, batch_size=5, progress=StopAfter(8))
    report = import_archive(archive, destination, batch_size=5)
    assert report.resumed and 0 < report.copied < report.count
    assert checksums(destination) == checksums(source)
    assert untouched(destination)


def test_import_refuses_a_destination_with_other_params(archive: Path, tmp_path: Path) -> None:
    destination = f"sqlite:///{tmp_path / 'other.db'}"
    with mnemostore.open(destination, dimension=DIMENSION + 1):
        pass
    with pytest.raises(SchemaMismatch, match="cannot copy into"):
        import_archive(archive, destination)


def test_archive_and_copy_agree(source: str, archive: Path, tmp_path: Path) -> None:
    copied = copy(source, f"sqlite:///{tmp_path / 'copied.db'}")
    info = check_archive(archive)
    assert info.checksums == {k: r.checksum for k, r in copied.kinds.items()}
    assert info.counts == {k: r.count for k, r in copied.kinds.items()}
