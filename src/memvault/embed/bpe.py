"""The built-in model's tokenizer for a few short texts, in pure Python.

The tokenizers library takes about 110 ms to load the model's 32,000-token vocabulary and
61,249 merges; a search embeds one short query, and that load alone would make a cold
semantic search 1.5× slower than a lexical one. This reads the same tokenizer file and
applies the same byte-pair merges in the same order (lowest rank first, leftmost first),
so it yields the same ids as the library (tests/test_embed_bpe.py holds it to that over
real transcripts). Long batches still go through the library, which is faster per text.

Only the configuration the built-in model uses is supported: a BPE model with byte
fallback, whose normaliser prepends "▁" and replaces spaces by "▁", no pre-tokeniser.
A text that holds one of the added tokens ("<s>", ...) is left to the library, which
splits those out first.

Parsing that 1.8 MB JSON file and building its two dictionaries still takes 100-200 ms,
a large part of a cold semantic search. So the vocabulary and the merges are also kept as a
derived file in the user's cache folder: sorted tables of UTF-8 keys looked up by binary
search, which load with one read and no parse (a query looks up a few hundred keys). It
is plain binary parsed here (nothing unpickled), names the SHA-256 of the tokenizer file
it was made from (a changed wheel makes it again), and carries a checksum of itself; a
file that fails any check is made again, and one that cannot be written is done without.
It holds the model's vocabulary only, nothing of the user's.
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import heapq
import os
import struct
import sys
from array import array
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

SPACE = "\u2581"  # ▁, SentencePiece's visible space
CACHE_MAGIC = b"memtok01"
CACHE_NAME = "tokenizer-tables.bin"
TABLE_HEAD = struct.Struct("<II")  # keys, bytes of keys
DIGESTS = 64  # the source's SHA-256, then the BLAKE2b-256 of the body


def _utf8(text: str) -> bytes:
    # Keys and lookups alike: a lone surrogate (from a file name, say) is kept, not fatal.
    return text.encode("utf-8", "surrogatepass")


def _little(a: array[int]) -> None:
    """The file's u32s are little-endian: swapped in place on a big-endian machine."""
    if a.itemsize != 4:
        raise ValueError("no 32-bit array type")
    if sys.byteorder == "big":
        a.byteswap()


class Lookup(Protocol):
    def get(self, key: str, default: None = None, /) -> int | None: ...
    def __contains__(self, key: object, /) -> bool: ...
    def __getitem__(self, key: str, /) -> int: ...


class SortedTable:
    """str -> int over UTF-8 keys sorted bytewise, found by binary search: what a
    dictionary answers, without building one."""

    def __init__(self, keys: bytes, offsets: array[int], values: array[int]) -> None:
        if len(offsets) != len(values) + 1 or (values and offsets[-1] != len(keys)):
            raise ValueError("a table's offsets do not match its keys")
        self._keys = keys
        self._offsets = offsets
        self._values = values
        self._key: Callable[[int], bytes] = lambda i: keys[offsets[i]:offsets[i + 1]]
        self._range = range(len(values))

    def _find(self, key: str) -> int | None:
        k = _utf8(key)
        i = bisect.bisect_left(self._range, k, key=self._key)
        if i < len(self._values) and self._key(i) == k:
            return self._values[i]
        return None

    def get(self, key: str, default: None = None, /) -> int | None:
        return self._find(key)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._find(key) is not None

    def __getitem__(self, key: str) -> int:
        found = self._find(key)
        if found is None:
            raise KeyError(key)
        return found

    def __len__(self) -> int:
        return len(self._values)

    @staticmethod
    def pack(items: Iterable[tuple[str, int]]) -> bytes:
        ordered = sorted((_utf8(k), v) for k, v in items)
        offsets = array("I", [0])
        for k, _ in ordered:
            offsets.append(offsets[-1] + len(k))
        values = array("I", [v for _, v in ordered])
        keys = b"".join(k for k, _ in ordered)
        for a in (offsets, values):
            _little(a)
        return TABLE_HEAD.pack(len(values), len(keys)) + offsets.tobytes() \
            + values.tobytes() + keys

    @classmethod
    def unpack(cls, data: memoryview, at: int) -> tuple[SortedTable, int]:
        count, size = TABLE_HEAD.unpack_from(data, at)
        at += TABLE_HEAD.size
        arrays = []
        for n in (count + 1, count):
            a = array("I")
            a.frombytes(data[at:at + 4 * n])
            if len(a) != n:
                raise ValueError("a table is truncated")
            _little(a)
            arrays.append(a)
            at += 4 * n
        keys = bytes(data[at:at + size])
        if len(keys) != size:
            raise ValueError("a table is truncated")
        offsets, values = arrays
        return cls(keys, offsets, values), at + size


class Unsupported(ValueError):
    """The tokenizer file is not of the shape this encoder reproduces."""


