"""The vault opened for one user with a checked master key, and the one transaction
every write goes through.

`Vault` knows where things are and how to read them; `Transaction` is how anything
changes: the user's lock, the state read once, index changes queued and applied after
the files, the audit entry and its anchor. The ordering invariants are listed in
docs/architecture.md.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memvault.config import Settings
from memvault.crypto import envelope
from memvault.crypto.keys import MasterKey, index_key, vector_key
from memvault.errors import DataError, NotFound, Refused, StorageError, UsageError
from memvault.index.base import STAMP_FILE, DerivedIndex, Entry, IndexUnavailable, file_entries
from memvault.model.location import Location
from memvault.model.progress import NO_PROGRESS, Progress
from memvault.model.records import DOC_FILES, Record, now_iso
from memvault.storage import fsio
from memvault.storage.audit import AuditLog
from memvault.storage.layout import VAULT_FILE, UserLayout, orgs, users
from memvault.storage.reads import ReadLog
from memvault.storage.state import UserState
from memvault.storage.userstore import UserStore
from memvault.vault import migrations
from memvault.vault.keysource import load_master_key

if TYPE_CHECKING:
    from memvault.index.keyed import SearchIndex
    from memvault.index.vectors import VectorStore

VAULT_FORMAT = 1


def read_meta(root: Path) -> dict[str, Any]:
    path = root / VAULT_FILE
    try:
        meta = json.loads(fsio.read_regular(path))  # a FIFO there must not block
    except FileNotFoundError:
        raise NotFound(f"no vault at {root}", hint="init") from None
    except (OSError, ValueError, UnicodeDecodeError):
        raise DataError(f"{path} is corrupt") from None
    if not isinstance(meta, dict) or "key_check" not in meta:
        raise DataError(f"{path} is not a mem vault description")
    if meta.get("format") != VAULT_FORMAT:
        raise DataError(f"{path}: vault format {meta.get('format')!r} is not supported "
                        f"by this mem (format {VAULT_FORMAT})")
    return meta


def create_meta(root: Path, master: MasterKey) -> None:
    """Write vault.json for a new vault: it needs none of the migrations."""
    fsio.ensure_dir(root)
    meta = {"format": VAULT_FORMAT, "created_at": now_iso(), "key_check": master.check_value(),
            "kdf": "HKDF-SHA256", "cipher": "AES-256-GCM",
            "migrations": [m.name for m in migrations.MIGRATIONS]}
    fsio.atomic_write(root / VAULT_FILE, (json.dumps(meta, indent=1) + "\n").encode())


def record_key_backup(root: Path, key_check: str, at: str, lock_timeout: float) -> None:
    """Note in vault.json that the master key with this check value was backed up at
    `at` (when and which key only: no secret), under the vault-wide lock that migrations
    take to rewrite the same file."""
    with fsio.locked(root / migrations.MIGRATE_LOCK, lock_timeout, "the vault"):
        meta = read_meta(root)
        meta["key_backup"] = {"at": at, "key_check": key_check}
        fsio.atomic_write(root / VAULT_FILE, (json.dumps(meta, indent=1) + "\n").encode())


# A mistyped name is answered with the names there are, up to this many (else a count).
SHOWN_NAMES = 10
# A memory id: a UUID as mem writes it. A prefix of one is taken for the whole (show,
# forget) from this many characters on: the first group, a minute of the id's time.
ID_LENGTH = 36
ID_CHARS = frozenset("0123456789abcdef-")
MIN_ID_PREFIX = 8
SHOWN_IDS = 3  # the ids an ambiguous prefix is answered with


def missing_user(root: Path, org: str, user: str | None) -> NotFound:
    """The error for a user with no memory (or, `user` None, an org with no users): the
    org's users when it has some, else the vault's orgs, else a vault with no users yet
    (a first write creates one)."""
    def names(kind: str, found: list[str]) -> str:
        if len(found) > SHOWN_NAMES:
            return f"it has {len(found)} {kind}s"
        if len(found) == 1:
            return f"its only {kind} is {found[0]}"
        return f"its {kind}s: {', '.join(found)}"

    members = [name for _, name in users(root, org)]
    if members:
        return NotFound(f"no user {user} in org {org}; {names('user', members)}",
                        field="user")
    known = orgs(root)
    if known:
        return NotFound(f"no org {org} in the vault at {root}; {names('org', known)}",
                        field="org")
    who = f"user {user}" if user is not None else f"org {org}"
    return NotFound(f"{who} has no memory yet: the vault at {root} has no users",
                    hint="first-write")


class Written(set[str]):
    """The ids of the records this process's writes stored or changed, up to LIMIT: past
    it (a pull of a million records) only that there were more is kept, and whatever
    embeds them finds the records that wait itself (ops/embed.py), so memory stays flat."""

    LIMIT = 10_000  # above background.MAX_IDS: a child given no ids embeds what waits
    more = False

    def add(self, memory_id: str) -> None:
        if len(self) < self.LIMIT:
            super().add(memory_id)
        else:
            self.more = True

    def clear(self) -> None:
        super().clear()
        self.more = False


class Vault:
    """One user's view of an initialised vault, opened with a checked master key."""

    def __init__(self, settings: Settings, *, master: MasterKey | None = None,
                 passphrase: str | None = None, actor: str | None = None,
                 on_create: Callable[[Vault], None] | None = None) -> None:
        self.settings = settings
        # Told when a write has created the user (their first write): a surface says so.
        self.on_create = on_create
        self.root = settings.vault
        self.meta = read_meta(self.root)
        self.master = master or load_master_key(settings, passphrase,
                                                self.meta["key_check"])
        if self.master.check_value() != self.meta["key_check"]:
            raise Refused(f"wrong key: the master key from {self.master.source} does not open "
                          f"the vault at {self.root}")
        self.layout = UserLayout(self.root, settings.org, settings.user)
        self.store = UserStore(self.layout, self.master)
        self.actor = actor or settings.actor
        self.audit = AuditLog(self.layout.audit_path, self.layout.audit_lock_path,
                              self.store.meta_key, settings.lock_timeout, self.actor)
        self.reads = ReadLog(self.layout.reads_path, self.layout.reads_lock_path,
                             self.store.meta_key, settings.lock_timeout)
        self._search: tuple[int, SearchIndex] | None = None
        self._vectors: tuple[int, VectorStore] | None = None
        self._scratch: Path | None = None  # an index outside a vault that takes no writes
        # The ids of the records this process's writes stored or changed: what embedding
        # in the background embeds after a command (ops/embed.py embed_new).
        self.written = Written()
        if migrations.pending(self.meta):
            try:
                migrations.apply(self.root, self.master, settings.lock_timeout, self.actor)
            except StorageError as exc:
                if not exc.refused:
                    raise
                # A vault that takes no writes is read as it is: each user's state is
                # counted in memory by the read that needs it (state()).
            self.meta = read_meta(self.root)

    @property
    def org(self) -> str:
        return self.layout.org

    @property
    def user(self) -> str:
        return self.layout.user

    @property
    def who(self) -> str:
        return f"{self.org}/{self.user}"

    def exists(self) -> bool:
        return self.store.exists()

    def require_user(self) -> None:
        """NotFound unless the user has memory. A mistyped user or org is said to be one,
        with the names there are, rather than read as an empty memory; and nothing is
        created to find out (no directory, no lock file)."""
        if not self.exists():
            raise missing_user(self.root, self.org, self.user)

    def require_org(self) -> None:
        """NotFound unless the org has a user (for a walk over an org's users)."""
        if not any(True for _ in users(self.root, self.org)):
            raise missing_user(self.root, self.org, None)

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        with fsio.locked(self.layout.lock_path, self.settings.lock_timeout,
                         f"user {self.who}"):
            yield

    def state(self) -> UserState:
        """The user's state (a fresh default for a user with no memory yet). A state from
        an older mem is upgraded first, under the lock."""
        try:
            state = self.store.load_state()
        except FileNotFoundError:
            return UserState()
        try:
            if not state.counted:
                with self.lock():
                    state = self.locked_state()
                    migrations.upgrade_user(self.store, state, self.audit)
            if state.compacting is not None:
                # A compaction step was killed half way: finish (or undo) it before
                # anything is read, so no reader sees both the originals and their summary.
                with self.transaction(allow_frozen=True) as tx:
                    state = tx.state
        except StorageError as exc:
            if not exc.refused:
                raise
            # A vault that takes no writes is read as it is (verify reports what is
            # left to finish), an older state counted in memory only.
            if not state.counted:
                migrations.recount(self.store, state)
        return state

    def locked_state(self) -> UserState:
        """The state read again once the lock is held (by a reader that read it before):
        a destroy may have removed the user meanwhile, and then there is nothing to read
        (NotFound), not a new user to create."""
        try:
            return self.store.load_state()
        except FileNotFoundError:
            raise NotFound(f"user {self.who} has no memory (destroyed meanwhile)") from None

    # --- derived indexes --------------------------------------------------------------

    def search_index(self, epoch: int) -> SearchIndex:
        """The keyed-term index (its key derives from the data key of `epoch`)."""
        if self._search is None or self._search[0] != epoch:
            from memvault.index.keyed import SearchIndex

            self._search = (epoch, SearchIndex(self.layout.index_dir,
                                               index_key(self.store.dek(epoch))))
        return self._search[1]

    def vector_store(self, epoch: int) -> VectorStore:
        """The sealed vector store (its key derives from the data key of `epoch`)."""
        if self._vectors is None or self._vectors[0] != epoch:
            from memvault.index.vectors import VectorStore

            def locate(memory_ids: Sequence[str]) -> dict[str, Location]:
                return self.search_index(epoch).locate(memory_ids)

            self._vectors = (epoch, VectorStore(
                self.layout.vectors_dir, vector_key(self.store.dek(epoch)), epoch,
                owner=self.who, locate=locate))
        return self._vectors[1]

    def settle_vectors(self, epoch: int) -> None:
        """Bring a vector store sealed under another epoch to `epoch` (caller holds the
        lock): resealed while that epoch's data key is there, else dropped (derived
        data: embedded again). Runs before any older key is deleted."""
        from memvault.index.vectors import VectorStore

        store = self.vector_store(epoch)
        try:
            stored = store.stored_epoch()
        except IndexUnavailable:
            store.clear()
            return
        if stored is None or stored == epoch:
            return
        try:
            old = VectorStore(store.dir, vector_key(self.store.dek(stored)), stored,
                              owner=self.who)
            old.reseal(store.key, epoch)
        except (DataError, IndexUnavailable):
            store.clear()

    def indexes(self, epoch: int) -> tuple[DerivedIndex, ...]:
        return (self.search_index(epoch), self.vector_store(epoch))

    def entries(self, state: UserState, include_archive: bool = True) -> Iterator[Entry]:
        """What every index is built from: each record (with its supersede link), where
        it lives and its context, one file at a time."""
        for _, records, locations in self.store.files(include_archive):
            for record in records:
                self.linked(record, state)
            yield from file_entries(records, locations)

    def rebuild_indexes(self, state: UserState) -> int:
        """Rebuild every derived index from the vault (caller holds the lock); how many
        records the search index holds. The vector store is pruned, never embedded."""
        self.settle_vectors(state.key_version)
        count = 0
        for n, index in enumerate(self.indexes(state.key_version)):
            built = index.rebuild(self.entries(state))
            count = built if n == 0 else count
        return count

    def rewrite_indexes(self, state: UserState, changed: set[str]) -> int:
        """Rebuild every index after the files in `changed` were rewritten (or removed),
        deriving only those files again; the rest is carried over from each index, which
        must have been current before the change (caller holds the lock)."""
        layout = self.layout
        kept = [f for f in [*layout.line_files(), *layout.line_files(archived=True)]
                if f not in changed]

        def changed_entries() -> Iterator[Entry]:
            for relpath in sorted(changed):
                records, locations = self.store.file(relpath)
                for record in records:
                    self.linked(record, state)
                yield from file_entries(records, locations)

        self.settle_vectors(state.key_version)
        count = 0
        for n, index in enumerate(self.indexes(state.key_version)):
            built = index.rewrite(changed_entries(), changed, kept,
                                  lambda memory_id: state.superseded_by(memory_id) is not None)
            count = built if n == 0 else count
        return count

    def ready_index(self, state: UserState | None = None) -> SearchIndex:
        """The search index, rebuilt first (under the lock) when missing, corrupt or stale."""
        index = self.search_index((state or self.state()).key_version)
        return index if index.is_current() else self.reindex_for_reading(stale=False)

    def reindex_for_reading(self, stale: bool = True) -> SearchIndex:
        """Rebuild the index for a reader that found it missing or corrupt (or, `stale`,
        pointing at records that moved): under the lock, derived data only, no write to
        the memory. A vault that takes no writes (a backup mounted read-only, files not
        ours to write) is read through an index outside it instead (_scratch_index)."""
        try:
            with self.lock():
                state = self.locked_state()
                index = self.search_index(state.key_version)
                if stale or not index.is_current():
                    self.rebuild_indexes(state)
                return index
        except StorageError as exc:
            if not exc.refused:
                raise
        return self._scratch_index(self.state(), fresh=stale)

    def _scratch_index(self, state: UserState, fresh: bool) -> SearchIndex:
        """The index of a vault that takes no writes, in a private temporary directory
        removed at exit: a copy of the vault's index when that one claims to be current
        (Tantivy cannot open an index in a read-only place), else built from the vault.
        It holds what the vault's index holds (keyed terms, sealed locations), never
        plaintext. Every later read of this process uses it."""
        import atexit
        import shutil
        import tempfile

        from memvault.index.keyed import SearchIndex

        epoch = state.key_version
        if self._scratch is None:
            self._scratch = Path(tempfile.mkdtemp(prefix="mem-index-"))  # 0700
            atexit.register(shutil.rmtree, self._scratch, True)
        target = self._scratch / f"index-{epoch}"
        index = SearchIndex(target, index_key(self.store.dek(epoch)))
        source = self.layout.index_dir
        if not fresh and not target.exists() and (source / STAMP_FILE).is_file():
            _copy_files(source, target)
        if fresh or not index.is_current():
            index.rebuild(self.entries(state))
        self._search = (epoch, index)
        return index

    # --- reading records by id --------------------------------------------------------

    def resolve_ids(self, given: Sequence[str], state: UserState | None = None
                    ) -> list[str]:
        """Ids as a user typed them, each whole or a unique prefix of one (as git takes a
        commit's), made whole through the index. A prefix shorter than MIN_ID_PREFIX is
        refused (a UUIDv7 starts with its time: a few characters name a day's records),
        and so is one that several ids start with (UsageError, saying how many); one no
        id starts with, like anything that is no id, is passed on as it is, for the
        caller's "no memory with id"."""
        out: list[str] = []
        for text in given:
            prefix = text.lower()
            if len(text) >= ID_LENGTH or not prefix or set(prefix) - ID_CHARS \
                    or not self.exists():
                out.append(text)
                continue
            if len(prefix) < MIN_ID_PREFIX:
                raise UsageError(f"id prefix {text} is too short: give at least "
                                 f"{MIN_ID_PREFIX} characters of the id", field="id")
            try:
                ids, count = self.ready_index(state).ids_starting(prefix, SHOWN_IDS)
            except IndexUnavailable:
                ids, count = self.reindex_for_reading().ids_starting(prefix, SHOWN_IDS)
            if count > 1:
                shown = ", ".join(sorted(ids)) + (", ..." if count > len(ids) else "")
                raise UsageError(f"id prefix {text} is ambiguous: {count} records start "
                                 f"with it ({shown}); give more of the id", field="id")
            out.append(ids[0] if ids else text)
        return out

    def fetch(self, memory_ids: Sequence[str], state: UserState | None = None
              ) -> dict[str, Record]:
        """The records with these ids, found through the index (id → sealed location) and
        decrypted one line each. A location that no longer holds its record means a
        stale index: it is rebuilt once and the lookup repeated."""
        if not self.exists() or not memory_ids:
            return {}
        state = state or self.state()
        found: dict[str, Record] = {}
        for attempt in (1, 2):
            index = self.ready_index(state)
            try:
                located = index.locate(memory_ids)
            except IndexUnavailable:
                located, stale = {}, True
            else:
                found, stale = self.read_located(located, state)
                if not stale:
                    return found
            if attempt == 1 and stale:
                self.reindex_for_reading()
        return found

    def read_located(self, located: dict[str, Location], state: UserState
                     ) -> tuple[dict[str, Record], bool]:
        """Decrypt records at their locations (each document once). The flag says a
        location did not hold its record (the index is stale)."""
        docs: dict[str, dict[str, Record]] = {}
        out: dict[str, Record] = {}
        for memory_id, location in located.items():
            if location.is_doc:
                if location.file not in docs:
                    docs[location.file] = {r.memory_id: r
                                           for r in self.store.doc_records(location.file)}
                record = docs[location.file].get(memory_id)
            else:
                record = self.store.read_at(location, memory_id)
            if record is None:
                return out, True
            out[memory_id] = self.linked(record, state)
        return out, False

    @staticmethod
    def linked(record: Record, state: UserState) -> Record:
        """The record with its derived `superseded_by` from the user's state."""
        record.superseded_by = state.superseded_by(record.memory_id)
        return record

    # --- audit and marks --------------------------------------------------------------

    def audit_read(self, op: str, ids: list[str] | None = None,
                   sessions: Iterable[str] = (), every: bool = False,
                   retrieved: Iterable[str] = (), **detail: Any) -> None:
        """Audit a read: the first of its kind each day for each actor gets an entry, and
        the day each session in `sessions` was read is noted (reads.json), so reading
        does not grow the vault; so is the day each memory in `retrieved` (ids) was
        retrieved (`mem review`). `every`: a rare read audited each time (export,
        verify). Best effort: a read-only or full disk must not stop reading."""
        if self.exists():
            from memvault.errors import Busy

            def append() -> None:
                self.audit.append(op, ids=ids, durable=False, **detail)

            with contextlib.suppress(StorageError, Busy, OSError):
                if every:
                    append()
                else:
                    self.reads.note(op, self.actor, map(self.session_mark, set(sessions)),
                                    append, map(self.memory_mark, set(retrieved)))

    def session_mark(self, session: str) -> str:
        """A keyed hash naming a session (reads.json)."""
        return envelope.keyed_hash(self.audit.key, f"session\0{session}".encode())

    def memory_mark(self, memory_id: str) -> str:
        """A keyed hash naming one memory (reads.json: the day it was last retrieved)."""
        return envelope.keyed_hash(self.audit.key, f"memory\0{memory_id}".encode())

    def sessions_read_since(self, day: str) -> set[str]:
        """The marks of the sessions read on `day` (YYYY-MM-DD) or later."""
        return self.reads.sessions_since(day)

    def message_mark(self, session: str, message_id: str) -> str:
        """A keyed hash naming one transcript message (forgotten-message marks)."""
        return envelope.keyed_hash(self.audit.key, f"{session}\0{message_id}".encode())

    def message_digest(self, role: str, created_at: str | None, content: str) -> str:
        """A stable id for a transcript message that has none: a keyed hash of who
        spoke, when, and what was said."""
        digest = envelope.keyed_hash(self.audit.key, "\0".join(
            ("message", role, created_at or "", content)).encode())
        return f"h-{digest[:24]}"

    def path_mark(self, path: bytes) -> str:
        """A keyed hash naming a transcript file (ingest --scan marks)."""
        return envelope.keyed_hash(self.audit.key, path)

    # --- writing --------------------------------------------------------------------------

    @contextlib.contextmanager
    def transaction(self, allow_frozen: bool = False) -> Iterator[Transaction]:
        """Hold the user's lock for one write; create the user on their first write."""
        with self.lock():
            self.store.forget_keys()  # read before the lock: the user may be new since
            self.store.remove_stale_temps()
            created = False
            if not self.store.exists():
                self.store.create()
                created = True
            state = self.store.load_state()
            migrations.upgrade_user(self.store, state, self.audit)
            if not allow_frozen and state.frozen:
                raise Refused(f"the memory of {self.who} is frozen: reads work, writes are "
                              "refused", hint="unfreeze")
            tx = Transaction(self, state)
            if created:
                tx.audit("user.create", key_version=state.key_version)
                self.search_index(state.key_version).create_empty()  # index incrementally
                tx.fresh = True
                for index in self.indexes(state.key_version):
                    index.mark_current()
            else:
                tx.fresh = all(index.is_current() for index in self.indexes(tx.epoch))
            if state.compacting is not None:
                from memvault.vault import archive

                archive.recover(tx)
            ok = False
            try:
                tx.finish_retirement()
                yield tx
                ok = True
            finally:
                tx.close(ok)
        if created and self.on_create is not None:
            self.on_create(self)


