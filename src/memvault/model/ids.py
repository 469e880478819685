"""Record ids held compactly, for the sync's sets of a million of them.

Every id mem makes is a UUIDv7 in its canonical form (lowercase, hyphenated), and an
import takes only canonical UUIDs: such an id is kept as its 16 bytes, not as a Python
string (about 85 bytes, and 8 more for each container that names it). An id of any other
form (a vault written by hand, a test) is kept as it is, beside them, so nothing is lost.

IdList is an immutable sequence of ids (what one object or one line file holds): one
`bytes` of 16 bytes an id. IdSet and IdMap hash the 16 bytes into buckets, one bytearray
a bucket searched with `find`, about 20-30 bytes an id at a million, where a set of
strings takes over 100.

Past a size (SPILL), while a caller has opened a Scratch (`spilling`: a sync does), a
table's ids go to a table on disk and the lists made next keep their ids there, so that
memory holds the scratch's page cache, not the ids: a pull of a million records holds
what one of 200,000 holds. Below it nothing changes.
"""

from __future__ import annotations

import base64
import contextlib
import contextvars
import itertools
import re
import threading
import weakref
from collections.abc import Callable, ItemsView, Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from typing import Any

SIZE = 16
# Ids a table holds in memory; past it (within `spilling`) the table is on disk. The
# lists together hold up to three times as many (a sync's cache names each id
# three times: its object, its file, as held here), so a sync of up to 200,000 records
# spills nothing; past that every list is on disk. Set lower by tests (module
# constants, read when a table grows or a list is made).
SPILL = 200_000
_CHUNK = 4096 * SIZE  # a list's ids on disk, a row each; a table read a page at a time
_ASKED = 500  # ids looked up in a table on disk with one query
# Where ids past SPILL go (None: nowhere, all in memory): the sync's of this thread (two
# syncs on two threads each have their own).
_scratch: contextvars.ContextVar[Scratch | None] = contextvars.ContextVar("ids_scratch",
                                                                         default=None)
# Many ids checked at once, joined: one match in C instead of one call an id.
_ALL_CANONICAL = re.compile(
    r"(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})*")
_PER_BUCKET = 32  # ids a bucket holds on average before the table doubles


def pack(memory_id: str) -> bytes | None:
    """The 16 bytes of a canonical UUID (None: an id of another form, kept as a string)."""
    if len(memory_id) != 36 or memory_id[8] != "-" or memory_id[13] != "-" or \
            memory_id[18] != "-" or memory_id[23] != "-":
        return None
    digits = memory_id.replace("-", "")
    try:
        key = bytes.fromhex(digits)
    except ValueError:
        return None
    # Lowercase, no blanks (fromhex skips them): the id is the key's own spelling.
    return key if key.hex() == digits else None


def unpack(key: bytes) -> str:
    h = key.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _find(buf: bytearray | bytes, key: bytes, width: int) -> int:
    """Where `key` starts a record of `width` bytes in `buf` (-1: it does not)."""
    at = buf.find(key)
    while at >= 0 and at % width:  # a match across two records: look on
        at = buf.find(key, at + 1)
    return at


