"""A write of the vector store that rewrites segments (a removal, small segments merged, a
reseal) reads their vectors a chunk at a time as the new file is written (issue 34, item
4: what a hook starts runs in bounded memory): it never holds a segment's vectors at once,
and what it writes opens to the same ids, digests, flags, files, sign codes, scales and
int8 values, byte for byte. A source chunk that fails authentication half way leaves the
store as it was, and no partial file."""

from __future__ import annotations

import os
import tracemalloc
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memvault.embed.base import ModelId
from memvault.index import vectors as vec
from memvault.index.base import IndexUnavailable
from memvault.index.vectors import VectorItem, VectorStore
from memvault.storage import fsio
from tests.test_vectors import read_store

OWNER = "o/u"
DEK = b"k" * 32


def unit(rng: np.random.Generator, n: int, dims: int) -> Any:
    v = rng.standard_normal((n, dims)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def items(prefix: str, rows: Any, archived_every: int = 0) -> list[VectorItem]:
    return [VectorItem(f"{prefix}{i:05d}", os.urandom(8),
                       bool(archived_every) and i % archived_every == 0, rows[i],
                       f"sessions/{prefix}{i % 3}.jsonl") for i in range(len(rows))]


def opened(store: VectorStore) -> dict[str, dict[str, Any]]:
    """What each stored vector opens to (docs/vault-format.md's reader), without where it
    is held (segment, frame) or the chunk's other scales."""
    return {i: {k: v for k, v in row.items() if k not in ("segment", "frame", "scales",
                                                            "vector")}
            for i, row in read_store(store.dir, DEK, OWNER).items()}


@pytest.fixture
def store(tmp_path: Path) -> VectorStore:
    vec._CACHE.forget(str(tmp_path / "vectors"))
    return VectorStore(tmp_path / "vectors", _vector_key(), 1, owner=OWNER)


def _vector_key() -> bytes:
    from tests.test_vectors import _hkdf

    return _hkdf(DEK, "mem/v1/vectors")


def peak_of(work: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        work()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_rewrite_never_holds_a_segments_vectors(store: VectorStore) -> None:
    # A model of 1,024 dimensions (an endpoint's): a full segment's int8 vectors are 16 MB.
    model = ModelId("endpoint", "wide", 1024)
    n = vec.SEGMENT_MAX
    store.add(model, items("a", unit(np.random.default_rng(1), n, 1024)))
    vectors_bytes = n * 1024
    vec._CACHE.forget(str(store.dir))
    # Holding them took five times their size (read, cut, copied, sealed, joined); a
    # chunk at a time, what is left is the segment's meta block (ids, codes) a few times.
    assert peak_of(lambda: store.remove(["a00007"])) < 2 * vectors_bytes
    vec._CACHE.forget(str(store.dir))
    assert peak_of(lambda: store.reseal(b"j" * 32, 2)) < 2 * vectors_bytes
    assert store.count() == n - 1 and store.verify() == []


def test_small_segments_merge_a_chunk_at_a_time(store: VectorStore,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    model = ModelId("endpoint", "wide", 1024)
    rng = np.random.default_rng(2)
    monkeypatch.setattr(vec, "SMALL", 2048)
    per = vec.SMALL - 1  # each just small: the eighth add merges them all
    for s in range(vec.MERGE_AT - 1):
        store.add(model, items(f"s{s}-", unit(rng, per, 1024)))
    vec._CACHE.forget(str(store.dir))
    merged = (vec.MERGE_AT - 1) * per + 10
    last = items("t-", unit(rng, 10, 1024))
    assert peak_of(lambda: store.add(model, last)) < 2 * merged * 1024
    assert [s["count"] for s in store._manifest()["segments"]] == [merged]


def test_what_a_rewrite_writes_opens_to_what_was_stored(store: VectorStore,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    model = ModelId("test", "random", 48)
    rng = np.random.default_rng(3)
    monkeypatch.setattr(vec, "SMALL", 150)
    monkeypatch.setattr(vec, "MERGE_AT", 4)
    # Segments whose sizes are not whole chunks (64): a merge re-cuts their chunks.
    for s, size in enumerate((100, 37, 129)):
        store.add(model, items(f"s{s}-", unit(rng, size, 48), archived_every=7))
    before = opened(store)
    assert len(store._manifest()["segments"]) == 3
    store.add(model, items("t-", unit(rng, 5, 48)))  # the fourth small one: all merged
    (merged,) = store._manifest()["segments"]
    after = opened(store)
    assert {i: after[i] for i in before} == before and merged["count"] == 271
    store.remove([i for i in list(after)[::5]])  # survivors written again
    kept = opened(store)
    assert kept == {i: after[i] for i in after if i not in list(after)[::5]}
    assert store.verify() == []
    # A reseal opens to the same under its new key (read_store derives it from the DEK).
    store.reseal(store.key, 2)
    assert opened(store) == kept


def test_a_source_that_fails_half_way_leaves_the_store_as_it_was(
        store: VectorStore) -> None:
    model = ModelId("test", "random", 48)
    rng = np.random.default_rng(4)
    store.add(model, items("a", unit(rng, 300, 48)))
    before = opened(store)
    manifest = store.manifest_path.read_bytes()
    (seg,) = store._manifest()["segments"]
    path = store.dir / f"{seg['name']}.seg"
    raw = bytearray(path.read_bytes())
    raw[-40] ^= 1  # the last chunk's ciphertext: the first chunks are written first
    path.write_bytes(bytes(raw))
    vec._CACHE.forget(str(store.dir))
    with pytest.raises(IndexUnavailable):
        store.remove(["a00003"])
    assert store.manifest_path.read_bytes() == manifest
    assert not fsio.stale_temps(store.dir)
    assert [p.name for p in store.dir.iterdir() if p.suffix == ".seg"] == [path.name]
    path.write_bytes(bytes(raw[:-40]) + bytes([raw[-40] ^ 1]) + bytes(raw[-39:]))
    assert opened(store) == before


def test_the_ids_held_take_their_bytes_and_answer_as_a_set(store: VectorStore) -> None:
    """What a scheduled mem embed keeps to tell what waits: the stored ids in one sorted
    array (36 bytes an id), no meta block kept; a set of them and every meta block cached
    took about 160 bytes an id."""
    model = ModelId("test", "random", 32)
    n = 20_000
    ids = [str(uuid.uuid4()) for _ in range(n)]
    rows = unit(np.random.default_rng(5), n, 32)
    store.add(model, [VectorItem(i, b"d" * 8, False, rows[k], "f") for k, i in enumerate(ids)])
    vec._CACHE.forget(str(store.dir))
    tracemalloc.start()
    try:
        held = store.ids()
        kept = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert kept < 48 * n, kept
    encoded = [i.encode() for i in ids]
    assert len(held) == n and set(held) == set(encoded)
    assert all(i in held for i in encoded[::97])
    other = str(uuid.uuid4()).encode()
    for absent in (other, encoded[0] + b"x", encoded[0][:-1], encoded[0] + b"\0", b"",
                   ids[0]):
        assert absent not in held
    assert set(encoded[:1000]) <= held and not set(encoded[:1000]) | {other} <= held
    assert set() <= held and held & {encoded[5], other} == {encoded[5]}
    empty = VectorStore(store.dir.parent / "none", store.key, 1, owner=OWNER).ids()
    assert len(empty) == 0 and encoded[0] not in empty and not {encoded[0]} <= empty


def resident(array: Any) -> int:
    """Bytes in memory of the mappings that hold `array` (/proc/self/smaps: a mapping
    given huge pages in part is split in several)."""
    start = array.__array_interface__["data"][0]
    end = start + array.nbytes
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                low, high = (int(x, 16) for x in head.split("-"))
                inside = low < end and start < high
            elif inside and head == "Rss:":
                total += int(line.split()[1]) * 1024
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="reads /proc")
def test_a_cold_search_holds_the_chunks_it_read_not_the_store(store: VectorStore) -> None:
    """The array a search decrypts chunks into takes memory for the chunks written, not
    for the store: numpy asked for huge pages, and a thousand chunks spread over the store
    made all of it resident. The meta blocks are let go once the search's columns are
    copied out of them."""
    model = ModelId("test", "random", 64)
    n = 160_000
    rows = unit(np.random.default_rng(6), n, 64)
    for lo in range(0, n, vec.SEGMENT_MAX):
        store.add(model, items(f"b{lo}-", rows[lo:lo + vec.SEGMENT_MAX]))
    vec._CACHE.forget(str(store.dir))
    tracemalloc.start()
    try:
        hits = store.search(rows[123], 10)
        kept = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert hits[0].memory_id == "b0-00123"
    # What it keeps for the next search: the ids, sign codes and flags side by side and
    # the pass's buffers (about 40 bytes a vector here), not every meta block as well nor
    # an array of every vector (130).
    assert kept < 64 * n, kept / n
    view = vec._CACHE.views[str(store.dir)][1]
    read = int(view.loaded.sum())
    assert 0 < read < len(view.loaded) // 2  # a part of the store was read
    # Each chunk read (64 rows of 64 bytes) touches at most two pages of 4 KiB.
    assert resident(view.dense) <= read * 2 * 4096, (resident(view.dense), read)
