"""The memo of inflated zstd frames (`compression.Inflated`): a read gives exactly what inflating the stored
frame gives, whatever was kept, evicted or collided; it stays within its bounds; it keeps nothing mutable;
a read of what a write just compressed does not inflate; a read keeps a frame the second time it misses it, so
a scan of frames read once leaves the memo as it was."""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.forks import forked_exit_code, held_by_another_thread

from mnemostore.core import compression
from mnemostore.core.compression import (
    COMPRESS_AT,
    Inflated,
    Verdicts,
    deflate,
    inflate,
    pack_bare_payload,
    pack_payload,
    unpack_payload,
)


def repetitive(size: int, seed: int) -> bytes:
    """Text that shrinks far more than `MEMO_RATIO`-fold; equal sizes of different seeds differ."""
    return (f"sentence {seed:04d} said again; ".encode() * (size // 26 + 1))[:size]


def varied(size: int, seed: int) -> bytes:
    """Bytes that shrink about 2x: below `MEMO_RATIO`."""
    rng = random.Random(seed)
    return bytes(rng.choice(b"abcdefghijklmnop") for _ in range(size))


@pytest.fixture(autouse=True)
def small_memo(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A memo of 3 entries and 128 KB (one value at most 8 KB), empty: evictions happen within a test."""
    monkeypatch.setattr(compression, "MEMO_ENTRIES", 3)
    monkeypatch.setattr(compression, "MEMO_BYTES", 128 << 10)
    compression.INFLATED.clear()
    yield
    compression.INFLATED.clear()


def zstd_frame(data: bytes) -> bytes:
    """A frame made outside mnemostore (another writer, an older process): never kept by a write."""
    return zstandard.ZstdCompressor(level=3).compress(data)


payload = st.tuples(st.sampled_from([repetitive, varied]), st.sampled_from([COMPRESS_AT, COMPRESS_AT + 512]),
                    st.integers(0, 7)).map(lambda made: made[0](made[1], made[2]))
steps = st.lists(st.tuples(st.sampled_from(["bare", "prefixed", "document", "outside"]), payload,
                           st.integers(0, 100)), min_size=1, max_size=30)


@settings(max_examples=60, deadline=None)
@given(steps)
def test_every_read_gives_exactly_what_inflating_its_frame_gives(script: list[tuple[str, bytes, int]]) -> None:
    """Payloads of equal lengths (many frames of one length) written in every form, each read back at once
    and later in random order, while the memo keeps, evicts and refills: every read equals its bytes."""
    stored: list[tuple[str, bytes, bytes]] = []
    verdicts = Verdicts()
    for form, data, pick in script:
        if form == "bare":
            kept = pack_bare_payload(data, verdicts)
        elif form == "prefixed":
            kept = pack_payload(data)
        elif form == "document":
            data = b'{"v":"' + data + b'"}'
            kept = deflate(data)
        else:
            kept = zstd_frame(data)
        stored.append((form, kept, data))
        for read_form, read_stored, read_data in (stored[-1], stored[pick % len(stored)]):
            read = inflate(read_stored) if read_form in ("document", "outside") else unpack_payload(read_stored)
            assert read == read_data
            assert type(read) is bytes
            memo = compression.INFLATED
            assert len(memo.kept) <= 3
            assert sum(map(len, memo.kept.values())) <= 128 << 10


class Colliding(bytes):
    """A frame whose hash equals every other's: the memo must tell keys apart by their bytes."""

    def __hash__(self) -> int:
        return 7


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 50), min_size=2, max_size=12, unique=True), st.data())
def test_a_frame_never_gets_another_frames_bytes_even_when_their_hashes_collide(seeds: list[int],
                                                                                  data: st.DataObject) -> None:
    memo = Inflated()
    frames = {seed: Colliding(zstd_frame(repetitive(COMPRESS_AT, seed))) for seed in seeds}
    assert len({len(frame) for frame in frames.values()}) == 1  # equal lengths, equal hashes
    kept = data.draw(st.lists(st.sampled_from(seeds), max_size=len(seeds)))
    for seed in kept:
        memo.keep(frames[seed], repetitive(COMPRESS_AT, seed))
    for seed in seeds:
        found = memo.kept.get(frames[seed])
        assert found is None or found == repetitive(COMPRESS_AT, seed)
    if kept:
        assert memo.kept.get(frames[kept[-1]]) == repetitive(COMPRESS_AT, kept[-1])


