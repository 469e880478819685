"""Record ids held compactly, for the sync's sets of a million of them.

Every id mem makes is a UUIDv7 in its canonical form (lowercase, hyphenated), and an
import takes only canonical UUIDs: such an id is kept as its 16 bytes, not as a Python
string (about 85 bytes, and 8 more for each container that names it). An id of any other
form (a vault written by hand, a test) is kept as it is, beside them, so nothing is lost.

IdList is an immutable sequence of ids (what one object or one line file holds): one
`bytes` of 16 bytes an id. IdSet and IdMap hash the 16 bytes into buckets, one bytearray
a bucket searched with `find`, about 20-30 bytes an id at a million, where a set of
strings takes over 100.
"""

from __future__ import annotations

import base64
import re
from collections.abc import ItemsView, Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from typing import Any

SIZE = 16
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


class IdList:
    """The ids one object or one line file holds, in their order (those of another form
    after the others)."""

    __slots__ = ("other", "packed")

    def __init__(self, packed: bytes = b"", other: tuple[str, ...] = ()) -> None:
        self.packed, self.other = packed, other

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
        return len(self.packed) // SIZE + len(self.other)

    def __bool__(self) -> bool:
        return bool(self.packed or self.other)

    def __iter__(self) -> Iterator[str]:
        packed = self.packed
        for at in range(0, len(packed), SIZE):
            yield unpack(packed[at:at + SIZE])
        yield from self.other

    def __contains__(self, memory_id: object) -> bool:
        if not isinstance(memory_id, str):
            return False
        key = pack(memory_id)
        if key is None:
            return memory_id in self.other
        return _find(self.packed, key, SIZE) >= 0

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IdList) and (self.packed, self.other) == \
            (other.packed, other.other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"IdList({list(self)!r})"

    def keys(self) -> Iterator[bytes]:
        """The packed ids (those of another form are not among them)."""
        packed = self.packed
        return (packed[at:at + SIZE] for at in range(0, len(packed), SIZE))

    def any_in(self, ids: IdSet) -> bool:
        """Whether any of these ids is in `ids`, without a string made for each."""
        if not ids:
            return False
        has = ids.has_key
        return any(has(key) for key in self.keys()) or any(i in ids for i in self.other)

    def minus(self, held: IdSet) -> list[str]:
        """The ids here not in `held`, compared packed (a string made for each of them)."""
        table = held.table
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
        out: dict[str, Any] = {"b": base64.b64encode(self.packed).decode()}
        if self.other:
            out["x"] = list(self.other)
        return out

    @classmethod
    def from_json(cls, doc: Any) -> IdList:
        """An IdList as to_json() wrote it; a list of ids is taken too. ValueError or
        TypeError when it is neither."""
        if isinstance(doc, list):
            return cls.of(str(i) for i in doc)
        if not isinstance(doc, dict):
            raise TypeError("not a list of ids")
        packed = base64.b64decode(doc["b"], validate=True)
        other = doc.get("x", [])
        if len(packed) % SIZE or not isinstance(other, list) or \
                not all(isinstance(i, str) and pack(i) is None for i in other):
            raise ValueError("not a list of ids")
        return cls(packed, tuple(other))


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
        """Buckets for `count` keys made now, while empty (not grown to, step by step)."""
        if not self.count:
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

    def _grow(self) -> None:
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
            for block in ([ids.packed] if isinstance(ids, IdList) else ids.blocks()):
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
        if isinstance(ids, IdSet | IdMap):
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
        self.table.put_all(ids.packed, self._number(name).to_bytes(4, "little"))
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
        for record in self.table.records():
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