class ByteLevelFallbackBPE:
    def __init__(self, vocab: Lookup | Mapping[str, int], ranks: Lookup | Mapping[str, int],
                 added: tuple[str, ...]) -> None:
        self.vocab = vocab
        self.added = added
        # A merge "a b" makes the token a+b; its rank is its place in the file (the
        # file's own strings as keys).
        self.ranks = ranks
        self.unk = "<unk>" if "<unk>" in vocab else None

    @classmethod
    def from_file(cls, path: Path) -> ByteLevelFallbackBPE:
        return cls._parse(path.read_bytes())

    @classmethod
    def _parse(cls, raw: bytes) -> ByteLevelFallbackBPE:
        import orjson

        doc: dict[str, Any] = orjson.loads(raw)
        model = doc.get("model") or {}
        normalizer = doc.get("normalizer") or {}
        steps = normalizer.get("normalizers") if normalizer.get("type") == "Sequence" else None
        expected = [{"type": "Prepend", "prepend": SPACE},
                    {"type": "Replace", "pattern": {"String": " "}, "content": SPACE}]
        merges = model.get("merges")
        if (model.get("type") != "BPE" or not model.get("byte_fallback")
                or model.get("dropout") or model.get("continuing_subword_prefix")
                or model.get("end_of_word_suffix") or doc.get("pre_tokenizer") is not None
                or steps != expected or not isinstance(merges, list)
                or not all(isinstance(m, str) for m in merges[:1])):
            raise Unsupported("not the tokenizer shape this encoder reproduces")
        added = tuple(t["content"] for t in doc.get("added_tokens") or [])
        vocab = model["vocab"]
        if not isinstance(vocab, dict) or not all(
                isinstance(v, int) and 0 <= v < 1 << 32 for v in vocab.values()):
            raise Unsupported("not the tokenizer shape this encoder reproduces")
        # A merge listed twice keeps its later place, as a dict built in file order does.
        return cls(vocab, dict(zip(merges, range(len(merges)), strict=True)), added)

    @classmethod
    def cached(cls, path: Path, cache_dir: Path) -> ByteLevelFallbackBPE:
        """The tokenizer of `path`, from its derived tables in `cache_dir` when they
        were made from this very file, else parsed (and the tables written for the next
        process, if the folder can be written)."""
        raw = path.read_bytes()
        if not cache_dir.is_absolute():  # no home folder: nowhere that is the user's
            return cls._parse(raw)
        source = hashlib.sha256(raw).digest()
        tables = cache_dir / CACHE_NAME
        with contextlib.suppress(OSError, ValueError, struct.error):
            return cls._from_tables(tables.read_bytes(), source)
        bpe = cls._parse(raw)
        with contextlib.suppress(OSError):
            _write_quietly(tables, bpe._tables(source))
        return bpe

    def _tables(self, source: bytes) -> bytes:
        assert isinstance(self.vocab, Mapping) and isinstance(self.ranks, Mapping)
        body = b"".join((SortedTable.pack(self.vocab.items()),
                         SortedTable.pack(self.ranks.items()),
                         SortedTable.pack((a, i) for i, a in enumerate(self.added))))
        return CACHE_MAGIC + source + hashlib.blake2b(body, digest_size=32).digest() + body

    @classmethod
    def _from_tables(cls, data: bytes, source: bytes) -> ByteLevelFallbackBPE:
        head = len(CACHE_MAGIC)
        if data[:head] != CACHE_MAGIC or data[head:head + 32] != source:
            raise ValueError("tables of another tokenizer file")
        body = memoryview(data)[head + DIGESTS:]
        if hashlib.blake2b(body, digest_size=32).digest() != data[head + 32:head + DIGESTS]:
            raise ValueError("damaged tables")
        vocab, at = SortedTable.unpack(body, 0)
        ranks, at = SortedTable.unpack(body, at)
        added, at = SortedTable.unpack(body, at)
        if at != len(body):
            raise ValueError("trailing bytes")
        order = sorted(range(len(added)), key=lambda i: added._values[i])
        return cls(vocab, ranks, tuple(added._key(i).decode("utf-8", "surrogatepass")
                                       for i in order))

    def handles(self, text: str) -> bool:
        return not any(token in text for token in self.added)

    def encode(self, text: str) -> list[int]:
        """The ids the library gives `text` (add_special_tokens=False)."""
        if not text:
            return []
        vocab = self.vocab
        symbols: list[str] = []
        for char in SPACE + text.replace(" ", SPACE):
            if char in vocab:
                symbols.append(char)
                continue
            fallback = [f"<0x{b:02X}>" for b in char.encode("utf-8")]
            if all(f in vocab for f in fallback):
                symbols.extend(fallback)  # byte tokens: no merge applies to them
            elif self.unk is not None and (not symbols or symbols[-1] != self.unk):
                symbols.append(self.unk)  # fuse_unk: a run of unknowns is one <unk>
        return [vocab[s] for s in self._merge(symbols)]

    def _merge(self, symbols: list[str]) -> list[str]:
        """Merge the lowest-ranked adjacent pair first, the leftmost of equal rank first,
        until none applies: the order the library's BPE follows."""
        n = len(symbols)
        nxt = list(range(1, n + 1))
        prev = list(range(-1, n - 1))
        alive = [True] * n
        ranks = self.ranks
        heap: list[tuple[int, int, str]] = []
        for i in range(n - 1):
            pair = f"{symbols[i]} {symbols[i + 1]}"
            rank = ranks.get(pair)
            if rank is not None:
                heap.append((rank, i, pair))
        heapq.heapify(heap)
        while heap:
            rank, pos, pair = heapq.heappop(heap)
            right = nxt[pos]
            if not alive[pos] or right >= n or f"{symbols[pos]} {symbols[right]}" != pair:
                continue  # a stale entry: one side was merged since it was queued
            joined = symbols[pos] + symbols[right]
            symbols[pos] = joined
            alive[right] = False
            nxt[pos] = nxt[right]
            if nxt[pos] < n:
                prev[nxt[pos]] = pos
            for a, b in ((prev[pos], pos), (pos, nxt[pos])):
                if 0 <= a and b < n:
                    candidate = f"{symbols[a]} {symbols[b]}"
                    found = ranks.get(candidate)
                    if found is not None:
                        heapq.heappush(heap, (found, a, candidate))
        return [symbols[i] for i in range(n) if alive[i]]


def _write_quietly(path: Path, data: bytes) -> None:
    """`data` as `path`, whole or not at all (a temp file renamed): a cache, so no fsync."""
    import tempfile  # here: its import (random, shutil) is a tenth of a cold search's load

    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
