"""The sealed vector store: one user's embeddings, derived like the index, sealed like
the records (a vector can be inverted back to text).

    <user>/vectors/manifest        sealed: model, epoch, segments and their counts
    <user>/vectors/<name>.seg      an immutable segment: the ids' keys (which segment
                                   holds an id), a sealed meta block (ids, digests,
                                   flags, files, 1-bit sign codes), then sealed chunks
                                   of CHUNK int8 vectors with their scales
    <user>/vectors/stamp           present while the store matches the vault

Every frame is AES-256-GCM (crypto/envelope.py) with associated data naming the user,
the epoch, the segment, the frame's position and the frame count: a frame moved, replayed
from another segment or cut off does not open. Segments are never changed in place: an
add writes a new one, a removal writes the survivors to a new one, and the manifest
(atomically replaced) says which exist; what a killed writer left is removed by the next.
A segment written from others (survivors, small ones merged, a reseal) is written from
their chunks read one at a time as its frames are sealed: a write holds a chunk of
vectors and meta blocks, never a segment's vectors, whatever the store's size.
A search reads the manifest, decrypts every meta block once (its ids, flags and sign
codes copied side by side and kept in-process, the block let go: about 100 bytes a
vector), takes a pool of the nearest by Hamming distance over the sign codes, keeps the
best of it by the query against their signs, and re-ranks those exactly against the
int8 vectors, decrypting only the chunks that hold them (kept in a dense array up to
CACHE_BYTES whose untouched pages take no memory, else an LRU of chunks). A write that changes a few
records opens the keys of each segment and only the segments that hold them. The byte format is in
docs/vault-format.md.

numpy is imported only by what reads or writes vectors: a store with no manifest answers
everything (is_current, apply, rebuild) without it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import struct
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from memvault.crypto import envelope
from memvault.embed.base import ModelId
from memvault.errors import UsageError
from memvault.index.base import Entry, IndexUnavailable, Stamp
from memvault.model.location import Location
from memvault.model.records import ARCHIVE, Record
from memvault.storage import fsio

# 1: no id keys frame, chunks of 64; 2: every turn embedded alone (both dropped and
# embedded again).
FORMAT = 3
MANIFEST = "manifest"
SEGMENT_SUFFIX = ".seg"
MANIFEST_MAGIC = b"memvecm1"
SEGMENT_MAGIC = b"memvecs1"
HEADER = struct.Struct(">8sI")  # magic, epoch (clear, like a record's key version)
FRAME_LEN = struct.Struct(">I")
META_HEAD = struct.Struct("<IHHH")  # vectors, dims, id width, code bytes
DIGEST_LEN = 8
CHUNK = 64  # vectors per sealed chunk: what a re-rank decrypts for one candidate
HEAD_FRAMES = 2  # frame 0: the ids' keys; frame 1: the meta block; then the chunks
SEGMENT_MAX = 16384  # a removal rewrites at most this many vectors
SMALL = 8192  # segments below this size are merged ...
MERGE_AT = 8  # ... once there are this many of them
# Decrypted int8 vectors kept for warm searches (meta blocks: all): a store up to this
# size is held whole (1M vectors of 256 dimensions), a larger one by chunks, least
# recently used out.
CACHE_BYTES = 288 << 20
# The search's passes (measured on real embeddings: bench/bench_vectors.py): how many
# candidates the Hamming pass keeps (at least POOL_MIN, POOL_PER_HIT per hit asked for,
# one in POOL_SHARE of the store), and how many of them the query against their sign
# codes hands to the exact re-rank (which decrypts the chunks that hold them: few, so
# that a process's first search reads a part of the store, not all of it).
POOL_MIN, POOL_PER_HIT, POOL_SHARE = 4096, 256, 128
RERANK_MIN, RERANK_PER_HIT = 1024, 64
NAME_LEN = 32  # hex characters of a segment's random name
# A query's baseline (what its cosine with unrelated text is, in the model's own scale):
# the stored vectors of SAMPLE_CHUNKS chunks spread evenly over the store; fewer than
# SAMPLE_MIN vectors stored say nothing (index/fusion.py then keeps the built-in floor).
SAMPLE_CHUNKS, SAMPLE_MIN = 8, 128
# A person's turn's vector: its own plus this much of each person's turn beside it in
# its session (index/base.py `beside`), normalised. Measured on both dev sets
# (bench/RANKING.md, "A turn's neighbours, among people"): LoCoMo R@10 76.7 → 77.5, every
# category up or even, LongMemEval unchanged; 0.5-0.6 alike, 0.4 and 0.75 weaker.
NEIGHBOUR_WEIGHT = 0.5

ARCHIVED = 1  # flag bit: the record is an archived original (left the active set)


@dataclass(frozen=True)
class VectorItem:
    memory_id: str
    digest: bytes  # vector_digest(...): a record changed, or beside others, is embedded again
    archived: bool  # archived originals leave the active set; found with include_archive
    vector: Any  # np.ndarray float32 (dims,), unit length
    file: str = ""  # where the record lives (found through the index when empty)


@dataclass(frozen=True)
class VectorHit:
    memory_id: str
    score: float  # cosine similarity of the exact (re-ranked) vectors


def embed_text(record: Record) -> str:
    """The text a record is embedded from (the one place that says so)."""
    return record.content


def text_digest(text: str) -> bytes:
    """What VectorItem.digest is made with: 8 bytes of SHA-256 of the exact text."""
    return hashlib.sha256(text.encode()).digest()[:DIGEST_LEN]


def vector_digest(text: str, beside: tuple[str | None, str | None] = (None, None)) -> bytes:
    """What VectorItem.digest is made with: the text embedded and the texts its vector
    borrows (before, after), so that a turn said beside it, or one changed or forgotten,
    makes the vector stale. A text that borrows nothing: text_digest(text)."""
    if beside == (None, None):
        return text_digest(text)
    h = hashlib.sha256(b"mem/vector/beside/v1\0")
    for part in (text, *beside):
        raw = b"" if part is None else part.encode()
        h.update(b"\0" if part is None else b"\1" + len(raw).to_bytes(8, "big") + raw)
    return h.digest()[:DIGEST_LEN]


def entry_digest(entry: Entry) -> bytes:
    return vector_digest(embed_text(entry.record), entry.beside)


def mixed_rows(rows: Any, own: Sequence[int], before: Sequence[int],
               after: Sequence[int]) -> Any:
    """Turns' vectors: row own[i] of `rows` plus NEIGHBOUR_WEIGHT of rows before[i] and
    after[i] (-1: no neighbour there), each of unit length first (whatever the model
    returns), normalised; float32 rows."""
    import numpy as np

    m = np.asarray(rows, dtype=np.float32)
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    m = np.divide(m, norms, out=np.zeros_like(m), where=norms > 0)
    m = np.vstack([m, np.zeros((1, m.shape[1]), dtype=np.float32)])  # row -1: none
    out = m[list(own)] + NEIGHBOUR_WEIGHT * (m[list(before)] + m[list(after)])
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return np.divide(out, norms, out=np.zeros_like(out), where=norms > 0)


def _file_of(entry: Entry) -> str:
    return entry.location.file


def _archived(entry: Entry) -> bool:
    return entry.record.archived or entry.location.file.startswith(ARCHIVE + "/")


# --- segments in memory -----------------------------------------------------------------


class _Rows:
    """Vectors as columns (what a segment holds), all numpy arrays of one length."""

    def __init__(self, ids: Any, digests: Any, flags: Any,
                 files: list[str] | Callable[[], list[str]],
                 codes: Any, scales: Any | None, q: Any | None) -> None:
        self.ids = ids  # S<w>
        self.digests = digests  # (n, 8) uint8
        self.flags = flags  # (n,) uint8
        # One per row; or what makes them when first asked (a search never asks: a list
        # of the store's length is a cold search's cost for nothing).
        self._files = files
        self.codes = codes  # (n, code bytes) uint8
        self.scales = scales  # (n,) float32, or None when not loaded
        self.q = q  # (n, dims) int8, or None when not loaded

    @property
    def files(self) -> list[str]:
        if callable(self._files):
            self._files = self._files()
        return self._files

    def __len__(self) -> int:
        return len(self.ids)

    def take(self, keep: Any) -> _Rows:
        """The rows `keep` (a mask or indices); their vectors too when these are held."""
        return _Rows(self.ids[keep], self.digests[keep], self.flags[keep],
                     [self.files[i] for i in keep.nonzero()[0]] if keep.dtype == bool
                     else [self.files[i] for i in keep],
                     self.codes[keep], None if self.scales is None else self.scales[keep],
                     None if self.q is None else self.q[keep])

    @staticmethod
    def concat(parts: Sequence[_Rows], dims: int) -> _Rows:
        import numpy as np

        width = max([p.ids.dtype.itemsize for p in parts] + [1])
        return _Rows(
            np.concatenate([p.ids.astype(f"S{width}") for p in parts]) if parts
            else np.zeros(0, dtype="S1"),
            np.concatenate([p.digests for p in parts]) if parts
            else np.zeros((0, DIGEST_LEN), np.uint8),
            np.concatenate([p.flags for p in parts]) if parts else np.zeros(0, np.uint8),
            [f for p in parts for f in p.files],
            np.concatenate([p.codes for p in parts]) if parts
            else np.zeros((0, _code_bytes(dims)), np.uint8),
            None if any(p.scales is None for p in parts)
            else np.concatenate([p.scales for p in parts if p.scales is not None]) if parts
            else np.zeros(0, np.float32),
            None if any(p.q is None for p in parts)
            else np.concatenate([p.q for p in parts if p.q is not None]) if parts
            else np.zeros((0, dims), np.int8))


# The vectors a segment is written from, in its rows' order: (scales, int8 rows) blocks
# of any sizes, re-cut into chunks as they are sealed.
Blocks = Iterable[tuple[Any, Any]]


def _chunked(blocks: Blocks) -> Iterator[tuple[Any, Any]]:
    """Blocks re-cut into CHUNK rows each (the last one fewer): a segment's chunks."""
    import numpy as np

    scales: list[Any] = []
    rows: list[Any] = []
    held = 0
    for s, q in blocks:
        at = 0
        while at < len(s):
            take = min(CHUNK - held, len(s) - at)
            scales.append(s[at:at + take])
            rows.append(q[at:at + take])
            held += take
            at += take
            if held == CHUNK:
                yield np.concatenate(scales), np.concatenate(rows)
                scales, rows, held = [], [], 0
    if held:
        yield np.concatenate(scales), np.concatenate(rows)


