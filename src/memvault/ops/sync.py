"""`mem sync`: one user's memory merged with a folder or S3-compatible remote, sealed
end to end (docs/sync.md).

The remote holds immutable sealed operations (add, archive, forget, freeze, destroy)
under opaque names; their merge is a union of grow-only sets, so the order in which
machines sync does not matter. What each listed object holds is cached on this machine
(MAC'd), so a sync reads only the objects it has not seen, and pushes whatever the
remote as listed now lacks: a remote that was rolled back or emptied is filled again.
Pulled operations go through the vault's Transaction; derived data is rebuilt here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memvault.crypto import syncseal
from memvault.errors import (
    EX_TEMPFAIL,
    Busy,
    DataError,
    MemError,
    NotFound,
    Refused,
    StorageError,
)
from memvault.index.base import file_entries
from memvault.model.ids import (
    IdList,
    IdMap,
    IdSet,
    Joining,
    json_default,
    packed_json,
    spilling,
    unjson,
)
from memvault.model.location import session_file
from memvault.model.records import CONTEXT_NEIGHBOURS, DOC_FILES, Record, born, now_iso
from memvault.model.results import SyncAllResult, SyncResult, UserProblem
from memvault.storage import fsio
from memvault.storage.remote import Remote, Unreadable
from memvault.storage.state import Superseded
from memvault.vault.vault import Transaction, Vault

if TYPE_CHECKING:
    from memvault.index.keyed import SearchIndex

# A record on its way out: id, archived, its JSON as sealed here, its version.
Item = tuple[str, bool, bytes, str]
DIR = "u/"  # the remote's directory of users: one sealed entry per user (docs/sync.md)
PAGE = 2000  # records per add object: an upload resumes from the last page sent
# 4: ids packed (IdList.to_json); 3: ids as strings; 2: one JSON document after its MAC;
# 1: inside a JSON object with its MAC
CACHE_FORMAT = 4
IDS_A_LINE = 4096  # ids held here, a line of the cache each (64 KiB packed)
SCRATCH_CACHE_KIB = 2048  # the page cache of the ids kept on disk (ids.SPILL)


def cache_path(vault: Vault) -> Path:
    """Beside the locks, outside the user's directory: a destroy leaves it, so the next
    sync knows to push the destroy."""
    return vault.layout.org_dir / ".sync" / f"{vault.user}.json"


@dataclass
class Cache:
    """What this machine knows of the remote and of itself at its last sync."""

    objects: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> summary
    # ids held here at the last sync (as read back: a list, only ever compared whole)
    local: IdSet | IdList = field(default_factory=IdSet)
    epoch: int = 0  # the local key epoch at the last sync
    keys: set[str] = field(default_factory=set)  # remote key ids seen
    frozen: bool = False
    last_sync: str | None = None
    remote: str | None = None
    # relpath -> [size, mtime_ns, IdList] of the line files at the last sync
    files: dict[str, Any] = field(default_factory=dict)
    # directory entry name -> the namespace of the user it names (entries opened before)
    entries: dict[str, str] = field(default_factory=dict)

    def head(self) -> dict[str, Any]:
        return {"format": CACHE_FORMAT, "epoch": self.epoch, "keys": sorted(self.keys),
                "frozen": self.frozen, "last_sync": self.last_sync, "remote": self.remote,
                "entries": self.entries}

    def lines(self) -> Iterator[bytes]:
        """The cache as JSON lines: its head, then each object's summary, each line
        file's ids and the ids held here a line at a time, so that it is written and
        read as a stream (a million records' cache is over 100 MB)."""
        import orjson

        yield orjson.dumps(self.head()) + b"\n"
        for name, info in self.objects.items():
            yield orjson.dumps(["o", name, info], default=json_default) + b"\n"
        for relpath, known in self.files.items():
            yield orjson.dumps(["f", relpath, known], default=json_default) + b"\n"
        chunk: list[bytes] = []
        size = 0
        held = self.local
        blocks = held.blocks() if isinstance(held, IdSet) else held.chunks()
        for block in blocks:  # packed: no string made for an id
            chunk.append(block)
            size += len(block)
            if size >= IDS_A_LINE * 16:
                yield orjson.dumps(["l", packed_json(b"".join(chunk))]) + b"\n"
                chunk, size = [], 0
        if chunk:
            yield orjson.dumps(["l", packed_json(b"".join(chunk))]) + b"\n"
        if held.other:
            yield orjson.dumps(["l", packed_json(b"", held.other)]) + b"\n"


def _summary_read(info: dict[str, Any]) -> dict[str, Any]:
    """A summary as the cache keeps it, its lists of ids packed again."""
    for key in ("ids", "archived"):
        if key in info:
            info[key] = IdList.from_json(info[key])
    return info


def _read_cache(path: Path, kek: bytes | None, cache: Cache) -> bool:
    """Fill `cache` from the file, line by line as it is read (its last line is the MAC
    of the lines before it); whether it is whole and, given the key, authentic. A cache
    of another format (the one before kept its body whole after the MAC) reads as none."""
    import hmac

    import orjson

    macer = syncseal.cache_macer(kek) if kek is not None else None
    with fsio.open_regular(path) as fh:
        head = fh.readline()
        doc = orjson.loads(head)
        if not isinstance(doc, dict) or doc.get("format") != CACHE_FORMAT:
            return False
        if macer is not None:
            macer.update(head)
        cache.epoch, cache.keys = int(doc["epoch"]), set(doc["keys"])
        cache.frozen, cache.last_sync = bool(doc["frozen"]), doc.get("last_sync")
        cache.remote, cache.entries = doc.get("remote"), dict(doc.get("entries") or {})
        # The ids held here, a line at a time: kept on disk when many (in a sync's
        # scratch), never joined in memory then.
        packed = Joining()
        other: list[str] = []
        line = fh.readline()
        while line:
            after = fh.readline()
            if not after:  # the last line: the MAC
                cache.local = packed.done(tuple(other))
                return macer is None or hmac.compare_digest(line.strip(),
                                                            macer.hexdigest().encode())
            if macer is not None:
                macer.update(line)
            kind, *rest = orjson.loads(line)
            if kind == "o":
                cache.objects[str(rest[0])] = _summary_read(dict(rest[1]))
            elif kind == "f":
                size, mtime, ids = rest[1]
                cache.files[str(rest[0])] = [int(size), int(mtime), IdList.from_json(ids)]
            elif kind == "l":
                block, others = unjson(rest[0])
                packed.add(block)
                other.extend(others)
            else:
                return False
            line = after
    return False  # cut short: no MAC line


def load_cache(path: Path, kek: bytes) -> Cache:
    """The cache, or an empty one (absent, from another key or format, or edited: all of
    these only make the next sync read more)."""
    cache = Cache()
    try:
        if _read_cache(path, kek, cache):
            return cache
    except (OSError, ValueError, KeyError, TypeError, IndexError, DataError):
        pass
    return Cache()


def save_cache(path: Path, kek: bytes, cache: Cache) -> None:
    """Written as it is made, its MAC last (orjson: a first sync's cache names every
    record twice, megabytes at 100,000)."""
    macer = syncseal.cache_macer(kek)

    def parts() -> Iterator[bytes]:
        buffered: list[bytes] = []
        size = 0
        for line in cache.lines():
            macer.update(line)
            buffered.append(line)
            size += len(line)
            if size >= 1 << 18:  # written a quarter of a megabyte at a time
                yield b"".join(buffered)
                buffered, size = [], 0
        yield b"".join(buffered) + macer.hexdigest().encode() + b"\n"

    fsio.ensure_dir(path.parent)
    fsio.atomic_write(path, parts())


def last_sync(vault: Vault) -> dict[str, Any] | None:
    """When this user last synced and with which remote (for doctor and stats); no key
    is needed to read it, and nothing in it is checked."""
    import orjson

    try:
        with fsio.open_regular(cache_path(vault)) as fh:
            doc = orjson.loads(fh.readline())
        if not isinstance(doc, dict) or doc.get("format") != CACHE_FORMAT:
            return None
        return {"at": doc.get("last_sync"), "remote": doc.get("remote")}
    except (OSError, ValueError, KeyError, TypeError, DataError):
        return None


def waiting(vault: Vault) -> int:
    """Records held here that the last sync did not see (what the next one pushes). The
    cache's list of line files spares the headers of those unchanged since, as a sync's
    scan does, so `doctor` reads O(what changed); a count shown, not a sync's decision,
    so its MAC (which needs the key) is not checked."""
    cache = Cache()
    try:
        read = _read_cache(cache_path(vault), None, cache)
    except (OSError, ValueError, KeyError, TypeError, IndexError, DataError):
        read = False
    seen, memo = (IdSet(cache.local), cache.files) if read else (IdSet(), None)
    return len(scan_local(vault, memo).ids.minus(seen))


@dataclass
class Held:
    """The ids this machine holds, and those of them archived, compact (a million ids
    are some 25 MB, not the 130 of a dict of their strings)."""

    ids: IdSet = field(default_factory=IdSet)
    archived: IdSet = field(default_factory=IdSet)

    def __contains__(self, memory_id: object) -> bool:
        return memory_id in self.ids

    def __iter__(self) -> Iterator[str]:
        return iter(self.ids)

    def __len__(self) -> int:
        return len(self.ids)

    def get(self, memory_id: str) -> bool | None:
        """Whether a record held here is archived (None: not held)."""
        return (memory_id in self.archived) if memory_id in self.ids else None


def scan_local(vault: Vault, memo: dict[str, Any] | None = None,
               changed: set[str] | None = None) -> Held:
    """Every record id this machine holds, and which are archived: clear ids only (line
    headers, the two small documents), nothing else decrypted. `memo` (relpath ->
    [size, mtime_ns, IdList]) spares the headers of line files unchanged since it was
    filled, so a sync reads O(what changed); `changed` collects the files read again."""
    out = Held()
    if not vault.exists():
        return out
    store, layout = vault.store, vault.layout
    if memo:  # about as many as the last scan found
        out.ids.table.reserve(sum(len(known[2]) for known in memo.values()))
    for home in DOC_FILES:
        out.ids.update(r.memory_id for r in store.doc_records(home))
    seen: set[str] = set()
    for archived in (False, True):  # a record caught in both is archived
        for relpath in layout.line_files(archived=archived):
            seen.add(relpath)
            ids = _line_ids(vault, relpath, memo, changed)
            out.ids.update(ids)
            if archived:
                out.archived.update(ids)
    if memo is not None:
        for gone in set(memo) - seen:
            del memo[gone]
    return out


def _line_ids(vault: Vault, relpath: str, memo: dict[str, Any] | None,
              changed: set[str] | None = None) -> IdList:
    if memo is None:
        return IdList.of(vault.store.line_ids(relpath))
    try:
        st = vault.layout.path(relpath).stat()
    except FileNotFoundError:
        return IdList()
    known = memo.get(relpath)
    if known is not None and known[0] == st.st_size and known[1] == st.st_mtime_ns:
        ids: IdList = known[2]
        return ids
    ids = IdList.of(vault.store.line_ids(relpath))
    memo[relpath] = [st.st_size, st.st_mtime_ns, ids]
    if changed is not None:
        changed.add(relpath)
    return ids


def version(record: dict[str, Any]) -> str:
    """A record's version: when it last changed after it was made (a transcript message
    that grew, a restated fact), else "". Of two copies of one id, the later wins."""
    updated, created = str(record.get("updated_at") or ""), str(record.get("created_at"))
    return updated if updated > created else ""


def _plain_version(plain: bytes, created_at: str) -> str:
    """version() of a record's JSON as orjson seals it, found without a parse (a quote
    inside a string is escaped, so this field's opening is never content)."""
    at = plain.find(b'"updated_at":"')
    if at < 0:
        return version(json.loads(plain))
    updated = plain[at + 14:plain.index(b'"', at + 14)].decode()
    return updated if updated > created_at else ""


def _summary(body: dict[str, Any]) -> dict[str, Any]:
    """What the cache keeps of an object: its kind and the ids it names, no content."""
    kind = str(body.get("kind"))
    out: dict[str, Any] = {"kind": kind, "at": str(body.get("at", ""))}
    if kind == "add":
        ids: list[str] = []
        archived: list[str] = []
        versions: dict[str, str] = {}
        for item in body["records"]:  # one pass: a first pull summarises every record
            record = item["r"]
            i = str(record["memory_id"])
            ids.append(i)
            if item.get("a"):
                archived.append(i)
            updated = record.get("updated_at")
            if updated and str(updated) > str(record.get("created_at")):
                versions[i] = str(updated)
        out["ids"], out["archived"] = IdList.of(ids), IdList.of(archived)
        out["v"] = versions
    elif kind in ("archive", "forget"):
        out["ids"] = IdList.of(str(i) for i in body["ids"])
        if kind == "forget":
            out["marks"] = [str(m) for m in body.get("marks", [])]
    elif kind == "freeze":
        out["frozen"] = bool(body["frozen"])
    elif kind == "prefs":
        keys: dict[str, list[str]] = {}
        for e in body["entries"]:
            order = [str(e["at"]), str(e["o"])]
            if order > keys.get(str(e["t"]), ["", ""]):
                keys[str(e["t"])] = order
        out["keys"] = keys
    elif kind != "destroy":
        raise DataError(f"an object of unknown kind {kind!r}")
    return out


class Directory:
    """The remote's directory of users: an entry per user, sealed under a key of its
    own and named at random, so that a machine that never held a user finds it."""

    def __init__(self, remote: Remote, master: bytes) -> None:
        self.remote, self.key = remote, syncseal.dir_key(master)
        self.kek = syncseal.sync_kek(master)
        self.damaged = 0
        self.listed: list[str] = []  # the entries known() listed
        self.named: dict[str, tuple[str, str]] = {}  # (org, user) of each entry opened

    def names(self) -> list[str]:
        return [n for n in self.remote.list(DIR) if n.startswith(DIR) and
                "/" not in n[len(DIR):]]

    def open(self, names: Iterable[str], pool: Executor | None = None
             ) -> dict[str, tuple[str, str]]:
        """(org, user) of each entry that opens; one of another master key is refused
        before anything changes, a damaged one counted and skipped."""
        names = list(names)
        opened = list(pool.map(self._open, names) if pool is not None and len(names) > 1
                      else map(self._open, names))
        self.damaged += sum(o is None for o in opened)
        found = {n: o for n, o in zip(names, opened, strict=True) if o is not None}
        self.named.update(found)
        return found

    def _open(self, name: str) -> tuple[str, str] | None:
        from memvault.config import validate_name
        from memvault.errors import UsageError

        try:
            org, user = syncseal.open_entry(self.key, name[len(DIR):], self.remote.get(name))
            return validate_name("org", org), validate_name("user", user)
        except syncseal.SyncForeignError:
            raise Refused(f"the remote {self.remote.url} holds a directory of users this "
                          "master key does not open: it is another vault's remote, or was "
                          "tampered with; nothing was changed", field="remote") from None
        except (syncseal.SyncAuthError, NotFound, UsageError):
            return None

    def known(self, cached: dict[str, str], pool: Executor | None = None) -> dict[str, str]:
        """Every listed entry -> the namespace it names: the cached ones as they were,
        the others opened now (an entry never changes under its name)."""
        names = self.listed = self.names()
        out = {n: cached[n] for n in names if n in cached}
        for name, (org, user) in self.open((n for n in names if n not in out), pool).items():
            out[name] = syncseal.namespace(self.kek, org, user)
        return out

    def add(self, org: str, user: str) -> str:
        oid = syncseal.new_object_id()
        self.remote.put(DIR + oid, syncseal.seal_entry(self.key, oid, org, user))
        return DIR + oid


class Session:
    """One user's sync against one remote: the keys checked, the listing read. Uploads
    and downloads run on `remote.workers` threads (an S3 request waits on the network;
    a folder's writes stay in order, one at a time)."""

    def __init__(self, vault: Vault, remote: Remote) -> None:
        self.vault, self.remote = vault, remote
        self.kek = syncseal.sync_kek(vault.master.key)
        self.ns = syncseal.namespace(self.kek, vault.org, vault.user)
        self.keys: dict[str, tuple[bytes, str]] = {}
        self.damaged = 0
        # Objects of a known format, under a key this machine holds, that do not open:
        # cut short or altered, never to open again. Deleted at the end of the sync, so
        # that every machine that holds their records (and cached them as there) sees
        # them gone and sends those records again.
        self.broken: list[str] = []
        self.deleted = 0
        self.uploaded = 0
        self.pool: Executor | None = None
        self.pending: list[Future[None]] = []
        self.entries: dict[str, str] | None = None
        self.directory: Directory | None = None  # as this user's sync read it

    def __enter__(self) -> Session:
        if self.remote.workers > 1:
            from concurrent.futures import ThreadPoolExecutor

            self.pool = ThreadPoolExecutor(self.remote.workers, "mem-sync")
        return self

    def __exit__(self, *exc: object) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)

    # --- the remote -----------------------------------------------------------------------

    def listing(self) -> tuple[list[str], list[str]]:
        keys, objects = [], []
        for name in self.remote.list(self.ns + "/"):
            if name.startswith(f"{self.ns}/k/"):
                keys.append(name.rsplit("/", 1)[1])
            elif name.startswith(f"{self.ns}/o/"):
                objects.append(name)
        return keys, objects

    def check_keys(self, kids: Iterable[str]) -> None:
        """Unwrap every key before anything changes: a key made under another master key
        means another vault's remote (or a tampered one), and nothing is touched."""
        for kid in kids:
            if kid in self.keys:
                continue
            try:
                blob = self.remote.get(f"{self.ns}/k/{kid}")
            except Unreadable:  # not a key object (a pipe, a link, too large): counted
                self.damaged += 1
                continue
            except NotFound:
                continue
            try:
                self.keys[kid] = syncseal.unwrap_key(self.kek, self.ns, kid, blob)
            except syncseal.SyncAuthError:
                raise Refused(f"the remote {self.remote.url} holds keys this master key does "
                              "not open: it is another vault's remote, or was tampered "
                              "with; nothing was changed", field="remote") from None

    def newest_key(self) -> str | None:
        if not self.keys:
            return None
        return max(self.keys, key=lambda kid: (self.keys[kid][1], kid))

    def new_key(self) -> str:
        import os

        kid, key, at = syncseal.new_key_id(), os.urandom(32), now_iso()
        self.remote.put(f"{self.ns}/k/{kid}",
                        syncseal.wrap_key(self.kek, self.ns, kid, key, at))
        self.keys[kid] = (key, at)
        return kid

    def read(self, name: str) -> dict[str, Any] | None:
        """An object's body, or None (counted as damaged) when it is gone, under a key
        this remote no longer has, cut short or altered."""
        body = self._open(name)
        if body is None:
            self.damaged += 1
        return body

    def _open(self, name: str) -> dict[str, Any] | None:
        return self._fetch(name)[0]

    def _fetch(self, name: str) -> tuple[dict[str, Any] | None, bytes]:
        """An object's body (None: it does not open) and the sealed bytes fetched."""
        blob = self._get(name)
        return self._opened(name, blob), blob

    def _get(self, name: str) -> bytes:
        """An object's sealed bytes (b"": under no key held here, gone or unreadable)."""
        if name.rsplit("/", 1)[1].partition("-")[0] not in self.keys:
            return b""
        try:
            return self.remote.get(name)
        except (NotFound, DataError):
            return b""

    def _opened(self, name: str, blob: bytes) -> dict[str, Any] | None:
        return self._summarised(name, blob)[0]

    def _summarised(self, name: str, blob: bytes) -> tuple[dict[str, Any] | None,
                                                           dict[str, Any]]:
        """An object's body (None: it does not open, or is not of a known shape) and
        its summary, made once (a first pull summarises every record)."""
        if not blob:
            return None, {}
        try:
            body = self.open_blob(name, blob, check=False)
            return body, _summary(body)
        except syncseal.SyncAuthError:
            if syncseal.of_known_format(blob):
                self.broken.append(name)
            return None, {}
        except (DataError, KeyError, TypeError):
            return None, {}

    def open_blob(self, name: str, blob: bytes, check: bool = True) -> dict[str, Any]:
        """An object's body; `check`: its shape too (not again for one checked when it
        was fetched, kept sealed since)."""
        kid, _, oid = name.rsplit("/", 1)[1].partition("-")
        body = syncseal.open_object(self.keys[kid][0], self.ns, kid, oid, blob)
        if check:
            _summary(body)
        return body

    def fetch_new(self, names: list[str]) -> Iterator[tuple[str, dict[str, Any] | None,
                                                            bytes, dict[str, Any]]]:
        """(name, body or None, sealed bytes, summary) of each object, in order: fetched
        on the workers a few ahead of the one taken (so the network's waits overlap the
        opening), opened here one at a time as the caller takes them, so a first pull
        holds one object opened (an add's page parsed is ten times its JSON), and its
        pages are parsed on this thread, not in a memory pool of each worker's."""
        from collections import deque

        pool = self.pool
        ahead: deque[tuple[str, Future[bytes] | None]] = deque()
        rest = iter(names)

        def ask(name: str) -> None:
            ahead.append((name, pool.submit(self._get, name) if pool is not None else None))

        for name in itertools.islice(rest, 2 * self.remote.workers):
            ask(name)
        while ahead:
            name, fetching = ahead.popleft()
            blob = fetching.result() if fetching is not None else self._get(name)
            following = next(rest, None)
            if following is not None:
                ask(following)
            body, summary = self._summarised(name, blob)
            if body is None:
                self.damaged += 1
            yield name, body, blob, summary
            del body

    def write(self, kid: str, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        import orjson

        body = {**body, "at": body.get("at") or now_iso()}
        return self._put(kid, orjson.dumps(body), _summary(body))

    def write_add(self, kid: str, items: list[Item]) -> tuple[str, dict[str, Any]]:
        """An add of records given as (id, archived, the record's JSON as sealed here, its
        version): spliced into the operation's JSON as they are, never parsed."""
        at = now_iso()
        raw = b"".join((b'{"kind":"add","at":"', at.encode(), b'","records":[',
                        b",".join(b'{"r":%s,"a":%s}' % (plain, b"true" if archived
                                                          else b"false")
                                  for _, archived, plain, _ in items), b"]}"))
        return self._put(kid, raw, {"kind": "add", "at": at,
                                    "ids": IdList.of(item[0] for item in items),
                                    "archived": IdList.of(i for i, a, _, _ in items if a),
                                    "v": {i: v for i, _, _, v in items if v}})

    def _put(self, kid: str, raw: bytes, info: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        oid = syncseal.new_object_id()
        name = f"{self.ns}/o/{kid}-{oid}"
        key = self.keys[kid][0]

        def upload() -> None:
            self.remote.put(name, syncseal.seal_json(key, self.ns, kid, oid, raw))

        if self.pool is None:
            upload()
        else:
            # Sealing (zlib and AES release the GIL) and the request run on a worker; a
            # bounded queue keeps a first sync's memory to a few pages.
            if len(self.pending) >= 2 * self.remote.workers:
                self.pending.pop(0).result()
            self.pending.append(self.pool.submit(upload))
        self.uploaded += 1
        return name, info

    def flush(self) -> None:
        """Wait for every upload: before anything is deleted or the cache says it is so."""
        while self.pending:
            self.pending.pop(0).result()


class Fetched:
    """The objects this sync read for the first time. Small ones (forgets, archives,
    preferences, freezes, destroys) are kept opened; an add is kept as it was fetched,
    sealed and compressed (a tenth of its records' JSON), within a budget, and opened
    again when its records are wanted; past the budget it is fetched again. A first
    pull's memory stays flat however many records the remote holds."""

    BUDGET = 24 << 20  # bytes of sealed adds kept (some 180,000 records)

    def __init__(self, s: Session) -> None:
        self.s = s
        self.opened: dict[str, dict[str, Any]] = {}
        self.sealed: dict[str, bytes] = {}
        self.sealed_bytes = 0
        self.adds: set[str] = set()

    def keep(self, name: str, body: dict[str, Any], blob: bytes) -> None:
        if body["kind"] != "add":
            self.opened[name] = body
            return
        self.adds.add(name)
        if self.sealed_bytes + len(blob) <= self.BUDGET:
            self.sealed[name] = blob
            self.sealed_bytes += len(blob)

    def __contains__(self, name: object) -> bool:
        return name in self.opened or name in self.adds

    def release(self) -> None:
        """Keep no add sealed any more (the pull is done)."""
        self.sealed.clear()
        self.sealed_bytes = 0

    def get(self, name: str, last: bool = False) -> dict[str, Any] | None:
        """The body of an object (None: it no longer opens), from what was kept or
        fetched again; any object, read now or not. `last`: not kept sealed any more
        (its records are taken: the rest of a pull holds less)."""
        if name in self.opened:
            return self.opened[name]
        blob = self.sealed.pop(name, None) if last else self.sealed.get(name)
        if last and blob is not None:
            self.sealed_bytes -= len(blob)
        if blob is not None:
            try:
                return self.s.open_blob(name, blob, check=False)
            except (syncseal.SyncAuthError, DataError, KeyError, TypeError):
                return None
        return self.s.read(name)

    def of_kind(self, kind: str) -> Iterator[dict[str, Any]]:
        """The small objects of a kind read now (not adds)."""
        return (b for b in self.opened.values() if b["kind"] == kind)


def _pages(items: list[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    for at in range(0, len(items), PAGE):
        yield items[at:at + PAGE]


def sync(vault: Vault, remote: Remote,
         entries: dict[str, str] | None = None) -> SyncResult:
    """Merge this user's memory with the remote, both ways. `entries`: the directory of
    users as `--all-users` read it a moment ago (else it is listed here)."""
    session = Session(vault, remote)
    session.entries = entries
    path = cache_path(vault)
    fsio.ensure_dir(path.parent)
    with fsio.locked(path.with_suffix(".lock"), vault.settings.lock_timeout,
                     f"the sync of user {vault.who}"), session, _ids_past_memory(path):
        result = _sync(session, path)
        d = session.directory
        if d is not None and not vault.exists():
            # Nothing of this user here or there (a new machine with another login
            # name): the users the remote does hold. The sync opened the entries it had
            # not cached; the cached ones are opened in this case only.
            d.open([n for n in d.listed if n not in d.named], session.pool)
            others = {f"{org}/{user}" for org, user in d.named.values()} - {vault.who}
            result = dataclasses.replace(result, others=tuple(sorted(others)))
        return result


@contextlib.contextmanager
def _ids_past_memory(cache: Path) -> Iterator[None]:
    """The sync's large sets of ids (past ids.SPILL: the listing's map, the ids held
    here, the lists of the summaries, the scan and the cache) kept in a scratch SQLite
    file beside the cache, on the vault's disk (a temporary folder may be memory),
    unlinked as soon as it is open: memory holds its page cache, and nothing is left,
    even by a kill. The ids in it are the ids themselves, as the line headers and the
    cache hold them. One a kill left before its unlink is removed here, under the lock."""
    import sys

    folder, user = cache.parent, cache.stem

    # "+" is in no user's name: no other user's scratch is taken for a stale one.
    for stale in folder.glob(f"{fsio.TMP_PREFIX}ids.{user}+*"):
        stale.unlink(missing_ok=True)

    def connect() -> Any:  # sqlite3 imported only by a sync that spills
        import os
        import sqlite3
        import time

        path = folder / f"{fsio.TMP_PREFIX}ids.{user}+{os.getpid()}.{time.monotonic_ns()}"
        try:
            db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            try:
                for pragma in ("journal_mode=OFF", "synchronous=OFF", "locking_mode=EXCLUSIVE",
                               f"cache_size=-{SCRATCH_CACHE_KIB}", "temp_store=FILE",
                               "user_version=1"):  # the last writes it: a file to unlink
                    db.execute(f"PRAGMA {pragma}")
            except sqlite3.Error:
                db.close()
                raise
        finally:
            path.unlink(missing_ok=True)  # open: it lives on in the open file
        return db

    try:
        with spilling(connect):
            yield
    except Exception as exc:
        sqlite3 = sys.modules.get("sqlite3")
        if sqlite3 is None or not isinstance(exc, sqlite3.Error):
            raise
        raise StorageError(f"the sync's temporary table of ids in {folder} failed: "
                           f"{exc}") from None


def _sync(s: Session, path: Path) -> SyncResult:
    vault, remote = s.vault, s.remote
    cache = load_cache(path, s.kek)
    if cache.remote is not None and same_remote(cache.remote) != remote.url:
        cache = Cache()  # another remote: what this cache says of it is not true there
    # This machine's records first (read only): an S3 client is still being made on a
    # thread meanwhile, and the listing waits for it.
    memo = cache.files
    changed: set[str] = set()
    local0 = scan_local(vault, memo, changed)
    kids, names = s.listing()
    s.check_keys(kids)  # first, before anything changes
    directory = Directory(remote, vault.master.key)
    # One more small listing; an entry is opened once, then its name is cached.
    if s.entries is not None:  # --all-users read the directory a moment ago
        entries = dict(s.entries)
    else:
        entries = directory.known(cache.entries, s.pool)
        s.directory = directory
    s.damaged += directory.damaged

    current = {name: cache.objects[name] for name in names if name in cache.objects}
    bodies = Fetched(s)
    for name, body, blob, summary in s.fetch_new([n for n in names if n not in cache.objects]):
        if body is not None:
            current[name] = summary
            bodies.keep(name, body, blob)
    if sum(len(current[n]["ids"]) for n in bodies.adds) >= BATCH:
        # A large pull: what each object holds is true whatever this sync does next, so
        # one killed from here on fetches no object again to learn it (the rest of the
        # cache is left as the last sync saw it).
        save_cache(path, s.kek, dataclasses.replace(cache, objects=current,
                                                    remote=remote.url))

    # Destroys are judged by their time against each record's (records.born), never by
    # whether this machine saw them before: one made elsewhere after the last destroy
    # applied here erases what was stored before it, and keeps what came after (a new
    # machine's own records). A destroy made or applied here that the remote lacks
    # (never sent, or the remote rolled back) is sent again.
    from memvault.ops import admin

    remote_destroy = max((i["at"] for i in current.values() if i["kind"] == "destroy"),
                         default="")
    here_destroy = admin.destroyed_at(vault)
    destroyed_here = 0
    if remote_destroy > here_destroy:
        destroyed_here = _apply_destroy(vault, remote_destroy, local0)
        local0 = scan_local(vault, memo, changed)
    cut = max(remote_destroy, here_destroy)  # a record stored at or before it is gone
    backwards = _went_back(cache, current, cut)

    state = vault.state() if vault.exists() else None
    epoch0 = state.key_version if state else 0
    deleted_here = set(cache.local.minus(local0.ids))

    remote_ids = IdMap()  # id -> the object that holds its latest version
    remote_ids.table.reserve(sum(len(i["ids"]) for i in current.values() if i["kind"] == "add"))
    remote_versions: dict[str, str] = {}  # id -> that version, when not ""
    remote_archived = IdSet()
    remote_tombs: set[str] = set()
    remote_marks: set[str] = set()
    for name, info in current.items():
        if info["kind"] == "add":
            versions = info.get("v", {})
            if not versions:  # most objects: an id seen before keeps its first object
                remote_ids.setdefault_all(info["ids"], name)
                remote_archived.update(info["archived"])
                continue
            for i in info["ids"]:
                v = versions.get(i, "")
                if i not in remote_ids or v > remote_versions.get(i, ""):
                    remote_ids[i] = name
                    if v:
                        remote_versions[i] = v
            remote_archived.update(info["archived"])
        elif info["kind"] == "archive":
            remote_archived.update(info["ids"])
        elif info["kind"] == "forget":
            remote_tombs.update(info["ids"])
            remote_marks.update(info.get("marks", []))
    dead = {i for i in remote_ids if born(i) <= cut} if cut else set()  # destroyed
    # The erasure ledger (state.json) holds every id erased here or pulled as erased:
    # a cache removed, another spelling of the remote, or a remote rolled back cannot
    # bring one back, and each is sent again while the remote lacks it.
    tombs = remote_tombs | dead | deleted_here | (state.erased if state else set())

    # --- pull ---------------------------------------------------------------------------
    pulled = _pull_adds(s, bodies, current, remote_ids, local0.ids, tombs, memo)
    updated = _pull_updates(s, bodies, current, remote_ids, local0.ids, tombs, memo)
    bodies.release()  # what is written again below is fetched again
    local = scan_local(vault, memo) if pulled else local0
    archive_here = {i for i in remote_archived if local.get(i) is False} - tombs
    if archive_here:
        _archive_here(vault, archive_here)
    forget_here = {i for i in remote_tombs if i in local} - deleted_here
    forgotten = _forget_here(vault, forget_here) if forget_here else 0
    state = vault.state() if vault.exists() else None
    if state is not None and (remote_marks - state.forgotten or remote_tombs - state.erased):
        with vault.transaction(allow_frozen=True) as tx:
            tx.state.forgotten |= remote_marks
            tx.state.erased |= remote_tombs
            tx.touch()
    remote_prefs: dict[str, list[str]] = {}
    for info in current.values():
        if info["kind"] == "prefs":
            for t, order in info["keys"].items():
                if order[0] > cut and order > remote_prefs.get(t, ["", ""]):
                    remote_prefs[t] = order
    prefs_pulled = _pull_prefs(s, bodies, cut)
    freezes = sorted(((i["at"], n, i["frozen"]) for n, i in current.items()
                      if i["kind"] == "freeze" and i["at"] > cut))
    # Without a cache (its first sync, or one dropped) this machine cannot tell its flag
    # changed: the remote's latest freeze, when there is one, decides.
    frozen_changed_here = state is not None and state.frozen != cache.frozen and (
        cache.last_sync is not None or not freezes)
    if freezes and not frozen_changed_here and state is not None \
            and freezes[-1][2] != state.frozen:
        _set_frozen(vault, freezes[-1][2])

    # A newer remote key made by another machine's new epoch: this machine's old data
    # keys go too (re-encrypt under a new epoch of its own).
    newest = s.newest_key()
    rotated_here = bool(cache.epoch) and epoch0 > cache.epoch
    reencrypted = False
    if newest and cache.keys and newest not in cache.keys and not rotated_here \
            and vault.exists():
        from memvault.ops import keys

        with vault.transaction(allow_frozen=True) as tx:
            keys.reencrypt(tx, rewrite=True)
        reencrypted = True
    rebuild_derived(vault, bool(pulled or updated or archive_here or forgotten))

    # --- push ---------------------------------------------------------------------------
    # Scanned again only when this sync changed records here since the scan after the
    # pull (a record another process adds meanwhile goes with the next sync either way).
    # No set of every id held is made below: a million ids is 35 MB a set.
    local1 = local
    if updated or archive_here or forget_here or reencrypted:
        local = Held()
        local1 = scan_local(vault, memo)
    state = vault.state() if vault.exists() else None
    # erased while applying (summaries made from them)
    tombs.update(local0.ids.minus(local1.ids))
    # A destroy the remote lacks goes under a new key: every object is written again
    # without what it erased, and the old keys go, so no old copy opens any more.
    resend_destroy = here_destroy > remote_destroy
    if newest is None or rotated_here or resend_destroy:
        newest = s.new_key()
    push_ids = {i for i in local1.ids.minus(remote_ids) if i not in tombs and
                (not cut or born(i) > cut)}
    push_tombs = tombs - remote_tombs - dead
    push_marks = (state.forgotten if state else set()) - remote_marks
    push_archived = {i for i in local1.archived.minus(remote_archived) if i in remote_ids}

    written: dict[str, dict[str, Any]] = {}
    page: list[Item] = []
    grown = _grown_here(vault, changed & memo.keys(),
                        lambda i: i in remote_ids and i not in tombs, remote_versions, memo)
    # Read lazily: each page is sealed and sent on the workers while the next one is
    # decrypted here, and at most a few pages are held at once.
    for item in itertools.chain(_sealed(vault, push_ids, memo), grown):
        page.append(item)
        if len(page) == PAGE:
            name, info = s.write_add(newest, page)
            written[name] = info
            page = []
    if page:
        name, info = s.write_add(newest, page)
        written[name] = info
    if push_archived:
        name, info = s.write(newest, {"kind": "archive", "ids": sorted(push_archived)})
        written[name] = info
    if resend_destroy:
        name, info = s.write(newest, {"kind": "destroy", "at": here_destroy})
        written[name] = info
    if push_tombs or push_marks:
        name, info = s.write(newest, {"kind": "forget", "ids": sorted(push_tombs),
                                      "marks": sorted(push_marks)})
        written[name] = info
    if state is not None and frozen_changed_here:
        name, info = s.write(newest, {"kind": "freeze", "frozen": state.frozen})
        written[name] = info
    push_prefs = [e for e in _pref_entries(s) if [e["at"], e["o"]] >
                  remote_prefs.get(e["t"], ["", ""])]
    if push_prefs:
        name, info = s.write(newest, {"kind": "prefs", "entries": push_prefs})
        written[name] = info
    s.flush()
    current.update(written)
    # Erasure and new epochs: every object that holds a forgotten record, or is sealed
    # under an older key, is written again without it under the newest key, then deleted.
    current = _repack(s, newest, current, bodies, tombs, cut)
    for name in sorted(set(s.broken) - current.keys()):
        s.remote.delete(name)
        s.deleted += 1

    cache.objects = current
    cache.local = local1.ids  # not copied: a million ids
    cache.epoch = state.key_version if state else 0
    cache.keys = set(s.keys)
    cache.frozen = state.frozen if state else False
    cache.last_sync, cache.remote = now_iso(), remote.url
    cache.entries = _list_user(s, directory, entries, bool(cut))
    _retire_keys(s, newest)  # before the cache: a kill in between re-reads what it wrote
    save_cache(path, s.kek, cache)
    return SyncResult(len(push_ids), pulled, forgotten + destroyed_here, remote.url,
                      s.damaged, len(push_tombs), len(push_prefs), prefs_pulled, len(grown),
                      updated, destroy_pushed=resend_destroy, went_back=backwards)


def _pref_entries(s: Session) -> list[dict[str, Any]]:
    """This machine's preferences (and unsets) as a prefs operation's entries."""
    from memvault.ops import prefs

    out = []
    for key, (at, value) in sorted(prefs.entries(s.vault).items()):
        t, o = syncseal.pref_tags(s.kek, key, value)
        out.append({"k": key, "v": value, "at": at, "t": t, "o": o})
    return out


def _pull_prefs(s: Session, bodies: Fetched, cut: str) -> int:
    """Apply the preference changes of the objects read now that win over this
    machine's: per key, the latest time, then the greater value tag (docs/sync.md).
    A change made at or before the last destroy went with it."""
    from memvault.ops import prefs

    best: dict[str, dict[str, Any]] = {}
    for body in bodies.of_kind("prefs"):
        for e in body["entries"]:
            if str(e["at"]) <= cut:
                continue
            held = best.get(e["k"])
            if held is None or [e["at"], e["o"]] > [held["at"], held["o"]]:
                best[e["k"]] = e
    if not best:
        return 0
    here = {e["k"]: [e["at"], e["o"]] for e in _pref_entries(s)}
    winners = {k: (str(e["at"]), None if e["v"] is None else str(e["v"]))
               for k, e in best.items() if [e["at"], e["o"]] > here.get(k, ["", ""])}
    prefs.apply(s.vault, winners)
    return len(winners)


def rebuild_derived(vault: Vault, changed: bool) -> None:
    """Derived data is never synced: rebuilt here after a sync that changed records.
    The index is kept by each Transaction already; vectors, when a vault has them,
    are refreshed from this one point."""
    del vault, changed


def _sealed(vault: Vault, ids: set[str], memo: dict[str, Any]) -> Iterator[Item]:
    """(id, archived, JSON) of the records with these ids, file by file, only files that
    hold one: line records as they were sealed here (decrypted, never parsed)."""
    if not ids:
        return
    import orjson

    store = vault.store
    # A first sync's ids, packed once, so each file's are looked for without a string.
    wanted = IdSet(ids) if len(ids) > 10_000 else None
    for home in DOC_FILES:
        for r in store.doc_records(home):
            if r.memory_id in ids:
                doc = r.stored()
                yield r.memory_id, False, orjson.dumps(doc), version(doc)
    for archived in (False, True):
        for relpath in vault.layout.line_files(archived=archived):
            # scan_local filled the memo moments ago: what each file held then decides
            # which files are read (a record moved in since goes with the next sync).
            held = memo[relpath][2] if relpath in memo else _line_ids(vault, relpath, memo)
            if held.any_in(wanted) if wanted is not None else any(i in ids for i in held):
                for memory_id, created_at, plain in store.line_plains(relpath, ids):
                    yield memory_id, archived, plain, _plain_version(plain, created_at)


def _grown_here(vault: Vault, changed: set[str], remote: Callable[[str], bool],
                versions: dict[str, str], memo: dict[str, Any]
                ) -> list[Item]:
    """Records the remote holds in an older version than this machine (a message that
    grew since it was pushed, a restated fact): only the files changed since the last
    sync, and the two documents, are decrypted to find them."""
    import orjson

    out: list[Item] = []
    candidates: list[tuple[Record, bool]] = []
    for home in DOC_FILES:
        candidates += [(r, False) for r in vault.store.doc_records(home)
                       if remote(r.memory_id)]
    for relpath in sorted(changed):
        if any(remote(i) for i in memo[relpath][2]):
            archived = not relpath.startswith("sessions/")
            candidates += [(r, archived) for r in vault.store.read_lines(relpath)
                           if remote(r.memory_id)]
    for r, archived in candidates:
        doc = r.stored()
        v = version(doc)
        if v > versions.get(r.memory_id, ""):
            out.append((r.memory_id, archived, orjson.dumps(doc), v))
    return out


def _pull_updates(s: Session, bodies: Fetched, current: dict[str, dict[str, Any]],
                  remote_ids: Mapping[str, str], local: AbstractSet[str], tombs: set[str],
                  memo: dict[str, Any]) -> int:
    """Replace records held here by a later version another machine pushed (only objects
    read now can hold one this machine has not seen; only those whose summary names a
    version of a record held here are opened)."""
    newer: dict[str, dict[str, Any]] = {}
    for name in sorted(n for n in bodies.adds if any(
            i in local and i not in tombs and remote_ids.get(i) == n
            for i in current[n].get("v", {}))):
        body = bodies.get(name)
        if body is None:
            continue
        for item in body["records"]:
            i = str(item["r"]["memory_id"])
            if i in local and i not in tombs and remote_ids.get(i) == name \
                    and version(item["r"]):
                newer[i] = item["r"]
    if not newer:
        return 0
    vault, done = s.vault, 0
    where = {i: relpath for relpath, (_, _, ids) in memo.items() for i in ids if i in newer}
    changed: set[str] = set()
    with vault.transaction(allow_frozen=True) as tx:
        for home in DOC_FILES:
            doc = tx.store.read_doc(home)
            hits = [at for at, r in enumerate((doc or {}).get("records", []))
                    if r.get("memory_id") in newer and
                    version(newer[r["memory_id"]]) > version(r)]
            if doc is None or not hits:
                continue
            for at in hits:
                doc["records"][at] = {**newer[doc["records"][at]["memory_id"]],
                                      "org_id": vault.org, "user_id": vault.user}
                # A newer version may name a record it replaces (mem review's merge):
                # the link is derived from the records, as when a record is pulled.
                replaced = doc["records"][at].get("supersedes")
                if replaced and not tx.state.superseded_by(str(replaced)):
                    tx.state.superseded[str(replaced)] = Superseded(
                        str(doc["records"][at]["memory_id"]), False)
            for r in doc["records"]:
                r["key_version"] = tx.epoch
            tx.write_doc(home, doc)
            done += len(hits)
            changed.add(home)
        for relpath in sorted(set(where.values())):
            lines = tx.store.read_lines(relpath)
            hit = False
            for at, here in enumerate(lines):
                there = newer.get(here.memory_id)
                if there is None or version(there) <= version(here.stored()):
                    continue
                record = Record.from_stored(there)
                record.org_id, record.user_id = vault.org, vault.user
                record.key_version, record.archived = tx.epoch, here.archived
                lines[at], hit = record, True
                done += 1
            if hit:
                tx.rewrite(relpath, lines)
                changed.add(relpath)
        if done:
            tx.touch()
            tx.audit("sync.update", sorted(newer), updated=done)
            tx.rebuild_indexes(changed=changed)
    return done


BATCH = 20_000  # records stored per transaction by a pull
AHEAD = 5_000  # of the next batch's records, made while a batch's commit waits


def _pull_adds(s: Session, bodies: Fetched, current: dict[str, dict[str, Any]],
               remote_ids: IdMap, local: IdSet, tombs: set[str],
               memo: dict[str, Any] | None = None) -> int:
    """Add the records the remote holds and this machine lacks (never a forgotten one):
    object by object in the order they were written (a machine's pages in its files'
    order), stored a batch at a time, each batch one transaction. Memory stays flat
    however many records come, and a pull killed part way keeps the batches stored:
    the next sync takes only what is still missing."""
    # The objects that hold what is wanted, found without a set of what is wanted (a
    # million ids): each record is asked again as its object is read. Compared packed: a
    # string is made only for an id not held here.
    # Where no id is in two objects (the listing's map holds as many ids as the objects
    # list), every record an object holds is its latest version: an object none of
    # whose ids is held here or erased is taken whole, no record looked up (a string
    # packed and hashed twice a record).
    listed = sum(len(i["ids"]) for i in current.values() if i["kind"] == "add")
    unique = listed == len(remote_ids) and len(tombs) <= listed
    if unique and not local and not tombs:  # a first pull: every object, no id unpacked
        names = {n for n, i in current.items() if i["kind"] == "add" and i["ids"]}
    else:
        names = {n for i, n in remote_ids.missing_from(local) if i not in tombs}
    if not names:
        return 0
    erased = IdSet(tombs) if unique and tombs else None

    def whole(name: str) -> bool:
        ids: IdList = current[name]["ids"]
        return unique and not ids.any_in(local) and not (erased and ids.any_in(erased))

    with _no_cycle_collection():
        return _pull_wanted(s, bodies, current, remote_ids, names,
                            lambda i: i not in local and i not in tombs, memo, whole)


@contextlib.contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """Python's cycle collector off while a pull makes its records: they hold no cycles
    (refcounts free them), and a full collection walks every object alive, so with a
    batch of records held it ran again and again over them (a fifth of a pull's CPU)."""
    import gc

    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@dataclass
class _Run:
    """What the batches of one pull share: the index's writer, held from one to the
    next, and the scan's memo (relpath -> [size, mtime_ns, ids]), where each file a batch
    makes is entered as it is written, so the scan after the pull reads no header."""

    held: contextlib.ExitStack
    memo: dict[str, Any] | None = None
    # Called as a batch's index commit begins (its files and audit entry durable):
    # the next batch is read meanwhile.
    committing: Callable[[], None] | None = None


def _pull_wanted(s: Session, bodies: Fetched, current: dict[str, dict[str, Any]],
                 remote_ids: Mapping[str, str], names: set[str], wanted: Callable[[str], bool],
                 memo: dict[str, Any] | None,
                 whole: Callable[[str], bool] = lambda name: False) -> int:
    """`wanted`: whether a record is to be taken; `whole`: whether every record of an
    object is, and is its latest version (none is looked up)."""
    import functools
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from_stored = Record.from_stored
    order = iter(sorted(names, key=lambda n: (str(current[n].get("at", "")), n)))

    def take(batch: dict[str, tuple[Record, bool]], stop: threading.Event | None) -> bool:
        """The records of the next objects into `batch` until it holds a batch's worth
        or `stop` is set; False when no object is left."""
        for name in order:
            # Let go once its records are taken, unless it holds later versions (of
            # records held here, which the updates that follow replace).
            body = bodies.get(name, last=not current[name].get("v"))
            if body is None:
                continue
            if whole(name):
                for item in body["records"]:
                    r = item["r"]
                    batch[r["memory_id"]] = (from_stored(r), bool(item["a"]))
            else:
                for item in body["records"]:
                    i = item["r"]["memory_id"]
                    if wanted(i) and remote_ids.get(i) == name:
                        batch[i] = (from_stored(item["r"]), bool(item["a"]))
            del body
            if len(batch) >= BATCH or (stop is not None and (
                    stop.is_set() or len(batch) >= AHEAD)):
                return True
        return False

    def start(reading: list[Future[bool]], following: dict[str, tuple[Record, bool]],
              stop: threading.Event) -> None:
        reading.append(ahead.submit(take, following, stop))

    added = 0
    batch: dict[str, tuple[Record, bool]] = {}
    with contextlib.ExitStack() as held, ThreadPoolExecutor(1, "mem-pull-next") as ahead:
        run = _Run(held, memo)
        more = take(batch, None)
        while batch:
            # While a batch's index commit waits for Tantivy (the interpreter's lock
            # free), the next objects are opened and their records made on a thread
            # (up to AHEAD of them, until the transaction ends); this thread then goes
            # on with them. None is stored before its own batch's transaction.
            stop = threading.Event()
            following: dict[str, tuple[Record, bool]] = {}
            reading: list[Future[bool]] = []
            if more:
                run.committing = functools.partial(start, reading, following, stop)
            try:
                added += _add_records(s.vault, list(batch.values()), run)
            finally:
                stop.set()
                run.committing = None
            more = reading[0].result() if reading else more
            batch = following if reading else {}
            if more and len(batch) < BATCH:
                more = take(batch, None)
        return added


def _add_records(vault: Vault, items: list[tuple[Record, bool]],
                 run: _Run | None = None) -> int:
    """Store pulled records with their ids, through one transaction. They were admitted
    on the machine that made them (same owner, same key): screening them again would
    change their content and part them from their id. A transcript message that is
    already here under another id (the same session ingested on two machines) is kept
    once, under the smaller id, so that every machine ends with the same one."""
    if not items:
        return 0
    added = 0
    with vault.transaction(allow_frozen=True) as tx:
        # Each file's documents go to the index as soon as it is written: Tantivy indexes
        # them on its own thread while the next files are sealed here, and the
        # transaction's end commits them. An index that was not current is rebuilt
        # from the files instead.
        index = vault.search_index(tx.epoch) if tx.fresh else None
        if index is not None and run is not None and not index.held:
            run.held.enter_context(index.hold())
        try:
            added = _store_batch(tx, items, index, run.memo if run is not None else None)
        except BaseException:
            if index is not None:
                index.drop_fed()
            raise
        if run is not None:
            tx.committing = run.committing
    return added


class _Syncs:
    """The new files of a batch created and written on a few threads while the next ones
    are sealed here (making and writing a file is the kernel's work, not this thread's),
    then made durable at once before the batch's audit entry says the records are in:
    one syncfs of the vault's filesystem, or where that cannot be had (fsio.FilesystemSync),
    an fsync of each file on the threads and of each folder. An fsync a file was a
    journal commit a file, waited for one by one. Handed over a few files at a time: each
    task wakes a thread, which takes the interpreter's lock from this one to start."""

    FILES = 8  # a task's files
    BYTES = 1 << 20  # or its bytes

    def __init__(self, folder: Path) -> None:
        from concurrent.futures import ThreadPoolExecutor

        # Opened before the first write: a writeback error of any of them reaches it.
        self.whole = fsio.FilesystemSync(folder)
        self.pool = ThreadPoolExecutor(4, "mem-fsync")
        self.pending: list[Future[None]] = []
        self.dirs: set[Path] = set()
        self.written: list[Path] = []
        self.files: list[tuple[Path, bytes]] = []
        self.size = 0

    def __call__(self, path: Path, data: bytes) -> None:
        self.files.append((path, data))
        self.written.append(path)
        self.size += len(data)
        self.dirs.add(path.parent)
        if len(self.files) >= self.FILES or self.size >= self.BYTES:
            self._hand_over()

    def _hand_over(self) -> None:
        if self.files:
            self.pending.append(self.pool.submit(_write_new, self.files))
            self.files, self.size = [], 0

    def wait(self) -> None:
        try:
            self._hand_over()
            for done in self.pending:
                done.result()
            if self.written and not self.whole(*self.dirs):
                paths = self.written
                for synced in [self.pool.submit(_fsync_each, paths[at:at + self.FILES])
                               for at in range(0, len(paths), self.FILES)]:
                    synced.result()
                for folder in sorted(self.dirs):
                    fsio.fsync_dir(folder)
        finally:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.whole.close()


def _write_new(files: list[tuple[Path, bytes]]) -> None:
    for path, data in files:
        fsio.append_line(path, data, sync=False)


def _fsync_each(paths: list[Path]) -> None:
    for path in paths:
        fsio.fsync_file(path)


def _store_batch(tx: Transaction, items: list[tuple[Record, bool]],
                 index: SearchIndex | None, memo: dict[str, Any] | None) -> int:
    """The records of one pull batch into their files, the index and the state."""
    vault = tx.vault
    by_home: dict[str, list[Record]] = {}
    # A record superseded by one pulled with it, or before it, is indexed as superseded,
    # as a rebuild indexes it (the link is derived from the records).
    by = {r.supersedes: r.memory_id for r, _ in items if r.supersedes}
    linked = tx.state.superseded_by
    for record, archived in items:
        record.org_id, record.user_id = vault.org, vault.user
        record.key_version = tx.epoch
        record.superseded_by = by.get(record.memory_id) or linked(record.memory_id)
        home = record.home if record.home in DOC_FILES else \
            session_file(str(record.session_id), archived)
        record.archived = archived
        by_home.setdefault(home, []).append(record)
    new: list[Record] = []
    made: list[tuple[str, IdList]] = []  # the files this batch creates, and their ids
    syncs = _Syncs(tx.store.layout.dir)
    try:
        for home, records in sorted(by_home.items()):
            if home in DOC_FILES:
                tx.add_to_doc(home, records)
                new += records
                continue
            fresh = not tx.store.layout.path(home).exists()
            if not fresh:
                records = _merge_duplicates(tx, home, records)
            records.sort(key=lambda r: (r.created_at, r.memory_id))
            # A session that grew here (or in an earlier batch): its last turns are its
            # new ones' context, and gain them as theirs, as an ingest indexes them.
            tail, tail_at = ([], []) if fresh else \
                tx.store.tail_records(home, 2 * CONTEXT_NEIGHBOURS)
            locations = tx.append_new(home, records, syncs)
            if fresh:
                made.append((home, IdList.of(r.memory_id for r in records)))
            turns = [*tail, *records]
            entries = file_entries(turns, [*tail_at, *locations],
                                   range(max(0, len(tail) - CONTEXT_NEIGHBOURS), len(turns)))
            tx.index(entries, created=[r.memory_id for r in records])
            if index is not None and tx.fresh:
                index.feed(entries[len(entries) - len(records):])
            new += records
    finally:
        syncs.wait()
    if memo is not None:  # what each new file holds is known: under the lock, only that
        for home, ids in made:
            st = tx.store.layout.path(home).stat()
            memo[home] = [st.st_size, st.st_mtime_ns, ids]
    present = {r.memory_id for r in new}
    for r in new:
        tx.state.count(r.type, +1, archived=r.archived)
        if r.supersedes and (r.supersedes in present or
                             tx.store.layout.path(r.home).exists()):
            tx.state.superseded[r.supersedes] = Superseded(r.memory_id, False)
    # One held here before this batch: indexed again as superseded, as an add's is.
    later = [r for r in new if r.supersedes and r.supersedes not in present]
    if later:
        from memvault.ops.remember import supersede

        held = tx.fetch([str(r.supersedes) for r in later])
        for r in later:
            old = held.get(str(r.supersedes))
            if old is not None:
                supersede(tx, old, r)
    added = len(new)
    tx.touch()
    tx.audit("sync.pull", sorted(present), pulled=added)
    return added


def _merge_duplicates(tx: Transaction, relpath: str, records: list[Record]) -> list[Record]:
    """Of a pulled message and one here with the same transcript id, keep the smaller
    memory id: the pulled one is dropped, or replaces the one here in its file."""
    pulled_msgs = {r.message_id: r for r in records if r.type == "message" and r.message_id}
    if not pulled_msgs or not tx.store.layout.path(relpath).exists():
        return records
    lines = tx.store.read_lines(relpath)
    drop: set[str] = set()
    replaced = False
    for at, here in enumerate(lines):
        other = pulled_msgs.get(here.message_id or "")
        if other is None or other.memory_id == here.memory_id:
            continue
        drop.add(other.memory_id)
        if other.memory_id < here.memory_id:
            lines[at] = other
            replaced = True
            tx.state.count(here.type, -1, archived=here.archived)
            tx.state.count(other.type, +1, archived=other.archived)
    if replaced:
        tx.rewrite(relpath, lines)
        tx.rebuild_indexes(changed={relpath})
    return [r for r in records if r.memory_id not in drop]


def _archive_here(vault: Vault, ids: set[str]) -> None:
    """Move records another machine archived to archive/ here: appended there before
    they leave the live file, so a kill between leaves a copy, never none."""
    with vault.transaction(allow_frozen=True) as tx:
        changed: set[str] = set()
        for relpath in vault.layout.line_files():
            if not ids & set(tx.store.line_ids(relpath)):
                continue
            lines = tx.store.read_lines(relpath)
            moving = [r for r in lines if r.memory_id in ids]
            target = relpath.replace("sessions/", "archive/", 1)
            there = set(tx.store.line_ids(target)) if tx.store.layout.path(target).exists() \
                else set()
            tx.append(target, [r for r in moving if r.memory_id not in there])
            tx.rewrite(relpath, [r for r in lines if r.memory_id not in ids])
            for r in moving:
                tx.state.count(r.type, -1)
                tx.state.count(r.type, +1, archived=True)
            changed |= {relpath, target}
        tx.touch()
        tx.audit("sync.archive", sorted(ids))
        tx.rebuild_indexes(changed=changed)


def _forget_here(vault: Vault, ids: set[str]) -> int:
    from memvault.ops import forget

    plan = forget.select(vault, sorted(ids))
    return forget.forget(vault, plan).deleted_count


def _set_frozen(vault: Vault, frozen: bool) -> None:
    from memvault.ops import admin

    admin.set_frozen(vault, frozen)


def _apply_destroy(vault: Vault, at: str, local: Held) -> int:
    """A destroy made elsewhere at `at`: what this machine stored at or before it goes,
    what it stored after stays (a machine restored from a key backup and used since
    keeps its own records). With nothing after it, the user is destroyed here whole
    (keys, files, index). Recorded in the org's audit either way, with its own time.
    The count of records erased."""
    from memvault.ops import admin, prefs

    old = sorted(i for i in local if born(i) <= at)
    if not vault.exists():
        admin.record_destroy(vault, at, 0)
        return 0
    later_prefs = any(t > at for t, _ in prefs.entries(vault).values())
    if len(old) == len(local) and not later_prefs:
        if vault.state().frozen:
            admin.set_frozen(vault, False)
        admin.destroy(vault, vault.user, at=at)
        return len(old)
    erased = 0
    if old:
        from memvault.ops import forget

        erased = forget.forget(vault, forget.select(vault, old), merging=True).deleted_count
    prefs.drop_through(vault, at)
    admin.record_destroy(vault, at, erased)
    return erased


def _went_back(cache: Cache, current: dict[str, dict[str, Any]], cut: str) -> int:
    """How many records and erasures the remote held at this machine's last sync that it
    lacks now, though nothing erased them (a folder restored from a snapshot, a bucket
    emptied, an object deleted): said, and sent again by this sync."""
    if not cache.objects:
        return 0
    # Objects never change under their names: only the ids of those no longer listed can
    # be lost, so no set of every id held then and now is made (a million ids each).
    gone = [info for name, info in cache.objects.items() if name not in current]
    if not gone:
        return 0
    lost = IdSet()
    tombs0: set[str] = set()
    destroy0 = ""
    for info in gone:
        if info["kind"] == "add":
            lost.update(info["ids"] if not cut else (i for i in info["ids"] if born(i) > cut))
        elif info["kind"] == "forget":
            tombs0.update(info["ids"])
        elif info["kind"] == "destroy":
            destroy0 = max(destroy0, str(info["at"]))
    destroy1 = ""
    for info in current.values():
        if info["kind"] == "add" and lost:
            lost.difference_update(info["ids"])
        elif info["kind"] == "forget":
            lost.difference_update(info["ids"])
            tombs0.difference_update(info["ids"])
        elif info["kind"] == "destroy":
            destroy1 = max(destroy1, str(info["at"]))
    return len(lost) + len(tombs0) + int(destroy0 > destroy1)


def _list_user(s: Session, directory: Directory, entries: dict[str, str],
               destroyed: bool) -> dict[str, str]:
    """The directory names this user while it exists here: an entry is written when the
    listing shows none (two machines writing at once leave a duplicate, read as one).
    A user destroyed (here or on the machine it was pulled from) is taken out of it, so
    that no machine's `--all-users` brings it back. The entries known now are returned."""
    mine = [n for n, ns in entries.items() if ns == s.ns]
    if s.vault.exists():
        if not mine:
            entries = {**entries, directory.add(s.vault.org, s.vault.user): s.ns}
    elif destroyed:
        for name in mine:
            s.remote.delete(name)
        entries = {n: ns for n, ns in entries.items() if ns != s.ns}
    return entries


def _repack(s: Session, newest: str, current: dict[str, dict[str, Any]],
            bodies: Fetched, tombs: set[str],
            cut: str) -> dict[str, dict[str, Any]]:
    """Write again, under the newest key, every object sealed under an older one or
    holding an erased record (forgotten, or stored before the last destroy), without
    what was erased; then delete the old ones. Of destroys, the latest is kept."""
    erased = IdSet(tombs)
    stale = [n for n, info in current.items() if
             not n.rsplit("/", 1)[1].startswith(newest + "-") or
             (info["kind"] == "add" and (info["ids"].any_in(erased) or bool(cut) and any(
                 born(i) <= cut for i in info["ids"])))]
    if not stale:
        return current
    records: dict[str, dict[str, Any]] = {}
    archived: set[str] = set()
    gone: set[str] = set()
    marks: set[str] = set()
    freeze: tuple[str, bool] | None = None
    destroy = ""
    settings: dict[str, dict[str, Any]] = {}
    readable: list[str] = []
    for name in stale:
        body = bodies.get(name)
        if body is None:
            continue  # not ours to drop: a later sync retries it
        readable.append(name)
        kind = body["kind"]
        if kind == "add":
            for item in body["records"]:
                i = item["r"]["memory_id"]
                if i not in tombs and (not cut or born(i) > cut) and (i not in records or
                                       version(item["r"]) > version(records[i]["r"])):
                    records[i] = item
        elif kind == "archive":
            archived.update(body["ids"])
        elif kind == "forget":
            gone.update(body["ids"])
            marks.update(body.get("marks", []))
        elif kind == "freeze" and body["at"] > cut and (
                freeze is None or body["at"] > freeze[0]):
            freeze = (body["at"], bool(body["frozen"]))
        elif kind == "destroy":
            destroy = max(destroy, str(body["at"]))
        elif kind == "prefs":
            for e in body["entries"]:
                if str(e["at"]) <= cut:
                    continue
                held = settings.get(e["k"])
                if held is None or [e["at"], e["o"]] > [held["at"], held["o"]]:
                    settings[e["k"]] = e
    out = {n: i for n, i in current.items() if n not in readable}
    for page in _pages(list(records.values())):
        name, info = s.write(newest, {"kind": "add", "records": page})
        out[name] = info
    if archived - tombs:
        name, info = s.write(newest, {"kind": "archive", "ids": sorted(archived - tombs)})
        out[name] = info
    if gone or marks:
        name, info = s.write(newest, {"kind": "forget", "ids": sorted(gone),
                                      "marks": sorted(marks)})
        out[name] = info
    if freeze is not None:
        name, info = s.write(newest, {"kind": "freeze", "frozen": freeze[1],
                                      "at": freeze[0]})
        out[name] = info
    if destroy and not any(i["kind"] == "destroy" and i["at"] >= destroy
                           for i in out.values()):
        name, info = s.write(newest, {"kind": "destroy", "at": destroy})
        out[name] = info
    if settings:
        name, info = s.write(newest, {"kind": "prefs",
                                      "entries": [settings[k] for k in sorted(settings)]})
        out[name] = info
    s.flush()
    for name in readable:  # only once what replaces them is written
        s.remote.delete(name)
        s.deleted += 1
    return out


def _retire_keys(s: Session, newest: str) -> None:
    """Delete the older remote keys that a fresh listing shows no object under, then
    look again. A machine that began its sync before the newest key existed may be
    writing under an older one at this moment: whichever of the two looks last sees
    the other's change (this one an object under a key it deleted; the writer its key
    gone), and puts the key back, so no object is left that nobody can open."""
    kids, names = s.listing()
    used = {n.rsplit("/", 1)[1].partition("-")[0] for n in names}
    made = s.keys[newest][1]
    deleted: list[str] = []
    if newest not in kids:  # deleted by another machine while this one wrote under it
        _restore_key(s, newest)
    for kid in kids:
        # A key this sync did not check may be another machine's newest: never touched.
        if kid in s.keys and s.keys[kid][1] < made and kid not in used:
            s.remote.delete(f"{s.ns}/k/{kid}")
            deleted.append(kid)
    if not deleted:
        return
    _, names = s.listing()
    used = {n.rsplit("/", 1)[1].partition("-")[0] for n in names}
    for kid in deleted:
        if kid in used:
            _restore_key(s, kid)
        else:
            s.keys.pop(kid, None)


def _restore_key(s: Session, kid: str) -> None:
    key, at = s.keys[kid]
    s.remote.put(f"{s.ns}/k/{kid}", syncseal.wrap_key(s.kek, s.ns, kid, key, at))


def run(vault: Vault, url: str, endpoint_url: str | None = None,
        all_users: bool = False) -> SyncResult | SyncAllResult:
    """Sync one user, or (`all_users`) every user of the vault this machine holds or
    synced before (a destroyed one included, so that the destroy is pushed), and every
    user the remote's directory names (made on other machines)."""
    from memvault.storage.layout import users
    from memvault.storage.remote import open_remote
    from memvault.storage.streams import one_heap

    one_heap()  # before any thread of the sync (a pull's, the S3 client's, Tantivy's)
    remote = open_remote(url, endpoint_url)
    if not all_users:
        return sync(vault, remote)

    who = set(users(vault.root))
    for org_dir in sorted(p for p in vault.root.iterdir() if p.is_dir()):
        who |= {(org_dir.name, f.stem) for f in (org_dir / ".sync").glob("*.json")}
    # The directory is read whole (an entry of another master key refuses the run), once
    # for every user's sync; duplicates of a user are one user.
    directory = Directory(remote, vault.master.key)
    kek = syncseal.sync_kek(vault.master.key)
    pool = None
    if remote.workers > 1:
        from concurrent.futures import ThreadPoolExecutor

        pool = ThreadPoolExecutor(remote.workers, "mem-sync-dir")
    try:
        listed = directory.open(directory.names(), pool)
    finally:
        if pool is not None:
            pool.shutdown()
    who |= set(listed.values())
    entries = {n: syncseal.namespace(kek, org, user) for n, (org, user) in listed.items()}
    results: list[SyncResult] = []
    done: list[str] = []
    problems: list[UserProblem] = []
    for org, user in sorted(who):
        from dataclasses import replace

        settings = replace(vault.settings, values={**vault.settings.values, "org": org,
                                                   "user": user})
        one = Vault(settings, master=vault.master, actor=vault.actor)
        try:
            results.append(sync(one, remote, entries))
            done.append(f"{org}/{user}")
        except Busy:
            problems.append(UserProblem(org, user, "busy", "the user's lock is held (a hook "
                                        "or a command is writing); skipped, the next run "
                                        "retries", EX_TEMPFAIL))
        except MemError as exc:  # one user's failure does not stop the others
            problems.append(UserProblem(org, user, "failed", exc.message, exc.exit_code,
                                        exc.hint))
    busy = all(p.problem == "busy" for p in problems)
    return SyncAllResult(sum(r.pushed for r in results), sum(r.pulled for r in results),
                         sum(r.forgotten for r in results), url, tuple(done),
                         tuple(f"{p.org}/{p.user}" for p in problems), directory.damaged,
                         tuple(problems),
                         0 if not problems else EX_TEMPFAIL if busy else problems[0].exit_code)


def given_remote(url: str) -> str:
    """A remote given on the command line as it is used and saved: its one name however
    spelled (a folder as its full path from here, for a later sync from cron or another
    folder must find the same place; s3:// without slashes around the prefix)."""
    from memvault.storage.remote import canonical

    return canonical(url)


def same_remote(url: str) -> str | None:
    """The one name of a remote a cache was kept for (None: not a remote any more)."""
    from memvault.storage.remote import canonical

    try:
        return canonical(url)
    except MemError:
        return None


def remote_setting(url: str, endpoint_url: str | None) -> tuple[Path, bytes] | None:
    """The change to config.yaml that makes this remote the default (None: it already
    is); ConfigError when its `sync:` section names another, or cannot take one. Asked
    before a sync, written (remember_remote) only after it succeeded."""
    from memvault.config import file_with_sync

    return file_with_sync(url, endpoint_url)


def remember_remote(change: tuple[Path, bytes]) -> str:
    """Write config.yaml with its `sync:` section (the path written)."""
    path, data = change
    fsio.ensure_dir(path.parent)
    fsio.atomic_write(path, data)
    return str(path)