class Scratch:
    """One SQLite file on disk, opened by `connect` on the first spill (the caller makes
    it unlinked as soon as it is open, with a bounded page cache): a table a spilled
    _Table, and table `l` the chunks of the lists kept there. The ids in it are the ids
    themselves, packed: what the vault's line headers hold in clear."""

    def __init__(self, connect: Callable[[], Any]) -> None:
        self._connect = connect
        self._db: Any = None  # sqlite3.Connection once a table or a list spilled
        self.tables = 0
        self.listed = 0  # ids held in memory by the lists made while it is open
        # those lists (by their id(): a list compares by its ids, and is not hashed)
        self.lists: weakref.WeakValueDictionary[int, IdList] = weakref.WeakValueDictionary()
        self.full = False  # past 3 x SPILL once: every list made since is kept here
        self.freed: list[int] = []  # rows of lists freed since the last kept
        self.open = True
        # Its one connection used by one thread at a time (a pull makes records on a
        # second one while a batch commits): a transaction is never begun twice.
        self.lock = threading.RLock()

    @property
    def db(self) -> Any:
        with self.lock:
            if self._db is None:
                if not self.open:
                    raise RuntimeError("the ids' scratch is closed")
                db = self._connect()
                db.execute("CREATE TABLE l (n INTEGER PRIMARY KEY, b BLOB NOT NULL)")
                self._db = db
            return self._db

    def table(self) -> str:
        with self.lock:
            name = f"t{self.tables}"
            self.tables += 1
            self.db.execute(f"CREATE TABLE {name} (k BLOB PRIMARY KEY, v BLOB NOT NULL) "
                            "WITHOUT ROWID")
            return name

    def held(self, ids: IdList, count: int) -> bool:
        """Whether a list of `count` ids made now is held in memory. Past 3 x SPILL ids
        held by lists, those held move here (the first lists of a sync may be the
        largest: a first pull's summaries) and every list made after them is kept here."""
        if not self.full and self.listed + count <= 3 * SPILL:
            self.listed += count
            self.lists[id(ids)] = ids
            return True
        self.fill()
        return False

    def fill(self) -> None:
        """Every list held in memory moved here, and every list made from now on kept."""
        if not self.full:
            self.full = True
            for held in list(self.lists.values()):
                held._keep(self)
            self.lists = weakref.WeakValueDictionary()
            self.listed = 0

    def keep(self, chunks: Iterable[bytes]) -> tuple[int, ...]:
        """The rows of table `l` these chunks are kept in, in order."""
        with self.lock:
            db = self.db
            db.execute("BEGIN")
            try:
                freed, self.freed = self.freed, []
                db.executemany("DELETE FROM l WHERE n = ?", ((n,) for n in freed))
                return tuple(db.execute("INSERT INTO l (b) VALUES (?)", (chunk,)).lastrowid
                             for chunk in chunks)
            finally:
                db.execute("COMMIT")

    def chunks(self, rows: tuple[int, ...]) -> Iterator[bytes]:
        for n in rows:  # one at a time: a list of a million ids is never read whole
            with self.lock:
                row = self.db.execute("SELECT b FROM l WHERE n = ?", (n,)).fetchone()
            yield bytes(row[0])

    def drop(self, rows: tuple[int, ...]) -> None:
        """Rows no list holds any more, deleted with the next kept (a list is freed at
        any moment, the connection perhaps in the middle of a statement)."""
        self.freed += rows

    def close(self) -> None:
        with self.lock:
            self.open = False
            if self._db is not None:
                self._db.close()
                self._db = None


@contextlib.contextmanager
def spilling(connect: Callable[[], Any]) -> Iterator[Scratch]:
    """Ids past SPILL go to a scratch that `connect` opens when first needed, until the
    end of the block (whatever holds them then can no longer read them)."""
    scratch = Scratch(connect)
    token = _scratch.set(scratch)
    try:
        yield scratch
    finally:
        _scratch.reset(token)
        scratch.close()