def _code_bytes(dims: int) -> int:
    """Sign bits, padded to whole 64-bit words (the Hamming pass works on words)."""
    return (dims + 63) // 64 * 8


def _quantise(vectors: Any) -> tuple[Any, Any, Any]:
    """int8 vectors with a scale each (max |x| maps to 127), and the sign codes."""
    import numpy as np

    v = np.asarray(vectors, dtype=np.float32)
    peak = np.abs(v).max(axis=1)
    scales = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
    q = np.clip(np.rint(v / scales[:, None]), -127, 127).astype(np.int8)
    return scales, q, _codes(v)


def id_keys(ids: Iterable[bytes]) -> Any:
    """Each id's key: 8 bytes of BLAKE2b, read as a little-endian u64 (a segment's keys
    frame: which segments may hold an id, without opening their meta blocks)."""
    import numpy as np

    return np.frombuffer(b"".join(hashlib.blake2b(i, digest_size=8).digest() for i in ids),
                         "<u8").astype(np.uint64)


def _byte_table(q: Any, width: int) -> Any:
    """For each code byte position and each byte value, the sum of the query's
    components whose sign bits that byte sets (a matrix product avoided: BLAS threads
    cost more than the work on a busy machine)."""
    import numpy as np

    padded = np.zeros(width * 8, np.float32)
    padded[:q.shape[0]] = q
    bits = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1).astype(np.float32)
    return np.einsum("bk,pk->pb", bits, padded.reshape(width, 8))


def _codes(v: Any) -> Any:
    import numpy as np

    bits = np.packbits(v > 0, axis=1)
    width = _code_bytes(v.shape[1])
    if bits.shape[1] < width:
        bits = np.pad(bits, ((0, 0), (0, width - bits.shape[1])))
    return np.ascontiguousarray(bits)


def _untouched(rows: int, dims: int) -> Any:
    """A zeroed (rows, dims) int8 array of which only the pages written take memory: an
    anonymous mapping without the huge pages numpy asks for on large arrays (a cold
    search fills a thousand chunks spread over the store, and each made 2 MB of it
    resident: a store of 300,000 vectors held 77 MB of them, for 1,000 read)."""
    import mmap

    import numpy as np

    area = mmap.mmap(-1, max(rows * dims, 1))
    if hasattr(mmap, "MADV_NOHUGEPAGE"):  # Linux; elsewhere pages are small already
        with contextlib.suppress(OSError):
            area.madvise(mmap.MADV_NOHUGEPAGE)
    return np.frombuffer(area, np.int8, count=rows * dims).reshape(rows, dims)


@dataclass
class _Meta:
    """A segment's meta block, decrypted (kept in the process cache)."""

    name: str
    rows: _Rows  # without scales/q
    dims: int
    chunk_offset: int  # where the first chunk frame starts in the file
    frames: int
    count: int  # vectors (a search's view keeps this, not the rows)


class _Cache:
    """What this process decrypted: meta blocks by segment (all of a store's, while it
    lists them) and chunks by (segment, index), least recently used first out past
    CACHE_BYTES. Segments never change under a name, so nothing here goes stale."""

    def __init__(self) -> None:
        self.metas: dict[tuple[str, str], _Meta] = {}
        self.keys: dict[tuple[str, str], Any] = {}
        self.chunks: OrderedDict[tuple[str, str, int], tuple[Any, Any]] = OrderedDict()
        self.chunk_bytes = 0
        self.views: dict[str, tuple[tuple[str, ...], Any]] = {}
        self.manifests: dict[str, tuple[tuple[int, int, int], dict[str, Any]]] = {}

    def chunk(self, key: tuple[str, str, int]) -> tuple[Any, Any] | None:
        found = self.chunks.get(key)
        if found is not None:
            self.chunks.move_to_end(key)
        return found

    def keep_chunk(self, key: tuple[str, str, int], value: tuple[Any, Any]) -> None:
        self.chunks[key] = value
        self.chunk_bytes += value[0].nbytes + value[1].nbytes
        while self.chunk_bytes > CACHE_BYTES and self.chunks:
            _, (s, q) = self.chunks.popitem(last=False)
            self.chunk_bytes -= s.nbytes + q.nbytes

    def forget(self, directory: str, keep: Collection[str] = ()) -> None:
        """Drop what is cached for a store's segments not in `keep`."""
        for key in [k for k in self.metas if k[0] == directory and k[1] not in keep]:
            del self.metas[key]
        for key in [k for k in self.keys if k[0] == directory and k[1] not in keep]:
            del self.keys[key]
        for ck in [k for k in self.chunks if k[0] == directory and k[1] not in keep]:
            s, q = self.chunks.pop(ck)
            self.chunk_bytes -= s.nbytes + q.nbytes
        if not keep:
            self.views.pop(directory, None)
            self.manifests.pop(directory, None)


_CACHE = _Cache()