class Transaction:
    """One write to one user, under their lock. Use `Vault.transaction()`."""

    def __init__(self, vault: Vault, state: UserState) -> None:
        self.vault = vault
        self.store = vault.store
        self.state = state
        self.fresh = False  # every index was current when the write began
        self._upserts: dict[str, Entry] = {}
        self._deletes: set[str] = set()
        self._created: set[str] = set()
        self._stale = False
        self._audited = False
        self._dirty = False
        # Called as the queued index changes are applied and committed, once the files
        # and the audit entry are durable (a pull reads its next batch meanwhile).
        self.committing: Callable[[], None] | None = None

    @property
    def epoch(self) -> int:
        return self.state.key_version

    # --- content ------------------------------------------------------------------------

    def _changing(self) -> None:
        """Before the first content file changes, every index stops claiming to be
        current: a crash from here on leaves no stamp, and the next reader rebuilds."""
        if not self._stale:
            for index in self.vault.indexes(self.epoch):
                index.mark_stale()
            self._stale = True

    def write_doc(self, name: str, doc: dict[str, Any]) -> None:
        self._changing()
        self.store.write_doc(name, doc, self.epoch)

    def add_to_doc(self, name: str, records: list[Record]) -> None:
        """Append records to a document (CLAUDE.md, preferences.json) and queue them for
        the index. The document is sealed whole, so every record in it takes the
        current epoch."""
        if not records:
            return
        doc = self.store.read_doc(name) or {"format": 1, "records": []}
        kept = [Record.from_stored(r) for r in doc.get("records", [])]
        for r in [*kept, *records]:
            r.key_version = self.epoch
        doc["records"] = [r.stored() for r in [*kept, *records]]
        self.write_doc(name, doc)
        self.index(file_entries(records, [Location.doc(name)] * len(records)))

    def append(self, relpath: str, records: list[Record]) -> list[Location]:
        if not records:
            return []
        self._changing()
        return self.store.append_records(relpath, records)

    def append_new(self, relpath: str, records: list[Record],
                   write: Callable[[Path, bytes], None]) -> list[Location]:
        """`append` to a line file this write creates, sealed here and handed whole to
        `write` (a bulk write creates, writes and fsyncs many files at once on other
        threads, and must have them all durable before its audit entry); a file that is
        there already is appended to as `append` does."""
        path = self.store.layout.path(relpath)
        if not records or path.exists():
            return self.append(relpath, records)
        self._changing()
        lines = [self.store.seal_record(relpath, r) for r in records]
        write(path, b"".join(lines))
        out, offset = [], 0
        for line in lines:
            out.append(Location.line(relpath, offset))
            offset += len(line)
        return out

    def rewrite(self, relpath: str, records: list[Record]) -> list[Location]:
        self._changing()
        return self.store.rewrite_lines(relpath, records)

    def truncate_tail(self, relpath: str) -> bool:
        self._changing()
        return self.store.repair_tail(relpath)

    # --- index changes, applied once after the files ---------------------------------

    def index(self, entries: Iterable[Entry], created: Iterable[str] = ()) -> None:
        """Queue index changes. `created`: ids of records this write made (fresh ids: no
        index holds them yet, so there is nothing to replace)."""
        upserts, deletes, written = self._upserts, self._deletes, self.vault.written
        for entry in entries:  # a pull's batch queues 20,000
            memory_id = entry.record.memory_id
            if deletes:
                deletes.discard(memory_id)
            upserts[memory_id] = entry
            written.add(memory_id)
        self._created.update(created)

    def unindex(self, memory_ids: Iterable[str]) -> None:
        for memory_id in memory_ids:
            self._upserts.pop(memory_id, None)
            self._deletes.add(memory_id)

    def rebuild_indexes(self, changed: set[str] | None = None) -> int:
        """Rebuild every index now, from the files as they are (after changes whose old
        terms must leave the index: deleted Tantivy documents keep their terms until a
        merge). With `changed`, the files this transaction rewrote: only those are
        derived again, when the indexes were current before and nothing else is queued.
        Later changes in this transaction are queued as usual."""
        count = -1
        if changed is not None and self.fresh and not self._upserts and not self._deletes:
            try:
                count = self.vault.rewrite_indexes(self.state, changed)
            except IndexUnavailable:
                count = -1
        if count < 0:
            count = self.vault.rebuild_indexes(self.state)
        self.fresh, self._stale = True, False
        self._upserts.clear()
        self._deletes.clear()
        self._created.clear()  # the rebuilt indexes hold them: a change now replaces them
        return count

    def fetch(self, memory_ids: Sequence[str]) -> dict[str, Record]:
        """Records by id, through the index, as they were when the transaction began
        (call it before changing anything). The index is rebuilt first if it was not
        current, or if it pointed at a moved record."""
        if not self.fresh:
            self.rebuild_indexes()
        for attempt in (1, 2):
            located = self.vault.search_index(self.epoch).locate(memory_ids)
            found, stale = self.vault.read_located(located, self.state)
            if not stale or attempt == 2:
                break
            self.rebuild_indexes()
        return found

    # --- state and audit ----------------------------------------------------------------

    def touch(self) -> None:
        """The state changed: it is saved when the transaction ends."""
        self._dirty = True

    def save_state(self) -> None:
        """Save the state now (when it must be durable before what follows)."""
        self.store.save_state(self.state)
        self._dirty = False

    def new_epoch(self) -> int:
        """Start a new data-key epoch: the wrapped key first, then the state that names
        it. The index key changes with it, so every index is stale from here."""
        self._changing()
        epoch = max([self.epoch, *self.store.deks_on_disk()]) + 1
        self.store.new_epoch(epoch)
        self.state.key_version = epoch
        self.save_state()
        # Vectors follow at once, while the old data key is still there to open them.
        self.vault.settle_vectors(epoch)
        self._stale = False
        self._changing()  # the new epoch's index has no stamp either
        return epoch

    # --- key epochs -------------------------------------------------------------------------

    def reseal(self, progress: Progress = NO_PROGRESS) -> int:
        """Re-encrypt under the current epoch every file that holds a record sealed under
        another (read from the clear headers); how many files were rewritten. `progress`
        counts the files looked at."""
        store, epoch, count = self.store, self.epoch, 0
        lines = [*store.layout.line_files(), *store.layout.line_files(archived=True)]
        progress.start(len(DOC_FILES) + len(lines), "files")
        for home in DOC_FILES:
            progress.advance()
            if store.layout.path(home).exists() and store.key_versions(home) != {epoch}:
                doc = store.read_doc(home)
                if doc is not None:
                    for r in doc.get("records", []):
                        r["key_version"] = epoch
                    self.write_doc(home, doc)
                    count += 1
        for relpath in lines:
            progress.advance()
            if store.key_versions(relpath) - {epoch}:
                records = store.read_lines(relpath)
                for r in records:
                    r.key_version = epoch
                self.rewrite(relpath, records)
                count += 1
        return count

    def retire_unused_keys(self) -> list[int]:
        """Delete the wrapped data keys no file is sealed under any more."""
        used = self.store.keys_in_use(self.epoch)
        retired = [e for e in self.store.deks_on_disk() if e not in used]
        for epoch in retired:
            self.store.remove_dek(epoch)
        if retired:
            self.audit("key.retire", key_versions=retired)
        return retired

    def finish_retirement(self) -> None:
        """Finish what an interrupted `forget --now` or `rotate-key --now` began: a new
        epoch if it was not made yet, every file under it, the older keys deleted. Until
        then the old key still opens every copy of a forgotten record (a backup). A
        damaged file stops it; it is tried again by the next write, and verify says so."""
        through = self.state.retire_through
        if through is None:
            return
        try:
            if self.epoch <= through:
                self.audit("key.rotate", key_version=self.new_epoch())
            self.reseal()
            self.rebuild_indexes()  # also drops what a killed forget left in the index
            self.retire_unused_keys()
        except DataError:
            return
        self.state.retire_through = None
        self.save_state()

    def audit(self, op: str, ids: list[str] | None = None, hashes: list[str] | None = None,
              durable: bool = True, **detail: Any) -> str:
        """Append an audit entry; one not `durable` now is fsynced when the transaction
        ends, before the anchor that names it is saved."""
        audit_id = self.vault.audit.append(op, ids, hashes, durable=durable, **detail)
        self._audited = True
        return audit_id

    def hash_of(self, content_hash: str) -> str:
        return self.vault.audit.hash_of(content_hash)

    def close(self, ok: bool) -> None:
        try:
            if self._audited and self.store.exists():
                self.vault.audit.sync()
                self._anchor()
            if self._dirty and self.store.exists():
                self.save_state()
        finally:
            if ok and self.store.exists():
                self._sync_indexes()

    def _anchor(self) -> None:
        """Record the audit log's newest entry in the state, so that `verify` notices
        when entries are cut from the log's end."""
        old = self.state.audit_head
        if old is not None and self.state.audit_broken is None:
            # The previous anchor must still be in the log, or entries were cut (or the log
            # deleted) since: keep that evidence, or this write would anchor a cut log.
            entry = self.vault.audit.find(int(old.get("seq", 0)))
            if entry is None or entry.get("mac") != old.get("mac"):
                self.state.audit_broken = {"detected_at": now_iso(),
                                           "missing_seq": old.get("seq")}
        self.state.audit_head = self.vault.audit.head
        self._dirty = True

    def _sync_indexes(self) -> None:
        """Apply the queued changes, or rebuild. A failure here never fails the write
        itself (the vault is the truth): the stamp stays away and the next reader
        rebuilds."""
        indexes = self.vault.indexes(self.epoch)
        try:
            if not self.fresh:
                self.vault.rebuild_indexes(self.state)
                return
            if not self._stale and not self._upserts and not self._deletes:
                return
            upserts, deletes = list(self._upserts.values()), sorted(self._deletes)
            if self.committing is not None:
                self.committing()
            for index in indexes:
                index.apply(upserts, deletes, self._created)
                index.mark_current()
        except Exception:  # noqa: BLE001 - derived data; rebuilt by the next reader
            for index in indexes:
                with contextlib.suppress(Exception):
                    index.mark_stale()


def _copy_files(source: Path, target: Path) -> None:
    """Copy the regular files of a directory (an index) into a new private one; anything
    else in it (a link, a FIFO) is left out. A file that cannot be read ends the copy
    early: the copy then does not open, and is built instead."""
    import shutil

    fsio.ensure_dir(target)
    try:
        for entry in sorted(source.iterdir()):
            if entry.is_symlink() or not entry.is_file():
                continue
            with fsio.open_regular(entry) as src:
                fd = os.open(target / entry.name, os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                             fsio.FILE_MODE)
                with os.fdopen(fd, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
    except (OSError, DataError):
        return
