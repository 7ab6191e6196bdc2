"""Kept compression verdicts (`compression.Verdicts`): a stream of payloads is sampled once in `RESAMPLE`
per size class, every stored form still reads back exactly, a payload is stored compressed only when it
shrank `PAYS_AT`-fold, and a compressible stream keeps compressing."""

from __future__ import annotations

import random
import sqlite3
import uuid
from pathlib import Path
from typing import ClassVar

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.postgres_server import PostgresTestServer, postgres_server  # noqa: F401 (a fixture)

import mnemostore
from mnemostore import Record, register_kind
from mnemostore.core import compression
from mnemostore.core.compression import (
    COMPRESS_AT,
    PAYS_AT,
    RESAMPLE,
    Verdicts,
    deflate,
    inflate,
    is_compressed,
    pack_bare_payload,
    unpack_payload,
)
from mnemostore.core.kinds import kinds

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def repetitive(size: int, seed: int = 0) -> bytes:
    return (f"sentence {seed} said again; ".encode() * (size // 20 + 1))[:size]


def noise(size: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(size)


payloads = st.lists(st.tuples(st.sampled_from([repetitive, noise]), st.integers(0, 5 * COMPRESS_AT),
                              st.integers(0, 3)).map(lambda made: made[0](made[1], made[2])), max_size=40)


@settings(max_examples=40, deadline=None)
@given(payloads)
def test_every_payload_a_stream_stores_reads_back_and_is_compressed_only_when_it_shrank_enough(
        stream: list[bytes]) -> None:
    bare, documents = Verdicts(), Verdicts()
    for payload in stream:
        stored = pack_bare_payload(payload, bare)
        assert unpack_payload(stored) == payload
        if stored[:4] == ZSTD_MAGIC and payload[:4] != ZSTD_MAGIC:
            assert len(payload) >= PAYS_AT * len(stored)
        document = b"{" + payload
        kept = deflate(document, pays_at=PAYS_AT, verdicts=documents)
        assert inflate(kept) == document
        assert not is_compressed(kept) or len(document) >= PAYS_AT * len(kept)


@pytest.fixture
def samples(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the payloads `compression._pays` sampled, in order."""
    seen: list[int] = []
    sample = compression._pays

    def counted(compressor: object, data: bytes, pays_at: float) -> bool:
        seen.append(len(data))
        return sample(compressor, data, pays_at)

    monkeypatch.setattr(compression, "_pays", counted)
    return seen


def test_an_incompressible_stream_is_sampled_once_in_resample_payloads_per_size_class(samples: list[int]) -> None:
    verdicts = Verdicts()
    for seed in range(2 * RESAMPLE + 1):
        assert pack_bare_payload(noise(50_000, seed), verdicts) == noise(50_000, seed)
    assert samples == [50_000] * 3
    pack_bare_payload(noise(9_000), verdicts)  # another size class: its own verdict
    assert samples[-1] == 9_000
    for _ in range(3):  # without kept verdicts, every payload is sampled
        pack_bare_payload(noise(50_000))
    assert len(samples) == 7


def test_a_compressible_stream_keeps_compressing_and_one_that_turns_is_found_within_resample(
        samples: list[int]) -> None:
    verdicts = Verdicts()
    for seed in range(3 * RESAMPLE):  # a "pays" verdict is checked by each compressed size: no sample
        assert pack_bare_payload(repetitive(50_000, seed), verdicts)[:4] == ZSTD_MAGIC
    assert samples == [50_000]
    assert pack_bare_payload(noise(50_000), verdicts) == noise(50_000)  # did not shrink: stored plain
    turned = [pack_bare_payload(repetitive(50_000, seed), verdicts)[:4] == ZSTD_MAGIC
              for seed in range(RESAMPLE + 1)]
    assert turned[-1] and not turned[0]  # compressing again once the verdict is sampled afresh


def test_a_sqlite_store_keeps_its_verdicts_per_kind_and_reads_every_form_back(tmp_path: Path) -> None:
    rng = random.Random(3)
    words = ["".join(rng.choice("etaoinshrdlucmfwypvbgkjqxz") for _ in range(rng.randint(2, 9))) for _ in range(3000)]
    varied = [{"messages": [" ".join(rng.choice(words) for _ in range(45)) for _ in range(150)], "n": n}
              for n in range(RESAMPLE + 2)]
    repeated = {"messages": ["the same words said again " * 10] * 150, "n": -1}
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with mnemostore.open(url) as store:
        saved = [store.checkpoints.save("run", state, parent=None, payload=repetitive(40_000, n)).id
                 for n, state in enumerate(varied)]
        again = [store.checkpoints.save("run", repeated, parent=None).id for _ in range(RESAMPLE + 1)]
    with sqlite3.connect(tmp_path / "store.db") as conn:
        found = conn.execute("SELECT id, doc, payload FROM mnemo_checkpoint").fetchall()
    rows = {id: (doc, payload) for id, doc, payload in found}
    assert not any(is_compressed(rows[id][0]) for id in saved)  # varied text: plain
    assert all(rows[id][1][:4] == ZSTD_MAGIC for id in saved)  # its payloads, another stream, compress
    assert is_compressed(rows[again[-1]][0])  # the repeated state's documents compress again
    with mnemostore.open(url) as store:
        for n, id in enumerate(saved):
            found = store.checkpoints[id]
            assert found.state == varied[n] and found.payload == repetitive(40_000, n)
        assert all(store.checkpoints[id].state == repeated for id in again)


class Pair(Record):
    """An application's kind with two bytes fields: each its own column and its own verdicts."""

    kind: ClassVar[str] = "verdict_pair"
    first: bytes | None = None
    second: bytes | None = None


def test_a_kind_with_two_bytes_fields_keeps_a_verdict_for_each_and_reads_both_back(tmp_path: Path) -> None:
    register_kind(Pair)
    try:
        url = f"sqlite:///{tmp_path / 'store.db'}"
        made = [Pair(id=f"p{n}", first=noise(20_000, n), second=repetitive(20_000, n) if n % 3 else None)
                for n in range(RESAMPLE + 2)]
        with mnemostore.open(url) as store:
            store.collection(Pair).put(made)
        with sqlite3.connect(tmp_path / "store.db") as conn:
            stored = {id: (first, second) for id, first, second in
                      conn.execute('SELECT id, "first", "second" FROM mnemo_verdict_pair')}
        assert all(stored[p.id][0] == p.first for p in made)  # noise: bare
        assert all((stored[p.id][1] is None) == (p.second is None) for p in made)
        assert all(stored[p.id][1][:4] == ZSTD_MAGIC for p in made if p.second is not None)
        with mnemostore.open(url) as store:
            found = store.collection(Pair).get_many([p.id for p in made])
        assert [(p.first, p.second) for p in found] == [(p.first, p.second) for p in made]
    finally:
        kinds.unregister("verdict_pair")


def test_a_postgres_store_keeps_its_payload_verdicts_and_reads_every_form_back(
        postgres_server: PostgresTestServer, samples: list[int]) -> None:  # noqa: F811 (the fixture)
    """Postgres packs payloads with a format byte (`pack_payload`), now with kept verdicts too."""
    size = 100_000 + 2 * COMPRESS_AT  # a size class no other test writes
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with mnemostore.open(postgres_server.url(schema)) as store:
        plain = [store.checkpoints.save("run", {"n": n}, parent=None, payload=noise(size, n))
                 for n in range(2 * RESAMPLE + 1)]
        assert len(samples) <= 3  # once in RESAMPLE payloads, not once a save
        packed = [store.checkpoints.save("run", {"n": -n}, parent=None, payload=repetitive(size, n))
                  for n in range(RESAMPLE + 1)]
        with psycopg.connect(postgres_server.base_url) as conn:
            stored = dict(conn.execute(f'SELECT id, payload FROM "{schema}".mnemo_checkpoint').fetchall())
        assert all(stored[c.id][:1] == bytes((compression.PAYLOAD_PLAIN,)) for c in plain)
        assert stored[packed[-1].id][:1] == bytes((compression.PAYLOAD_ZSTD,))  # compressing again
        assert all(len(stored[c.id]) * PAYS_AT <= size for c in packed if stored[c.id][:1] == b"\x01")
        assert [store.checkpoints[c.id].payload for c in plain + packed] == [c.payload for c in plain + packed]