def test_the_memo_keeps_only_frames_that_inflate_many_times_their_size_within_its_bounds() -> None:
    memo = compression.INFLATED
    low = varied(COMPRESS_AT * 2, 1)
    memo.keep(zstd_frame(low), low)
    assert not memo.kept  # shrank less than MEMO_RATIO-fold
    huge = repetitive((128 << 10) // 16 + 1, 1)
    memo.keep(zstd_frame(huge), huge)
    assert not memo.kept  # larger than one value may be
    for seed in range(10):
        data = repetitive(4096, seed)
        memo.keep(zstd_frame(data), data)
        assert len(memo.kept) <= 3
    assert list(memo.kept.values()) == [repetitive(4096, seed) for seed in (7, 8, 9)]  # the oldest went first


def test_mutable_bytes_are_never_kept() -> None:
    """A bytearray changed after its write must not change what its frame reads back as."""
    data = bytearray(repetitive(COMPRESS_AT * 2, 3))
    frame = zstd_frame(bytes(data))
    compression.INFLATED.keep(frame, data)  # type: ignore[arg-type]
    data[:8] = b"XXXXXXXX"
    assert inflate(frame) == repetitive(COMPRESS_AT * 2, 3)


def test_a_read_of_what_a_write_just_compressed_does_not_inflate(monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent's loop: it writes a checkpoint and reads it back; the read finds the write's bytes."""
    data = repetitive(COMPRESS_AT + 1000, 5)
    stored, document = pack_bare_payload(data), deflate(b'{"v":"' + data + b'"}')

    class NoInflating:
        def decompress(self, frame: Any) -> bytes:
            raise AssertionError("inflated again")

    monkeypatch.setattr(compression, "_codecs", lambda: (zstandard.ZstdCompressor(), NoInflating()))
    assert unpack_payload(stored) == data
    assert inflate(document) == b'{"v":"' + data + b'"}'


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=1, max_size=25))
def test_a_read_keeps_a_frame_the_second_time_it_inflates_it(reads: list[int]) -> None:
    """Frames made outside mnemostore, read in any order (a memo that evicts nothing here): each is inflated by
    its first two reads alone and kept from its second; a frame read once is not kept, and the frame a write
    kept stays."""
    bounds = compression.MEMO_ENTRIES, compression.MEMO_BYTES
    compression.MEMO_ENTRIES, compression.MEMO_BYTES = 64, 1 << 20
    compression.INFLATED.clear()
    written = repetitive(COMPRESS_AT + 100, 99)
    frames = {seed: zstd_frame(repetitive(COMPRESS_AT, seed)) for seed in set(reads)}
    inflated: list[int] = []
    real = compression._codecs

    class Counting:
        def decompress(self, frame: Any) -> bytes:
            inflated.append(next(seed for seed, made in frames.items() if made == frame))
            return real()[1].decompress(frame)  # type: ignore[no-any-return]

    try:
        assert inflate(deflate(written)) == written  # kept by the write
        compression._codecs = lambda: (real()[0], Counting())  # type: ignore[assignment]
        for seed in reads:
            assert inflate(frames[seed]) == repetitive(COMPRESS_AT, seed)
        kept = list(compression.INFLATED.kept.values())
    finally:
        compression._codecs = real  # type: ignore[assignment]
        compression.MEMO_ENTRIES, compression.MEMO_BYTES = bounds
        compression.INFLATED.clear()
    assert kept[0] == written
    for seed in frames:
        assert inflated.count(seed) == min(2, reads.count(seed))
        assert (repetitive(COMPRESS_AT, seed) in kept) == (reads.count(seed) >= 2)


def test_threads_sharing_the_memo_read_exactly() -> None:
    frames = [(zstd_frame(repetitive(COMPRESS_AT, seed)), repetitive(COMPRESS_AT, seed)) for seed in range(8)]
    wrong: list[int] = []

    def reader(offset: int) -> None:
        for i in range(400):
            frame, data = frames[(i * (offset + 1)) % len(frames)]
            if inflate(frame) != data:
                wrong.append(i)

    threads = [threading.Thread(target=reader, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not wrong
    assert len(compression.INFLATED.kept) <= 3


def _keep_in_child(data: bytes) -> None:
    """In a forked child: keeping a frame takes the memo's lock; exit 0 if it was kept and reads back."""
    os._exit(0 if inflate(deflate(data)) == data and compression.INFLATED.kept else 1)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_keeps_frames_though_a_parent_thread_held_the_memos_lock() -> None:
    """A fork while another thread holds the memo's lock leaves it held in the child: the child renews it."""
    with held_by_another_thread(compression.INFLATED._lock):  # as a thread keeping a frame at the fork
        assert forked_exit_code(_keep_in_child, (repetitive(COMPRESS_AT, 7),)) == 0