class IdList:
    """The ids one object or one line file holds, in their order (those of another form
    after the others). Made while a scratch is open and the lists would hold more than
    3 x SPILL ids in memory, its ids are kept in the scratch (and those of the lists held),
    a chunk a row, read back a chunk at a time."""

    __slots__ = ("__weakref__", "_count", "_in", "_packed", "_rows", "other")

    def __init__(self, packed: bytes = b"", other: tuple[str, ...] = ()) -> None:
        self.other = other
        self._count = len(packed) // SIZE
        self._rows: tuple[int, ...] = ()
        self._packed = packed
        scratch = self._in = _scratch.get()
        if scratch is not None and self._count and not scratch.held(self, self._count):
            self._keep(scratch)

    def _keep(self, scratch: Scratch) -> None:
        """Its ids into the scratch, out of memory."""
        packed = self._packed
        self._rows = scratch.keep(packed[at:at + _CHUNK] for at in range(0, len(packed), _CHUNK))
        self._packed = b""

    @classmethod
    def joined(cls, blocks: Iterable[bytes], other: tuple[str, ...] = ()) -> IdList:
        """An IdList of these blocks of packed ids end to end, never joined in memory
        once they go to a scratch."""
        making = Joining()
        for block in blocks:
            making.add(block)
        return making.done(other)

    def __del__(self) -> None:
        scratch = self._in
        if scratch is not None:
            if self._rows:
                scratch.drop(self._rows)
            elif not scratch.full:
                scratch.listed -= self._count

    @property
    def packed(self) -> bytes:
        """The ids end to end (a list kept in the scratch read whole: chunks() is how
        the sync reads a large one)."""
        if not self._rows:
            return self._packed
        assert self._in is not None
        return b"".join(self._in.chunks(self._rows))

    def chunks(self) -> Iterator[bytes]:
        """The packed ids a block at a time."""
        if not self._rows:
            yield self._packed
            return
        assert self._in is not None
        yield from self._in.chunks(self._rows)

    @classmethod
    def of(cls, ids: Iterable[str]) -> IdList:
        if isinstance(ids, IdList):
            return ids
        ids = ids if isinstance(ids, list | tuple) else list(ids)
        joined = "".join(ids)
        # Every one canonical (most lists): packed in one call.
        if len(joined) == 36 * len(ids) and all(len(i) == 36 for i in ids) and \
                _ALL_CANONICAL.fullmatch(joined):
            return cls(bytes.fromhex(joined.replace("-", "")))
        keys: list[bytes] = []
        other: list[str] = []
        for i in ids:
            key = pack(i)
            if key is None:
                other.append(i)
            else:
                keys.append(key)
        return cls(b"".join(keys), tuple(other))

    def __len__(self) -> int:
        return self._count + len(self.other)

    def __bool__(self) -> bool:
        return bool(self._count or self.other)

    def __iter__(self) -> Iterator[str]:
        for packed in self.chunks():
            for at in range(0, len(packed), SIZE):
                yield unpack(packed[at:at + SIZE])
        yield from self.other

    def __contains__(self, memory_id: object) -> bool:
        if not isinstance(memory_id, str):
            return False
        key = pack(memory_id)
        if key is None:
            return memory_id in self.other
        return any(_find(packed, key, SIZE) >= 0 for packed in self.chunks())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IdList) and (self.packed, self.other) == \
            (other.packed, other.other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"IdList({list(self)!r})"

    def keys(self) -> Iterator[bytes]:
        """The packed ids (those of another form are not among them)."""
        if self._rows:
            return (packed[at:at + SIZE] for packed in self.chunks()
                    for at in range(0, len(packed), SIZE))
        packed = self._packed
        return (packed[at:at + SIZE] for at in range(0, len(packed), SIZE))

    def any_in(self, ids: IdSet) -> bool:
        """Whether any of these ids is in `ids`, without a string made for each."""
        if not ids:
            return False
        if isinstance(ids.table, _Spilled):  # asked a few hundred at a time
            return ids.table.any_of(self.keys()) or any(i in ids for i in self.other)
        has = ids.has_key
        return any(has(key) for key in self.keys()) or any(i in ids for i in self.other)

    def minus(self, held: IdSet) -> list[str]:
        """The ids here not in `held`, compared packed (a string made for each of them)."""
        table = held.table
        if isinstance(table, _Spilled):
            return [unpack(key) for key in table.lacking(self.keys())] + \
                [i for i in self.other if i not in held]
        buckets, mask = table.buckets, table.mask
        out: list[str] = []
        for key in self.keys():
            bucket = buckets.get(hash(key) & mask)
            if bucket is not None:
                found = bucket.find(key)
                if found >= 0 and (not found % SIZE or _find(bucket, key, SIZE) >= 0):
                    continue
            out.append(unpack(key))
        return out + [i for i in self.other if i not in held]

    def to_json(self) -> dict[str, Any]:
        return packed_json(self.packed, self.other)

    @classmethod
    def from_json(cls, doc: Any) -> IdList:
        """An IdList as to_json() wrote it; a list of ids is taken too. ValueError or
        TypeError when it is neither."""
        if isinstance(doc, list):
            return cls.of(str(i) for i in doc)
        return cls(*unjson(doc))


def packed_json(packed: bytes, other: Iterable[str] = ()) -> dict[str, Any]:
    """IdList.to_json() of these ids, without an IdList made."""
    out: dict[str, Any] = {"b": base64.b64encode(packed).decode()}
    if other:
        out["x"] = list(other)
    return out


class Joining:
    """An IdList made a block of packed ids at a time (the cache's ids held here, read a
    line at a time): the blocks go to the scratch once the lists would hold more than
    3 x SPILL ids in memory, and are never joined there."""

    def __init__(self) -> None:
        self.blocks: list[bytes] = []
        self.rows: list[int] = []
        self.count = 0

    def add(self, block: bytes) -> None:
        self.count += len(block) // SIZE
        scratch = _scratch.get()
        if scratch is not None and (self.rows or scratch.full or
                                    scratch.listed + self.count > 3 * SPILL):
            scratch.fill()
            self.rows += scratch.keep([*self.blocks, block])
            self.blocks = []
        else:
            self.blocks.append(block)

    def done(self, other: tuple[str, ...] = ()) -> IdList:
        if not self.rows:
            return IdList(b"".join(self.blocks), other)
        out = IdList(b"", other)
        out._rows, out._count = tuple(self.rows), self.count
        return out


def unjson(doc: Any) -> tuple[bytes, tuple[str, ...]]:
    """The packed ids and the others of an IdList as to_json() wrote it (no list made);
    ValueError or TypeError when it is not one."""
    if not isinstance(doc, dict):
        raise TypeError("not a list of ids")
    packed = base64.b64decode(doc["b"], validate=True)
    other = doc.get("x", [])
    if len(packed) % SIZE or not isinstance(other, list) or \
            not all(isinstance(i, str) and pack(i) is None for i in other):
        raise ValueError("not a list of ids")
    return packed, tuple(other)


def json_default(obj: Any) -> Any:
    """orjson's `default` for what holds ids: an IdList as to_json() writes it."""
    if isinstance(obj, IdList):
        return obj.to_json()
    if isinstance(obj, IdSet):
        return IdList(b"".join(obj.keys()), tuple(obj.other)).to_json()
    raise TypeError(f"{type(obj).__name__} is not JSON")


class _Table:
    """Records of a 16-byte key and `width - 16` bytes of value, in buckets by the key's
    hash: a bucket is one bytearray, searched with `find` (C), so a million keys take
    some 20-30 MB, where a dict or set of their strings takes over 100."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.mask = 0
        self.buckets: dict[int, bytearray] = {}
        self.count = 0

    def _where(self, key: bytes) -> tuple[bytearray | None, int]:
        bucket = self.buckets.get(hash(key) & self.mask)
        if bucket is None:
            return None, -1
        return bucket, _find(bucket, key, self.width)

    def put(self, key: bytes, value: bytes = b"", replace: bool = True) -> bool:
        """Store a key's record (a map's value replaced unless told not to); whether the
        key is new."""
        bucket, at = self._where(key)
        if at >= 0:
            assert bucket is not None
            if value and replace:
                bucket[at + SIZE:at + self.width] = value
            return False
        if bucket is None:
            self.buckets[hash(key) & self.mask] = bytearray(key + value)
        else:
            bucket += key
            bucket += value
        self.count += 1
        if self.count > _PER_BUCKET * (self.mask + 1):
            self._grow()
        return True

    def reserve(self, count: int) -> None:
        """Buckets for `count` keys made now, while empty (not grown to, step by step);
        past SPILL, in a scratch, the table is on disk from the start."""
        if count > SPILL and _scratch.get() is not None:
            self._grow(count)
        elif not self.count:
            while count > _PER_BUCKET * (self.mask + 1):
                self.mask = (self.mask + 1) * 2 - 1

    def put_all(self, packed: bytes, value: bytes = b"") -> None:
        """put() of each key of `packed` (keys end to end) with `value`, keeping a value
        a key has already: one loop here, not a call a key."""
        buckets, mask, width = self.buckets, self.mask, self.width
        limit = _PER_BUCKET * (mask + 1)
        for at in range(0, len(packed), SIZE):
            key = packed[at:at + SIZE]
            slot = hash(key) & mask
            bucket = buckets.get(slot)
            if bucket is None:
                buckets[slot] = bytearray(key + value)
            else:
                found = bucket.find(key)
                if found >= 0 and (not found % width or _find(bucket, key, width) >= 0):
                    continue
                bucket += key
                bucket += value
            self.count += 1
            if self.count > limit:
                self._grow()
                if isinstance(self, _Spilled):  # the rest to the table on disk
                    self.put_all(packed[at + SIZE:], value)
                    return
                buckets, mask = self.buckets, self.mask
                limit = _PER_BUCKET * (mask + 1)

    def get(self, key: bytes) -> bytes | None:
        bucket = self.buckets.get(hash(key) & self.mask)
        if bucket is None:
            return None
        at = bucket.find(key)
        if at % self.width:
            at = _find(bucket, key, self.width)
        return None if at < 0 else bytes(bucket[at + SIZE:at + self.width])

    def has(self, key: bytes) -> bool:
        bucket = self.buckets.get(hash(key) & self.mask)
        if bucket is None:
            return False
        at = bucket.find(key)
        return at >= 0 and (not at % self.width or _find(bucket, key, self.width) >= 0)

    def drop(self, key: bytes) -> bool:
        bucket, at = self._where(key)
        if at < 0:
            return False
        assert bucket is not None
        del bucket[at:at + self.width]
        self.count -= 1
        return True

    def records(self) -> Iterator[bytes]:
        width = self.width
        for bucket in list(self.buckets.values()):
            data = bytes(bucket)
            for at in range(0, len(data), width):
                yield data[at:at + width]

    def _grow(self, count: int = 0) -> None:
        scratch = _scratch.get()
        if scratch is not None and max(count, self.count) > SPILL:
            self._spill(scratch)
            return
        mask = (self.mask + 1) * 2 - 1
        buckets: dict[int, bytearray] = {}
        width = self.width
        for old in self.buckets.values():
            for at in range(0, len(old), width):
                record = old[at:at + width]
                slot = hash(bytes(record[:SIZE])) & mask
                held = buckets.get(slot)
                if held is None:
                    buckets[slot] = record
                else:
                    held += record
        self.buckets, self.mask = buckets, mask

    def _spill(self, scratch: Scratch) -> None:
        """Its records into a table of the scratch, and from now on kept there."""
        name = scratch.table()
        sql = {what: query.replace("{t}", name).replace("{n}", ",".join("?" * _ASKED))
               for what, query in _SQL.items()}
        db = scratch.db
        with scratch.lock:
            db.execute("BEGIN")
            try:
                db.executemany(sql["add"], ((r[:SIZE], r[SIZE:]) for r in self.records()))
            finally:
                db.execute("COMMIT")
        self.buckets, self.mask = {}, 0
        self.__class__ = _Spilled
        assert isinstance(self, _Spilled)
        self.db, self.name, self.sql, self.lock = db, name, sql, scratch.lock


# The statements on a spilled table, named {t} (the scratch's own name for it: t0, t1...),
# {o} another of the same scratch.
_SQL = {
    "add": "INSERT OR IGNORE INTO {t} VALUES (?, ?)",
    "set": "UPDATE {t} SET v = ? WHERE k = ?",
    "get": "SELECT v FROM {t} WHERE k = ?",
    "drop": "DELETE FROM {t} WHERE k = ?",
    "page": "SELECT k, v FROM {t} WHERE k > ? ORDER BY k LIMIT ?",
    "asked": "SELECT k FROM {t} WHERE k IN ({n})",  # _ASKED parameters
    "absent": "SELECT a.k, a.v FROM {t} a WHERE a.k > ? AND NOT EXISTS "
              "(SELECT 1 FROM {o} b WHERE b.k = a.k) ORDER BY a.k LIMIT ?",
}


class _Spilled(_Table):
    """A _Table past SPILL: its records in a table of the scratch (the key its primary
    key), so memory holds the scratch's page cache, not the ids. Read in key order."""

    db: Any
    name: str
    sql: dict[str, str]
    lock: threading.RLock

    def put(self, key: bytes, value: bytes = b"", replace: bool = True) -> bool:
        with self.lock:
            if self.has(key):
                if value and replace:
                    self.db.execute(self.sql["set"], (value, key))
                return False
            self.db.execute(self.sql["add"], (key, value))
            self.count += 1
            return True

    def reserve(self, count: int) -> None:
        pass

    def put_all(self, packed: bytes, value: bytes = b"") -> None:
        with self.lock:
            self.db.execute("BEGIN")
            try:
                added = self.db.executemany(self.sql["add"], (
                    (packed[at:at + SIZE], value) for at in range(0, len(packed), SIZE)))
            finally:
                self.db.execute("COMMIT")
            self.count += max(added.rowcount, 0)

    def get(self, key: bytes) -> bytes | None:
        with self.lock:
            row = self.db.execute(self.sql["get"], (key,)).fetchone()
        return None if row is None else bytes(row[0])

    def has(self, key: bytes) -> bool:
        with self.lock:
            return self.db.execute(self.sql["get"], (key,)).fetchone() is not None

    def drop(self, key: bytes) -> bool:
        with self.lock:
            gone: bool = self.db.execute(self.sql["drop"], (key,)).rowcount > 0
            self.count -= gone
        return gone

    def records(self) -> Iterator[bytes]:
        return self._paged(self.sql["page"])

    def _paged(self, query: str) -> Iterator[bytes]:
        """Key and value of a query's rows as one record, a page at a time (its
        parameters the key to start after and the page's size), never a statement left
        open across a yield."""
        last = b""
        while True:
            with self.lock:
                rows = self.db.execute(query, (last, _CHUNK // SIZE)).fetchall()
            for k, v in rows:
                yield k + v
            if len(rows) < _CHUNK // SIZE:
                return
            last = rows[-1][0]

    def lacking(self, keys: Iterable[bytes]) -> Iterator[bytes]:
        """The keys of `keys` not here, looked up a few hundred at a time."""
        it = iter(keys)
        while asked := list(itertools.islice(it, _ASKED)):
            padded = asked + asked[:1] * (_ASKED - len(asked))  # one statement, prepared once
            with self.lock:
                found = {bytes(k) for k, in self.db.execute(self.sql["asked"], padded)}
            yield from (k for k in asked if k not in found)

    def any_of(self, keys: Iterable[bytes]) -> bool:
        """Whether any of `keys` is here."""
        it = iter(keys)
        while asked := list(itertools.islice(it, _ASKED)):
            padded = asked + asked[:1] * (_ASKED - len(asked))
            with self.lock:
                if self.db.execute(self.sql["asked"], padded).fetchone() is not None:
                    return True
        return False

    def absent_from(self, other: _Table) -> Iterator[bytes]:
        """Its records whose key `other` lacks, in key order."""
        if isinstance(other, _Spilled) and other.db is self.db:  # one query, in C
            yield from self._paged(self.sql["absent"].replace("{o}", other.name))
            return
        has = other.has
        yield from (r for r in self.records() if not has(r[:SIZE]))

    def _grow(self, count: int = 0) -> None:
        pass


def _absent(table: _Table, other: _Table) -> Iterator[bytes]:
    """The records of `table` whose key `other` lacks, either of them on disk."""
    if isinstance(table, _Spilled):
        return table.absent_from(other)
    assert isinstance(other, _Spilled)
    records = list(table.records())  # an in-memory table: at most SPILL records
    found = set(other.lacking(r[:SIZE] for r in records))
    return (r for r in records if r[:SIZE] in found)


class IdSet(AbstractSet[str]):
    """A set of ids, compact (see _Table); ids of another form in a set of strings."""

    def __init__(self, ids: Iterable[str] = ()) -> None:
        self.table = _Table(SIZE)
        self.other: set[str] = set()
        self.update(ids)

    def add(self, memory_id: str) -> None:
        key = pack(memory_id)
        if key is None:
            self.other.add(memory_id)
        else:
            self.table.put(key)

    def update(self, ids: Iterable[str]) -> None:
        if isinstance(ids, IdList | IdSet):  # packed already: no string made
            for block in (ids.chunks() if isinstance(ids, IdList) else ids.blocks()):
                self.table.put_all(block)
            self.other.update(ids.other)
            return
        for i in ids:
            self.add(i)

    def discard(self, memory_id: str) -> None:
        key = pack(memory_id)
        if key is None:
            self.other.discard(memory_id)
        else:
            self.table.drop(key)

    def difference_update(self, ids: Iterable[str]) -> None:
        if isinstance(ids, IdList | IdSet):
            drop = self.table.drop
            for key in ids.keys():
                drop(key)
            self.other.difference_update(ids.other)
            return
        for i in ids:
            self.discard(i)

    def has_key(self, key: bytes) -> bool:
        return self.table.has(key)

    def keys(self) -> Iterator[bytes]:
        """The packed ids (those of another form are not among them)."""
        return self.table.records()

    def blocks(self) -> Iterator[bytes]:
        """The packed ids a bucket at a time, each block their 16 bytes end to end."""
        if isinstance(self.table, _Spilled):  # a page of the table at a time
            keys = self.table.records()
            while block := b"".join(itertools.islice(keys, _CHUNK // SIZE)):
                yield block
            return
        for bucket in list(self.table.buckets.values()):
            yield bytes(bucket)

    def __contains__(self, memory_id: object) -> bool:
        if not isinstance(memory_id, str) or not self:
            return False
        key = pack(memory_id)
        if key is None:
            return memory_id in self.other
        return self.table.has(key)

    def __bool__(self) -> bool:
        return bool(self.table.count or self.other)

    def __iter__(self) -> Iterator[str]:
        for key in self.table.records():
            yield unpack(key)
        yield from list(self.other)

    def __len__(self) -> int:
        return self.table.count + len(self.other)

    def __repr__(self) -> str:
        return f"IdSet({sorted(self)!r})"

    def minus(self, ids: AbstractSet[str] | IdMap) -> list[str]:
        """The ids here that are not in `ids`, tested packed where both are compact (a
        string is made only for each id returned)."""
        if isinstance(ids, IdSet | IdMap) and (isinstance(ids.table, _Spilled) or
                                               isinstance(self.table, _Spilled)):
            out = [unpack(r[:SIZE]) for r in _absent(self.table, ids.table)]
        elif isinstance(ids, IdSet | IdMap):
            table = ids.table
            buckets, mask, width = table.buckets, table.mask, table.width
            out = []
            for key in self.table.records():
                bucket = buckets.get(hash(key) & mask)
                if bucket is None:
                    out.append(unpack(key))
                    continue
                found = bucket.find(key)
                if found < 0 or found % width and _find(bucket, key, width) < 0:
                    out.append(unpack(key))
        else:
            out = [i for i in map(unpack, self.table.records()) if i not in ids]
        return out + [i for i in self.other if i not in ids]


class IdMap(Mapping[str, str]):
    """Each id -> one of a few names (the object that holds a record's latest version):
    the id packed, the name as its number in a list of names."""

    def __init__(self) -> None:
        self.table = _Table(SIZE + 4)
        self.other: dict[str, int] = {}
        self.names: list[str] = []
        self.numbers: dict[str, int] = {}

    def _number(self, name: str) -> int:
        n = self.numbers.get(name)
        if n is None:
            n = self.numbers[name] = len(self.names)
            self.names.append(name)
        return n

    def __setitem__(self, memory_id: str, name: str) -> None:
        n = self._number(name)
        key = pack(memory_id)
        if key is None:
            self.other[memory_id] = n
        else:
            self.table.put(key, n.to_bytes(4, "little"))

    def setdefault_all(self, ids: IdList, name: str) -> None:
        """Each of `ids` -> `name` unless it names one already (packed: no string made)."""
        value = self._number(name).to_bytes(4, "little")
        for packed in ids.chunks():
            self.table.put_all(packed, value)
        n = self.numbers[name]
        for i in ids.other:
            self.other.setdefault(i, n)

    def __getitem__(self, memory_id: str) -> str:
        name = self.get(memory_id)
        if name is None:
            raise KeyError(memory_id)
        return str(name)

    def get(self, memory_id: str, default: Any = None) -> Any:
        key = pack(memory_id)
        if key is None:
            n = self.other.get(memory_id)
            return default if n is None else self.names[n]
        value = self.table.get(key)
        return default if value is None else self.names[int.from_bytes(value, "little")]

    def __contains__(self, memory_id: object) -> bool:
        if not isinstance(memory_id, str):
            return False
        key = pack(memory_id)
        if key is None:
            return memory_id in self.other
        return self.table.has(key)

    def has_key(self, key: bytes) -> bool:
        return self.table.has(key)

    def __iter__(self) -> Iterator[str]:
        for record in self.table.records():
            yield unpack(record[:SIZE])
        yield from list(self.other)

    def __len__(self) -> int:
        return self.table.count + len(self.other)

    def missing_from(self, held: IdSet) -> Iterator[tuple[str, str]]:
        """(id, name) of each id not in `held`, compared packed (a string is made only
        for each id yielded)."""
        names, table = self.names, held.table
        buckets, mask = table.buckets, table.mask
        records = _absent(self.table, table) if isinstance(table, _Spilled) or \
            isinstance(self.table, _Spilled) else self.table.records()
        for record in records:
            key = record[:SIZE]
            bucket = buckets.get(hash(key) & mask)
            if bucket is not None:
                found = bucket.find(key)
                if found >= 0 and (not found % SIZE or _find(bucket, key, SIZE) >= 0):
                    continue
            yield unpack(key), names[int.from_bytes(record[SIZE:], "little")]
        for i, n in list(self.other.items()):
            if i not in held:
                yield i, names[n]

    def items(self) -> ItemsView[str, str]:
        return _Named(self)

    def items_named(self) -> Iterator[tuple[str, str]]:
        """(id, name) of each id, read once each (Mapping.items looks each up again)."""
        names = self.names
        for record in self.table.records():
            yield unpack(record[:SIZE]), names[int.from_bytes(record[SIZE:], "little")]
        for i, n in list(self.other.items()):
            yield i, names[n]


class _Named(ItemsView[str, str]):
    """An IdMap's items, each read once (ItemsView looks each key up again)."""

    def __init__(self, ids: IdMap) -> None:
        super().__init__(ids)
        self.ids = ids

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return self.ids.items_named()