class _View:
    """Every meta block of a store side by side (the first pass's input), and the
    vectors decrypted so far: a dense array filled chunk by chunk when the whole store
    fits in CACHE_BYTES (pages never touched take no memory), else the chunk cache."""

    def __init__(self, metas: Sequence[_Meta], dims: int) -> None:
        import numpy as np

        # What reading a chunk needs of each segment (name, count, offsets), not its
        # rows: what a search reads of them is copied below.
        self.metas = [replace(m, rows=_Rows.concat([], dims)) for m in metas]
        self.dims = dims
        # Only what a search reads (not the files: a list of the store's length).
        width = max([m.rows.ids.dtype.itemsize for m in metas] + [1])
        self.ids = np.concatenate([m.rows.ids.astype(f"S{width}", copy=False)
                                   for m in metas]) if metas else np.zeros(0, "S1")
        self.flags = np.concatenate([m.rows.flags for m in metas]) if metas \
            else np.zeros(0, np.uint8)
        # One contiguous row of 64-bit words per word position: the Hamming pass reads
        # each once, with no temporary the size of the store.
        words = _code_bytes(dims) // 8
        self.words = np.empty((words, len(self.ids)), np.uint64)
        at = 0
        for m in metas:
            self.words[:, at:at + len(m.rows)] = m.rows.codes.view(np.uint64).T
            at += len(m.rows)
        self.active = (self.flags & ARCHIVED) == 0
        self.all_active = bool(self.active.all())
        sizes = [len(m.rows) for m in metas]
        counts = [(n + CHUNK - 1) // CHUNK for n in sizes]
        self.chunks_of = np.array(counts, np.int64)  # chunks per segment
        # Per chunk (numbered across the store): its segment, its index there, its first row.
        self.chunk_segment = np.repeat(np.arange(len(metas), dtype=np.int64), counts)
        self.chunk_index = np.concatenate(
            [np.arange(c, dtype=np.int64) for c in counts]) if metas else np.zeros(0, np.int64)
        seg_start = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64) \
            if metas else np.zeros(0, np.int64)
        self.chunk_start = seg_start[self.chunk_segment] + self.chunk_index * CHUNK
        row_chunk = [np.arange(n, dtype=np.int64) // CHUNK + base for n, base in
                     zip(sizes, np.concatenate([[0], np.cumsum(counts)[:-1]]), strict=True)]
        self.row_chunk = np.concatenate(row_chunk) if metas else np.zeros(0, np.int64)
        n = len(self.ids)
        self.dense: Any = _untouched(n, dims) if n * dims <= CACHE_BYTES else None
        self.loaded = np.zeros(len(self.chunk_start), bool)
        self._positions: dict[bytes, int] | None = None
        self._dist: Any = None  # the Hamming pass's buffers, made by the first search
        self._word: Any = None
        self._count: Any = None

    def nearest_codes(self, q: Any, pool: int, mask: Any) -> Any:
        """About `pool` rows (of those in `mask`) whose sign codes are nearest the
        query's in Hamming distance, a 64-bit word position at a time into buffers
        kept between searches; the cut-off found from the distances' histogram (they
        are small integers), which is cheaper than a partition of the whole store."""
        import numpy as np

        n = len(self.ids)
        if self._dist is None:
            self._dist = np.empty(n, np.uint16)
            self._word = np.empty(n, np.uint64)
            self._count = np.empty(n, np.uint8)
        dist, word, count = self._dist, self._word, self._count
        qwords = _codes(q[None, :]).view(np.uint64)[0]
        dist[:] = 0
        for w in range(self.words.shape[0]):
            np.bitwise_xor(self.words[w], qwords[w], out=word)
            np.bitwise_count(word, out=count)
            np.add(dist, count, out=dist)
        if mask is not None:
            dist[~mask] = np.iinfo(np.uint16).max
        histogram = np.bincount(dist, minlength=self.words.shape[0] * 64 + 1)
        cut = int(np.searchsorted(np.cumsum(histogram), pool))  # rows at <= cut: >= pool
        candidates = np.flatnonzero(dist <= cut)
        if mask is not None:
            candidates = candidates[mask[candidates]]
        if len(candidates) > 2 * pool:  # many ties at the cut-off: the nearest of them
            candidates = candidates[np.argpartition(dist[candidates], pool)[:pool]]
        return candidates

    def positions(self) -> dict[bytes, int]:
        if self._positions is None:
            self._positions = {bytes(i): n for n, i in enumerate(self.ids.tolist())}
        return self._positions


class HeldIds(AbstractSet[bytes]):
    """The ids of the stored vectors, encoded, in one sorted array: a byte string an id
    (a set of them takes three times as much, a million ids over 100 MB), found by binary
    search; a set of many is checked against it in one call (`set(ids) <= held`)."""

    def __init__(self, ids: Any) -> None:
        """`ids`: an array of distinct ids (a store holds an id once), sorted here in
        place (no copy: a million ids are 36 MB)."""
        ids.sort()
        self._ids = ids
        self._width = ids.dtype.itemsize

    def __len__(self) -> int:
        return len(self._ids)

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._ids.tolist())

    def __contains__(self, item: object) -> bool:
        if not isinstance(item, bytes) or not len(self._ids) or len(item) > self._width \
                or item.endswith(b"\0"):
            return False
        at = int(self._ids.searchsorted(item))
        return at < len(self._ids) and bytes(self._ids[at]) == item

    @classmethod
    def _from_iterable(cls, items: Iterable[Any]) -> frozenset[Any]:
        return frozenset(items)  # what `held & other`, `held - other` make: a plain set

    def __ge__(self, other: AbstractSet[Any]) -> bool:
        items = list(other)
        return all(isinstance(i, bytes) for i in items) and bool(self._found(items).all())

    def _found(self, items: Sequence[bytes]) -> Any:
        """Whether each of `items` is held (an id longer than every held one is not; one
        ending in a NUL byte is none, as numpy would drop it)."""
        import numpy as np

        fits = np.array([len(i) <= self._width and not i.endswith(b"\0") for i in items],
                        bool)
        if not len(self._ids) or not fits.any():
            return np.zeros(len(items), bool)
        wanted = np.array([i if ok else b"" for i, ok in zip(items, fits.tolist(),
                                                             strict=True)],
                          dtype=self._ids.dtype)
        at = np.minimum(np.searchsorted(self._ids, wanted), len(self._ids) - 1)
        return fits & (self._ids[at] == wanted)


class _OlderFormat(IndexUnavailable):
    """A store an earlier version wrote: stale (pruned to nothing, embedded again)."""


# --- the store ------------------------------------------------------------------------


class VectorStore:
    """One user's sealed vectors (also a DerivedIndex, named "vectors")."""

    name = "vectors"

    def __init__(self, directory: Path, key: bytes, epoch: int, *, owner: str = "",
                 locate: Callable[[Sequence[str]], Mapping[str, Location]] | None = None
                 ) -> None:
        self.dir = directory
        self.key = key
        self.epoch = epoch
        self.owner = owner  # "org/user": bound into every frame's associated data
        self._locate = locate  # where records live, for vectors added without a file
        self.stamp = Stamp(directory)
        self._where = str(directory)  # the cache's name for this store

    # --- paths and frames ---------------------------------------------------------------

    @property
    def manifest_path(self) -> Path:
        return self.dir / MANIFEST

    def _segment_path(self, name: str) -> Path:
        return self.dir / f"{name}{SEGMENT_SUFFIX}"

    def _manifest_aad(self, epoch: int) -> bytes:
        return envelope.lp("mem/vectors/manifest/v1", self.owner, str(epoch))

    def _frame_aad(self, epoch: int, name: str, index: int, frames: int) -> bytes:
        return envelope.lp("mem/vectors/segment/v1", self.owner, str(epoch), name,
                           str(index), str(frames))

    def _seal(self, plain: bytes, aad: bytes, key: bytes | None = None) -> bytes:
        nonce, ct = envelope.seal_raw(key or self.key, plain, aad)
        return b"".join((FRAME_LEN.pack(len(nonce) + len(ct)), nonce, ct))  # one copy

    def _open(self, body: bytes | memoryview, aad: bytes, what: str) -> bytes:
        try:
            return envelope.open_raw(self.key, bytes(body[:envelope.NONCE_LEN]),
                                     body[envelope.NONCE_LEN:], aad)
        except envelope.AuthError:
            raise IndexUnavailable(f"{what} fails authentication") from None

    # --- the manifest -------------------------------------------------------------------

    def stored_epoch(self) -> int | None:
        """The epoch the store is sealed under (its clear header); None when empty."""
        try:
            with fsio.open_regular(self.manifest_path) as f:
                magic, epoch = HEADER.unpack(f.read(HEADER.size))
        except FileNotFoundError:
            return None
        except (OSError, struct.error, ValueError) as exc:
            raise IndexUnavailable("vectors/manifest is unreadable") from exc
        if magic != MANIFEST_MAGIC:
            raise IndexUnavailable("vectors/manifest is not a vector manifest")
        return int(epoch)

    def _manifest(self) -> dict[str, Any] | None:
        """The manifest (None: no store); IndexUnavailable when it does not open or is
        sealed under another epoch. Parsed once per version of the file."""
        where = str(self.dir)
        try:
            st = os.stat(self.manifest_path)
        except FileNotFoundError:
            _CACHE.forget(where)
            return None
        except OSError as exc:
            raise IndexUnavailable("vectors/manifest is unreadable") from exc
        sig = (st.st_ino, st.st_mtime_ns, st.st_size)
        cached = _CACHE.manifests.get(where)
        if cached is not None and cached[0] == sig and cached[1]["epoch"] == self.epoch \
                and cached[1]["_key"] == self.key:
            return cached[1]
        try:
            raw = fsio.read_regular(self.manifest_path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise IndexUnavailable("vectors/manifest is unreadable") from exc
        if len(raw) < HEADER.size + FRAME_LEN.size:
            raise IndexUnavailable("vectors/manifest is truncated")
        magic, epoch = HEADER.unpack_from(raw)
        if magic != MANIFEST_MAGIC:
            raise IndexUnavailable("vectors/manifest is not a vector manifest")
        if epoch != self.epoch:
            raise IndexUnavailable(f"vectors/manifest is sealed under key version {epoch}, "
                                   f"not {self.epoch}")
        (length,) = FRAME_LEN.unpack_from(raw, HEADER.size)
        body = raw[HEADER.size + FRAME_LEN.size:]
        if len(body) != length:
            raise IndexUnavailable("vectors/manifest is truncated")
        plain = self._open(body, self._manifest_aad(epoch), "vectors/manifest")
        try:
            doc: dict[str, Any] = json.loads(plain)
            if doc.get("format") in (1, 2):
                raise _OlderFormat("vectors/ is of an older format")
            if doc.get("format") != FORMAT or doc.get("epoch") != epoch \
                    or doc.get("chunk") != CHUNK:
                raise ValueError("format")
            for seg in doc["segments"]:
                int(seg["count"]), int(seg["frames"]), str(seg["name"])
        except (ValueError, KeyError, TypeError):
            raise IndexUnavailable("vectors/manifest is malformed") from None
        doc["_key"] = self.key
        _CACHE.manifests[where] = (sig, doc)
        return doc

    def _readable(self) -> dict[str, Any] | None:
        """The manifest, or None when there is nothing this key can read."""
        try:
            return self._manifest()
        except IndexUnavailable:
            return None

    def _write_manifest(self, model: ModelId, segments: list[dict[str, Any]],
                        key: bytes | None = None, epoch: int | None = None) -> None:
        epoch = self.epoch if epoch is None else epoch
        doc = {"format": FORMAT, "epoch": epoch, "model": model.to_dict(),
               "count": sum(int(s["count"]) for s in segments), "chunk": CHUNK,
               "segments": segments}
        plain = json.dumps(doc, separators=(",", ":")).encode()
        data = HEADER.pack(MANIFEST_MAGIC, epoch) + self._seal(
            plain, self._manifest_aad(epoch), key)
        fsio.atomic_write(self.manifest_path, data)

    # --- segments -----------------------------------------------------------------------

    def _write_segment(self, rows: _Rows, dims: int, key: bytes | None = None,
                       epoch: int | None = None, blocks: Blocks | None = None
                       ) -> dict[str, Any]:
        """A new segment file holding `rows` (fsynced, under a fresh name); their vectors
        are `rows`' own, or `blocks` (read from other segments as the file is written:
        memory holds a chunk of them, not the segment's)."""
        import numpy as np

        epoch = self.epoch if epoch is None else epoch
        if blocks is None:
            assert rows.scales is not None and rows.q is not None
            blocks = ((rows.scales, rows.q),)
        name = os.urandom(NAME_LEN // 2).hex()
        n = len(rows)
        frames = HEAD_FRAMES + (n + CHUNK - 1) // CHUNK
        table = sorted(set(rows.files))
        where = {f: i for i, f in enumerate(table)}
        width = max(rows.ids.dtype.itemsize, 1)
        files_json = json.dumps(table, separators=(",", ":")).encode()

        def sealed() -> Iterator[bytes]:
            """The file's parts as they are sealed: atomic_write writes each as it comes,
            so the file is never whole in memory (nor its meta block past its frame)."""
            yield HEADER.pack(SEGMENT_MAGIC, epoch)
            keys = id_keys(rows.ids.tolist()).astype("<u8").tobytes()
            yield self._seal(keys, self._frame_aad(epoch, name, 0, frames), key)
            del keys
            meta = b"".join((
                META_HEAD.pack(n, dims, width, _code_bytes(dims)),
                FRAME_LEN.pack(len(files_json)), files_json,
                rows.ids.astype(f"S{width}").tobytes(),
                np.ascontiguousarray(rows.digests, dtype=np.uint8).tobytes(),
                np.ascontiguousarray(rows.flags, dtype=np.uint8).tobytes(),
                np.array([where[f] for f in rows.files], dtype="<u4").tobytes(),
                np.ascontiguousarray(rows.codes, dtype=np.uint8).tobytes(),
            ))
            frame = self._seal(meta, self._frame_aad(epoch, name, 1, frames), key)
            del meta
            yield frame
            del frame
            j = 0
            for scales, q in _chunked(blocks):
                plain = scales.astype("<f4").tobytes() + np.ascontiguousarray(q).tobytes()
                yield self._seal(plain, self._frame_aad(epoch, name, j + HEAD_FRAMES, frames),
                                 key)
                j += 1
            if HEAD_FRAMES + j != frames:
                raise AssertionError("a segment's vectors do not match its rows")

        fsio.ensure_dir(self.dir)
        try:
            fsio.atomic_write(self._segment_path(name), sealed())
        except BaseException:
            # A source that failed half way (a chunk that does not open): no temp file
            # left for the next writer to find (the caller holds the user's lock).
            fsio.remove_stale_temps(self.dir)
            raise
        return {"name": name, "count": n, "frames": frames,
                "archived": int(np.count_nonzero(rows.flags & ARCHIVED))}

    def _read_meta(self, seg: Mapping[str, Any], keep: bool = True) -> _Meta:
        """A segment's meta block (cached, unless told not to keep it)."""
        import numpy as np

        name = str(seg["name"])
        key = (str(self.dir), name)
        found = _CACHE.metas.get(key)
        if found is not None:
            return found
        what = f"vectors/{name}{SEGMENT_SUFFIX}"
        frames = int(seg["frames"])
        body, end = self._head_frame(name, 1)
        plain = self._open(body, self._frame_aad(self.epoch, name, 1, frames), what)
        try:
            n, dims, width, cb = META_HEAD.unpack_from(plain)
            at = META_HEAD.size
            (flen,) = FRAME_LEN.unpack_from(plain, at)
            at += FRAME_LEN.size
            table = json.loads(plain[at:at + flen])
            at += flen

            view = memoryview(plain)  # the columns read in place, not copied out

            def take(size: int) -> memoryview:
                nonlocal at
                out = view[at:at + size]
                if len(out) != size:
                    raise ValueError("short")
                at += size
                return out

            ids = np.frombuffer(take(n * width), dtype=f"S{width}")
            digests = np.frombuffer(take(n * DIGEST_LEN), np.uint8).reshape(n, DIGEST_LEN)
            flags = np.frombuffer(take(n), np.uint8)
            where = np.frombuffer(take(n * 4), "<u4")
            codes = np.frombuffer(take(n * cb), np.uint8).reshape(n, cb)
            if not isinstance(table, list) or not all(isinstance(f, str) for f in table) \
                    or (len(where) and int(where.max()) >= len(table)):
                raise ValueError("files")
            if at != len(plain) or n != int(seg["count"]) or \
                    frames != HEAD_FRAMES + (n + CHUNK - 1) // CHUNK:
                raise ValueError("counts")
        except (ValueError, IndexError, struct.error, TypeError):
            raise IndexUnavailable(f"{what} has a malformed meta block") from None
        rows = _Rows(ids, digests, flags, lambda: [table[i] for i in where.tolist()], codes,
                     None, None)
        meta = _Meta(name, rows, dims, end, frames, n)
        if keep:
            _CACHE.metas[key] = meta
        return meta

    def _head_frame(self, name: str, index: int) -> tuple[bytes, int]:
        """Frame 0 or 1 of a segment (the keys, the meta block), still sealed, and the
        offset just past it; the clear header checked on the way."""
        what = f"vectors/{name}{SEGMENT_SUFFIX}"
        try:
            with fsio.open_regular(self._segment_path(name)) as f:
                head = f.read(HEADER.size)
                if len(head) < HEADER.size:
                    raise IndexUnavailable(f"{what} is truncated")
                magic, epoch = HEADER.unpack_from(head)
                if magic != SEGMENT_MAGIC or epoch != self.epoch:
                    raise IndexUnavailable(f"{what} is not a segment of this store")
                at = HEADER.size
                for i in range(index + 1):
                    raw = os.pread(f.fileno(), FRAME_LEN.size, at)
                    if len(raw) < FRAME_LEN.size:
                        raise IndexUnavailable(f"{what} is truncated")
                    (length,) = FRAME_LEN.unpack(raw)
                    at += FRAME_LEN.size
                    if i == index:
                        body = os.pread(f.fileno(), length, at)
                        if len(body) != length:
                            raise IndexUnavailable(f"{what} is truncated")
                        return body, at + length
                    at += length
        except FileNotFoundError:
            raise IndexUnavailable(f"{what} is missing") from None
        except OSError as exc:
            raise IndexUnavailable(f"{what} is unreadable") from exc
        raise AssertionError("unreachable")

    def _read_keys(self, seg: Mapping[str, Any]) -> Any:
        """A segment's id keys (cached): frame 0, 8 bytes a vector."""
        import numpy as np

        name = str(seg["name"])
        key = (str(self.dir), name)
        found = _CACHE.keys.get(key)
        if found is not None:
            return found
        what = f"vectors/{name}{SEGMENT_SUFFIX}"
        body, _ = self._head_frame(name, 0)
        plain = self._open(body, self._frame_aad(self.epoch, name, 0, int(seg["frames"])), what)
        if len(plain) != 8 * int(seg["count"]):
            raise IndexUnavailable(f"{what} has a malformed keys frame")
        keys = np.frombuffer(plain, "<u8").astype(np.uint64)
        _CACHE.keys[key] = keys
        return keys

    def _holding(self, doc: Mapping[str, Any], ids: Collection[str]) -> set[str]:
        """The segments that may hold one of `ids` (by their keys frames: a segment
        that holds none of them is never opened further)."""
        import numpy as np

        if not ids:
            return set()
        wanted = id_keys(i.encode() for i in ids)
        return {str(seg["name"]) for seg in doc["segments"]
                if np.isin(self._read_keys(seg), wanted).any()}

    def _chunk_frame_size(self, dims: int, count: int) -> int:
        return FRAME_LEN.size + envelope.NONCE_LEN + count * (4 + dims) + 16

    def _read_chunk(self, meta: _Meta, j: int, fd: int | None = None,
                    cache: bool = True) -> tuple[Any, Any]:
        """Chunk `j` of a segment: (scales, int8 vectors), cached unless told not to."""
        import numpy as np

        ckey = (self._where, meta.name, j)
        found = _CACHE.chunk(ckey) if cache else None
        if found is not None:
            return found
        n = meta.count
        count = min(CHUNK, n - j * CHUNK)
        offset = meta.chunk_offset + j * self._chunk_frame_size(meta.dims, CHUNK)
        size = self._chunk_frame_size(meta.dims, count)
        what = f"vectors/{meta.name}{SEGMENT_SUFFIX}"
        try:
            if fd is None:
                with fsio.open_regular(self._segment_path(meta.name)) as f:
                    raw = os.pread(f.fileno(), size, offset)
            else:
                raw = os.pread(fd, size, offset)
        except FileNotFoundError:
            raise IndexUnavailable(f"{what} is missing") from None
        except OSError as exc:
            raise IndexUnavailable(f"{what} is unreadable") from exc
        if len(raw) != size or FRAME_LEN.unpack_from(raw)[0] != size - FRAME_LEN.size:
            raise IndexUnavailable(f"{what} is truncated")
        plain = self._open(raw[FRAME_LEN.size:],
                           self._frame_aad(self.epoch, meta.name, j + HEAD_FRAMES, meta.frames),
                           what)
        scales = np.frombuffer(plain[:4 * count], "<f4").astype(np.float32)
        q = np.frombuffer(plain[4 * count:], np.int8).reshape(count, meta.dims)
        if cache:
            _CACHE.keep_chunk(ckey, (scales, q))
        return scales, q

    def _fill_dense(self, view: _View, needed: Any) -> None:
        """Chunks `needed` (the view's chunk numbers, ascending) decrypted into its dense
        array. A cold search opens about a thousand: per chunk one AES-GCM open and one
        copy, no numpy call (that overhead was most of the cost)."""
        import numpy as np

        dims = view.dims
        flat = memoryview(view.dense.reshape(-1).view(np.uint8))
        frame = self._chunk_frame_size(dims, CHUNK)
        segments = view.chunk_segment[needed]
        for group in np.split(needed, np.flatnonzero(np.diff(segments)) + 1):
            segment = int(view.chunk_segment[group[0]])
            meta = view.metas[segment]
            what = f"vectors/{meta.name}{SEGMENT_SUFFIX}"
            n = meta.count
            # _frame_aad's fields, those shared by the segment's frames encoded once.
            head = envelope.lp("mem/vectors/segment/v1", self.owner, str(self.epoch), meta.name)
            tail = envelope.lp(str(meta.frames))
            js = view.chunk_index[group].tolist()
            starts = view.chunk_start[group].tolist()
            try:
                with fsio.open_regular(self._segment_path(meta.name)) as f:
                    fd = f.fileno()
                    region: memoryview | None = None
                    if len(js) * 4 >= int(view.chunks_of[segment]):
                        # Most of its chunks are wanted: one read of them all.
                        region = memoryview(os.pread(fd, os.fstat(fd).st_size - meta.chunk_offset,
                                                     meta.chunk_offset))
                    for j, start in zip(js, starts, strict=True):
                        count = min(CHUNK, n - j * CHUNK)
                        size = self._chunk_frame_size(dims, count)
                        raw = region[j * frame:j * frame + size] if region is not None \
                            else os.pread(fd, size, meta.chunk_offset + j * frame)
                        if len(raw) != size or \
                                FRAME_LEN.unpack_from(raw)[0] != size - FRAME_LEN.size:
                            raise IndexUnavailable(f"{what} is truncated")
                        plain = self._open(raw[FRAME_LEN.size:],
                                           head + envelope.lp(str(j + HEAD_FRAMES)) + tail, what)
                        flat[start * dims:(start + count) * dims] = plain[4 * count:]
            except FileNotFoundError:
                raise IndexUnavailable(f"{what} is missing") from None
            except OSError as exc:
                raise IndexUnavailable(f"{what} is unreadable") from exc
            view.loaded[group] = True

    def _blocks(self, seg: Mapping[str, Any], keep: Any = None) -> Iterator[tuple[Any, Any]]:
        """A segment's vectors (of the rows in the mask `keep`, when given) a chunk at a
        time, as they are asked for (a segment written from them holds one chunk, never
        its source whole), and not kept in the search's cache (the source is dropped)."""
        meta = self._read_meta(seg)
        chunks = (meta.count + CHUNK - 1) // CHUNK
        with fsio.open_regular(self._segment_path(meta.name)) as f:
            for j in range(chunks):
                scales, q = self._read_chunk(meta, j, f.fileno(), cache=False)
                if keep is not None:
                    part = keep[j * CHUNK:(j + 1) * CHUNK]
                    scales, q = scales[part], q[part]
                yield scales, q

    def _full_rows(self, seg: Mapping[str, Any]) -> _Rows:
        """Every vector of a segment, held at once (stored_vectors)."""
        import numpy as np

        meta = self._read_meta(seg)
        parts = list(self._blocks(seg))
        r = meta.rows
        return _Rows(r.ids, r.digests, r.flags, list(r.files), r.codes,
                     np.concatenate([p[0] for p in parts]) if parts
                     else np.zeros(0, np.float32),
                     np.concatenate([p[1] for p in parts]) if parts
                     else np.zeros((0, meta.dims), np.int8))

    def _metas(self, doc: Mapping[str, Any]) -> list[_Meta]:
        return [self._read_meta(seg) for seg in doc["segments"]]

    def _view(self, doc: Mapping[str, Any]) -> _View:
        names = tuple(str(s["name"]) for s in doc["segments"])
        where = str(self.dir)
        cached = _CACHE.views.get(where)
        if cached is not None and cached[0] == names:
            view: _View = cached[1]
            return view
        _CACHE.forget(where, keep=names)
        # Meta blocks read and let go (unless a write cached them): the view copies what
        # a search reads of them, and holding them too took 80 bytes a vector more.
        view = _View([self._read_meta(seg, keep=False) for seg in doc["segments"]],
                     int(doc["model"]["dims"]))
        _CACHE.views[where] = (names, view)
        return view

    # --- committing a change (caller holds the user's lock) ---------------------------

    def _commit(self, model: ModelId, segments: list[dict[str, Any]],
                dropped: Collection[str]) -> None:
        """The manifest names `segments` from now on; then the dropped segments' files
        (and anything else a killed writer left) are deleted."""
        if segments:
            self._write_manifest(model, segments)
        else:
            fsio.remove(self.manifest_path)
        self._remove_unlisted({str(s["name"]) for s in segments})
        _CACHE.forget(str(self.dir), keep={str(s["name"]) for s in segments})

    def _remove_unlisted(self, listed: Collection[str]) -> None:
        with contextlib.suppress(FileNotFoundError):
            for entry in self.dir.iterdir():
                name = entry.name
                if name.endswith(SEGMENT_SUFFIX) and name[:-len(SEGMENT_SUFFIX)] not in listed:
                    fsio.remove(entry)
        fsio.remove_stale_temps(self.dir)

    # --- the store's API ----------------------------------------------------------------

    def model(self) -> ModelId | None:
        doc = self._readable()
        if doc is None:
            return None
        m = doc["model"]
        return ModelId(str(m["provider"]), str(m["model"]), int(m["dims"]))

    def count(self) -> int:
        """Vectors stored (the manifest only)."""
        doc = self._readable()
        return int(doc["count"]) if doc is not None else 0

    def has(self) -> dict[str, bytes]:
        """memory_id -> digest for every stored vector."""
        doc = self._readable()
        if doc is None:
            return {}
        out: dict[str, bytes] = {}
        for meta in self._metas(doc):
            for i, d in zip(meta.rows.ids.tolist(), meta.rows.digests, strict=True):
                out[i.decode()] = d.tobytes()
        return out

    def ids(self) -> HeldIds:
        """The id of every stored vector, encoded: has() without the digests, made from
        the segments' id columns, each meta block read and let go (a run that embeds
        what waits keeps the ids, not every meta block: a search's cache)."""
        import numpy as np

        doc = self._readable()
        segments = list(doc["segments"]) if doc is not None else []
        # One array filled a segment at a time, each meta block let go before the next
        # (a list of their columns and their join took three times the ids).
        ids = np.empty(sum(int(seg["count"]) for seg in segments), "S1")
        at = 0
        for seg in segments:
            column = self._read_meta(seg, keep=False).rows.ids
            if column.dtype.itemsize > ids.dtype.itemsize:  # the first, or longer ids
                ids = ids.astype(column.dtype)
            ids[at:at + len(column)] = column
            at += len(column)
        return HeldIds(ids)

    def digests(self, ids: Collection[str]) -> dict[str, bytes]:
        """memory_id -> digest of those of `ids` that are stored (has() for a few: only
        the segments that hold one are read)."""
        doc = self._readable()
        return self._digests(doc, ids) if doc is not None else {}

    def _digests(self, doc: Mapping[str, Any], ids: Collection[str]) -> dict[str, bytes]:
        """memory_id -> digest of those of `ids` that are stored."""
        holding = self._holding(doc, ids)
        out: dict[str, bytes] = {}
        for seg in doc["segments"]:
            if str(seg["name"]) in holding:
                meta = self._read_meta(seg)
                for i, d in zip(meta.rows.ids.tolist(), meta.rows.digests, strict=True):
                    if (memory_id := i.decode()) in ids:
                        out[memory_id] = d.tobytes()
        return out

    def add(self, model: ModelId, items: Sequence[VectorItem]) -> None:
        """Store vectors (replacing any stored for the same ids) in a new segment."""
        import numpy as np

        if not items:
            return
        doc = self._readable()
        if doc is not None:
            stored = self._model_of(doc)
            if stored != model:
                raise UsageError(f"the vector store holds vectors of {stored.key()}, not "
                                 f"{model.key()}: clear it before storing another model's",
                                 field="model")
        vectors = np.stack([np.asarray(it.vector, dtype=np.float32) for it in items])
        if vectors.ndim != 2 or vectors.shape[1] != model.dims:
            raise UsageError(f"vectors of {model.key()} have {model.dims} dimensions, "
                             f"not {vectors.shape[-1]}", field="model")
        latest = {it.memory_id: n for n, it in enumerate(items)}  # the last one wins
        order = sorted(latest.values())
        items = [items[n] for n in order]
        vectors = vectors[order]
        files = [it.file for it in items]
        missing = [it.memory_id for it in items if not it.file]
        if missing and self._locate is not None:
            with contextlib.suppress(IndexUnavailable):
                found = self._locate(missing)
                files = [it.file or (found[it.memory_id].file if it.memory_id in found
                                     else "") for it in items]
        scales, q, codes = _quantise(vectors)
        rows = _Rows(np.array([it.memory_id.encode() for it in items]),
                     np.frombuffer(b"".join(it.digest[:DIGEST_LEN].ljust(DIGEST_LEN, b"\0")
                                            for it in items), np.uint8).reshape(-1, DIGEST_LEN),
                     np.array([ARCHIVED if it.archived else 0 for it in items], np.uint8),
                     files, codes, scales, q)
        segments = list(doc["segments"]) if doc is not None else []
        dropped: list[str] = []
        if doc is not None:
            segments, dropped = self._without(doc, set(latest))
        for lo in range(0, len(rows), SEGMENT_MAX):
            keep = np.zeros(len(rows), bool)
            keep[lo:lo + SEGMENT_MAX] = True
            segments.append(self._write_segment(rows.take(keep), model.dims))
        segments, merged = self._merge_small(segments, model.dims)
        self._commit(model, segments, [*dropped, *merged])
        if doc is None:
            self.stamp.write()  # an empty store was current, and vectors of live records keep it so

    def _merge_small(self, segments: list[dict[str, Any]], dims: int
                     ) -> tuple[list[dict[str, Any]], list[str]]:
        small = [s for s in segments if int(s["count"]) < SMALL]
        if len(small) < MERGE_AT:
            return segments, []
        # Their columns side by side (what a meta block holds, not the vectors), then
        # their vectors read a chunk at a time as the merged file is written.
        merged = self._write_segment(
            _Rows.concat([self._read_meta(s).rows for s in small], dims), dims,
            blocks=(block for s in small for block in self._blocks(s)))
        names = {str(s["name"]) for s in small}
        return [s for s in segments if str(s["name"]) not in names] + [merged], sorted(names)

    def _without(self, doc: Mapping[str, Any], ids: Collection[str],
                 update: Mapping[str, tuple[int, str]] | None = None
                 ) -> tuple[list[dict[str, Any]], list[str]]:
        """The segments with `ids` taken out (and `update`: id -> (flags, file) set),
        each segment that holds one rewritten to a new one; and the names dropped."""
        import numpy as np

        dims = int(doc["model"]["dims"])
        wanted = np.array(sorted(i.encode() for i in ids)) if ids else None
        changes = np.array(sorted(i.encode() for i in update)) if update else None
        out: list[dict[str, Any]] = []
        dropped: list[str] = []
        holding = self._holding(doc, {*ids, *(update or {})})
        for seg in doc["segments"]:
            if str(seg["name"]) not in holding:
                out.append(dict(seg))
                continue
            meta = self._read_meta(seg)
            ids_here = meta.rows.ids
            gone = np.isin(ids_here, wanted) if wanted is not None else \
                np.zeros(len(ids_here), bool)
            touched = np.isin(ids_here, changes) if changes is not None else \
                np.zeros(len(ids_here), bool)
            if update and touched.any():
                touched_rows = touched.nonzero()[0]
                real = [int(i) for i in touched_rows
                        if (int(meta.rows.flags[i]), meta.rows.files[i])
                        != update[ids_here[i].decode()]]
                touched[:] = False
                touched[real] = True
            if not gone.any() and not touched.any():
                out.append(dict(seg))
                continue
            rows = meta.rows.take(~gone)
            if update and touched.any():
                flags = rows.flags.copy()
                for n, i in enumerate(rows.ids.tolist()):
                    change = update.get(i.decode())
                    if change is not None:
                        flags[n], rows.files[n] = change[0], change[1]
                rows.flags = flags
            dropped.append(meta.name)
            if len(rows):
                out.append(self._write_segment(rows, dims, blocks=self._blocks(seg, ~gone)))
        return out, dropped

    def remove(self, memory_ids: Collection[str]) -> int:
        """Take these ids' vectors out: every segment that holds one is written again
        without it and its old file deleted. How many were removed."""
        doc = self._readable() if memory_ids else None
        if doc is None:
            return 0
        before = int(doc["count"])
        segments, dropped = self._without(doc, set(memory_ids))
        if not dropped:
            return 0
        self._commit(self._model_of(doc), segments, dropped)
        return before - sum(int(s["count"]) for s in segments)

    @staticmethod
    def _model_of(doc: Mapping[str, Any]) -> ModelId:
        m = doc["model"]
        return ModelId(str(m["provider"]), str(m["model"]), int(m["dims"]))

    def clear(self) -> None:
        """Delete every vector: the manifest first (the store is then empty), then the
        segments, then the stamp."""
        fsio.remove(self.manifest_path)
        self._remove_unlisted(())
        self.stamp.drop_quietly()
        _CACHE.forget(str(self.dir))

    def reseal(self, key: bytes, epoch: int) -> None:
        """Seal every segment again under a new key and epoch (the old files deleted
        once the new manifest names the new ones); this store then uses them."""
        doc = self._readable()
        if doc is not None:
            model = self._model_of(doc)
            segments = [self._write_segment(self._read_meta(s).rows, model.dims, key, epoch,
                                            blocks=self._blocks(s))
                        for s in doc["segments"]]
            self._write_manifest(model, segments, key, epoch)
            self._remove_unlisted({str(s["name"]) for s in segments})
        _CACHE.forget(str(self.dir))
        self.key, self.epoch = key, epoch

    def search(self, query: Any, k: int, *, include_archive: bool = False,
               allowed: Collection[str] | None = None,
               model: ModelId | None = None) -> list[VectorHit]:
        """The k stored vectors nearest the query (cosine), best first."""
        import numpy as np

        doc = self._readable()
        if doc is None or k <= 0:
            return []
        stored = self._model_of(doc)
        if model is not None and model != stored:
            raise UsageError(f"the vector store holds vectors of {stored.key()}, not "
                             f"{model.key()}: they cannot be compared", field="model")
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        if q.shape[0] != stored.dims:
            raise UsageError(f"a query of {q.shape[0]} dimensions against vectors of "
                             f"{stored.dims}", field="model")
        norm = float(np.linalg.norm(q))
        if norm == 0.0:
            return []
        q = q / norm
        for attempt in (1, 2):
            try:
                return self._search(doc, q, k, include_archive, allowed)
            except IndexUnavailable:
                # A writer replaced a segment meanwhile: read the new manifest once.
                fresh = self._readable()
                if attempt == 2 or fresh is None or fresh is doc:
                    raise
                doc = fresh
        return []

    def _search(self, doc: Mapping[str, Any], q: Any, k: int, include_archive: bool,
                allowed: Collection[str] | None) -> list[VectorHit]:
        import numpy as np

        view = self._view(doc)
        n = len(view.ids)
        mask: Any = None
        if not include_archive and not view.all_active:
            mask = view.active
        if allowed is not None:
            pos = view.positions()
            keep = np.zeros(n, bool)
            keep[[p for p in (pos.get(a.encode()) for a in allowed) if p is not None]] = True
            mask = keep if mask is None else mask & keep
        pool = max(POOL_MIN, POOL_PER_HIT * k, n // POOL_SHARE)
        if mask is not None and int(np.count_nonzero(mask)) <= pool:
            candidates = mask.nonzero()[0]
        elif n <= pool:
            candidates = np.arange(n)
        else:
            candidates = view.nearest_codes(q, pool, mask)
        if len(candidates) == 0:
            return []
        rerank = max(RERANK_MIN, RERANK_PER_HIT * k)
        if len(candidates) > rerank:
            # The exact query against the candidates' signs: b·q (which orders as
            # (2b - 1)·q does) from a table of each code byte's share.
            table = _byte_table(q, view.words.shape[0] * 8)
            codes = np.ascontiguousarray(view.words[:, candidates].T).view(np.uint8)
            approx = table[np.arange(table.shape[0]), codes].sum(axis=1)
            candidates = candidates[np.argpartition(-approx, rerank)[:rerank]]
        # Exact cosine of the stored vectors, decrypting only the chunks that hold them.
        # einsum rather than a matrix product: BLAS threads cost more than this work on
        # a busy machine.
        vecs = self._vectors_of(view, candidates).astype(np.float32)
        norms = np.sqrt(np.einsum("ij,ij->i", vecs, vecs))
        scores = np.einsum("ij,j->i", vecs, q) / np.where(norms > 0, norms, 1.0)  # scale cancels
        if len(scores) > k:
            top = np.argpartition(-scores, k)[:k]
            best = top[np.argsort(-scores[top], kind="stable")]
        else:
            best = np.argsort(-scores, kind="stable")
        return [VectorHit(view.ids[candidates[i]].decode(), float(scores[i])) for i in best]

    def baseline(self, query: Any) -> tuple[float, float] | None:
        """The mean and the standard deviation of the query's cosine with a sample of the
        stored vectors (SAMPLE_CHUNKS chunks, evenly spaced: most of any memory is
        unrelated to one question): where this model puts text that does not match, so
        that a floor can be set in it whatever the model. None: too few vectors."""
        import numpy as np

        doc = self._readable()
        if doc is None or int(doc["count"]) < SAMPLE_MIN:
            return None
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        norm = float(np.linalg.norm(q))
        if norm == 0.0 or q.shape[0] != int(doc["model"]["dims"]):
            return None
        try:
            view = self._view(doc)
            chunks = len(view.chunk_start)
            picked = np.linspace(0, chunks - 1, min(SAMPLE_CHUNKS, chunks)).astype(np.int64)
            wanted = np.zeros(chunks, bool)
            wanted[picked] = True
            rows = np.flatnonzero(wanted[view.row_chunk])
            vecs = self._vectors_of(view, rows).astype(np.float32)
        except (IndexUnavailable, FileNotFoundError):
            return None
        norms = np.sqrt(np.einsum("ij,ij->i", vecs, vecs))
        cos = np.einsum("ij,j->i", vecs, q / norm) / np.where(norms > 0, norms, 1.0)
        if len(cos) < SAMPLE_MIN // 2:
            return None
        return float(cos.mean()), float(cos.std())

    def _vectors_of(self, view: _View, rows: Any) -> Any:
        """The int8 vectors of these rows (of the view), from what was decrypted before
        or from their chunks now."""
        import numpy as np

        chunks = view.row_chunk[rows]
        if view.dense is not None:
            # The chunks wanted and not yet read, ascending (np.unique would import
            # numpy.ma, tens of milliseconds of a cold search).
            wanted = np.zeros(len(view.loaded), bool)
            wanted[chunks] = True
            needed = np.flatnonzero(wanted & ~view.loaded)
            if len(needed):
                self._fill_dense(view, needed)
            return view.dense[rows]
        with contextlib.ExitStack() as files:
            fds: dict[int, int] = {}

            def chunk(c: int, cache: bool) -> Any:
                segment = int(view.chunk_segment[c])
                meta = view.metas[segment]
                if segment not in fds:
                    try:
                        f = files.enter_context(fsio.open_regular(self._segment_path(meta.name)))
                    except FileNotFoundError:
                        raise IndexUnavailable(f"vectors/{meta.name}{SEGMENT_SUFFIX} is "
                                               "missing") from None
                    fds[segment] = f.fileno()
                return self._read_chunk(meta, int(view.chunk_index[c]), fds[segment], cache)[1]

            out = np.empty((len(rows), view.dims), np.int8)
            order = np.argsort(chunks, kind="stable")
            bounds = np.flatnonzero(np.diff(chunks[order])) + 1
            for group in np.split(order, bounds):
                c = int(chunks[group[0]])
                out[group] = chunk(c, True)[rows[group] - int(view.chunk_start[c])]
            return out

    # --- the derived-index protocol ----------------------------------------------------

    def is_current(self) -> bool:
        """An empty store is always current (it claims nothing); else its stamp."""
        if not self.manifest_path.exists():
            return True
        if not (self.stamp.present() and self.stored_epoch_or_none() == self.epoch):
            return False
        try:
            self._manifest()
        except _OlderFormat:
            return False
        except IndexUnavailable:
            pass  # damage: verify reports it, a repair drops it
        return True

    def stored_epoch_or_none(self) -> int | None:
        try:
            return self.stored_epoch()
        except IndexUnavailable:
            return None

    def mark_stale(self) -> None:
        if self.dir.exists():
            self.stamp.remove()

    def mark_current(self) -> None:
        if self.manifest_path.exists():
            self.stamp.write()

    def apply(self, upserts: Sequence[Entry], deletes: Sequence[str],
              created: Collection[str] = ()) -> None:
        """Deletes leave; an upsert whose text changed loses its vector (it is embedded
        again); an upsert that moved (to the archive) gets its flag and file. New
        records have no vector yet: nothing to do. Nothing is embedded here."""
        changed = [e for e in upserts if e.record.memory_id not in created]
        if not deletes and not changed:
            return
        doc = self._manifest()
        if doc is None:
            return
        # Only the segments that may hold one of these ids are opened: a write that
        # touches a few records costs the segments they are in, not the store.
        stored = self._digests(doc, {*deletes, *(e.record.memory_id for e in changed)})
        gone = {i for i in deletes if i in stored}
        update: dict[str, tuple[int, str]] = {}
        for entry in changed:
            memory_id = entry.record.memory_id
            if memory_id not in stored:
                continue
            if stored[memory_id] != entry_digest(entry):
                gone.add(memory_id)
            else:
                update[memory_id] = (ARCHIVED if _archived(entry) else 0, _file_of(entry))
        if not gone and not update:
            return
        segments, dropped = self._without(doc, gone, update)
        if dropped:
            self._commit(self._model_of(doc), segments, dropped)

    def rebuild(self, entries: Iterable[Entry]) -> int:
        """Prune to the records there are (never embeds): a vector whose record is gone
        or changed leaves; flags and files follow the records."""
        return self._prune(entries, None)

    def rewrite(self, entries: Iterable[Entry], changed: set[str], kept_line_files: list[str],
                superseded: Callable[[str], bool]) -> int:
        """Prune the vectors of the files in `changed` to `entries` (theirs, re-read);
        vectors of other files stay. A vector whose file is unknown goes unless found."""
        return self._prune(entries, changed)

    def _prune(self, entries: Iterable[Entry], changed: set[str] | None) -> int:
        if not self.manifest_path.exists():
            return 0
        try:
            doc = self._manifest()
        except IndexUnavailable:
            self.clear()  # it cannot be read with this key: derived data, made again
            return 0
        if doc is None:
            return 0
        try:
            stored = self.has()
            metas = self._metas(doc)
        except IndexUnavailable:
            self.clear()
            return 0
        live: dict[str, Entry] = {e.record.memory_id: e for e in entries
                                  if e.record.memory_id in stored}
        gone: set[str] = set()
        update: dict[str, tuple[int, str]] = {}
        for meta in metas:
            for i, f in zip(meta.rows.ids.tolist(), meta.rows.files, strict=True):
                memory_id = i.decode()
                entry = live.get(memory_id)
                if entry is None:
                    if changed is None or f in changed or not f:
                        gone.add(memory_id)
                elif stored[memory_id] != entry_digest(entry):
                    gone.add(memory_id)
                else:
                    update[memory_id] = (ARCHIVED if _archived(entry) else 0, _file_of(entry))
        segments, dropped = self._without(doc, gone, update)
        if dropped:
            self._commit(self._model_of(doc), segments, dropped)
        return sum(int(s["count"]) for s in segments)

    def locate(self, memory_ids: Sequence[str]) -> dict[str, Location]:
        return {}

    # --- verify -------------------------------------------------------------------------

    def verify(self) -> list[str]:
        """What is wrong with the store (a frame that fails authentication, a segment
        cut short or missing, counts that disagree); never raises on damage."""
        problems: list[str] = []
        if not self.dir.exists():
            return problems
        try:
            doc = self._manifest()
        except IndexUnavailable as exc:
            return [str(exc)]
        if doc is None:
            if any(p.name.endswith(SEGMENT_SUFFIX) for p in self.dir.iterdir()):
                problems.append("vectors/ holds segments but no manifest")
            return problems
        total = 0
        for seg in doc["segments"]:
            problems += self._verify_segment(seg)
            total += int(seg["count"])
        if total != int(doc["count"]):
            problems.append(f"vectors/manifest counts {doc['count']} vectors, its segments "
                            f"{total}")
        return problems

    def _verify_segment(self, seg: Mapping[str, Any]) -> list[str]:
        name = str(seg["name"])
        what = f"vectors/{name}{SEGMENT_SUFFIX}"
        _CACHE.metas.pop((str(self.dir), name), None)  # read it from the file again
        try:
            _CACHE.keys.pop((str(self.dir), name), None)
            meta = self._read_meta(seg)
            keys = self._read_keys(seg)
            if not (keys == id_keys(meta.rows.ids.tolist())).all():
                return [f"{what} has keys that do not match its ids"]
            chunks = meta.frames - HEAD_FRAMES
            for j in range(chunks):
                _CACHE.chunks.pop((str(self.dir), name, j), None)
            with fsio.open_regular(self._segment_path(name)) as f:
                for j in range(chunks):
                    self._read_chunk(meta, j, f.fileno())
                size = os.fstat(f.fileno()).st_size
            last = meta.count - (chunks - 1) * CHUNK if chunks else 0
            end = meta.chunk_offset + max(chunks - 1, 0) * self._chunk_frame_size(
                meta.dims, CHUNK) + (self._chunk_frame_size(meta.dims, last) if chunks else 0)
            if size != end:
                return [f"{what} has {size - end} bytes past its last chunk"]
        except IndexUnavailable as exc:
            return [str(exc)]
        except OSError:
            return [f"{what} is unreadable"]
        return []


def stored_vectors(store: VectorStore) -> Iterable[tuple[str, Any]]:
    """(memory_id, float32 vector) of every stored vector, segment by segment (tests and
    the bench compare search with brute force through it)."""
    import numpy as np

    doc = store._readable()
    if doc is None:
        return
    for seg in doc["segments"]:
        rows = store._full_rows(seg)
        assert rows.scales is not None and rows.q is not None
        vecs = rows.q.astype(np.float32) * rows.scales[:, None]
        for i, v in zip(rows.ids.tolist(), vecs, strict=True):
            yield i.decode(), v

