"""The vault: opening it with the right key, and the operations on one user's memory.

Commands call these functions and render what they return; all decisions live here.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mem import crypto, fsio
from mem.audit import AuditLog
from mem.config import Settings, validate_name
from mem.errors import Busy, DataError, NotFound, Refused, StorageError, UsageError
from mem.keys import MasterKey, create_default_key, key_source_configured, load_master_key
from mem.records import (
    CLAUDE_MD,
    PREFERENCES,
    SESSIONS,
    TYPE_HOME,
    Filters,
    Record,
    check_type,
    normalise_time,
    now_iso,
    uuid7,
)
from mem.store import AUDIT, AUDIT_LOCK, INDEX, KEYS, STATE, UserStore

if TYPE_CHECKING:
    from mem.index import SearchIndex

STAMP_FILE = "stamp"

VAULT_FILE = "vault.json"
VAULT_FORMAT = 1
MAX_CONTENT = 256 * 1024
MAX_TAG = 64
PREF_KEY_MAX = 128


@dataclass
class Located:
    """A record and where it lives (the index keeps `loc` to fetch hits without a scan)."""

    record: Record
    loc: str
    context: tuple[str, ...] = ()  # neighbouring turns' texts, for messages


@dataclass
class NewMessage:
    """One transcript message on its way in (ingest, import, benchmarks)."""

    content: str
    role: str = "user"
    message_id: str | None = None
    created_at: str | None = None
    tags: list[str] = field(default_factory=list)
    channel: str | None = None


@dataclass
class AddResult:
    record: Record
    deduplicated: bool

    def to_dict(self) -> dict[str, Any]:
        return {"memory_id": self.record.memory_id, "content_hash": self.record.content_hash,
                "created_at": self.record.created_at, "deduplicated": self.deduplicated}


def read_vault_meta(root: Path) -> dict[str, Any]:
    path = root / VAULT_FILE
    try:
        meta = json.loads(path.read_text())
    except FileNotFoundError:
        raise NotFound(f"no vault at {root}: run `mem init` (or set --vault / MEM_VAULT)") from None
    except (OSError, ValueError, UnicodeDecodeError):
        raise DataError(f"{path} is corrupt") from None
    if not isinstance(meta, dict) or "key_check" not in meta:
        raise DataError(f"{path} is not a mem vault description")
    if meta.get("format") != VAULT_FORMAT:
        raise DataError(f"{path}: vault format {meta.get('format')!r} is not supported "
                        f"by this mem (format {VAULT_FORMAT})")
    return meta


def init(settings: Settings, passphrase: str | None = None) -> dict[str, Any]:
    """Create the vault and, when no key source is configured, the default master key."""
    root = settings.vault
    if (root / VAULT_FILE).exists():
        vault = Vault(settings)
        return {"vault": str(root), "org": settings.org, "user": settings.user,
                "key_source": vault.master.source, "created": False}
    if key_source_configured(settings):
        # A configured source that fails (a locked password manager, a malformed
        # MEM_MASTER_KEY) is an error, never a reason to make a key somewhere else.
        if passphrase is not None:
            raise UsageError("--passphrase protects a new default key file, but a key "
                             "source is already configured; unset it to use --passphrase")
        master = load_master_key(settings)
    else:
        master = create_default_key(passphrase)
    fsio.ensure_dir(root)
    meta = {"format": VAULT_FORMAT, "created_at": now_iso(), "key_check": master.check_value(),
            "kdf": "HKDF-SHA256", "cipher": "AES-256-GCM"}
    fsio.atomic_write(root / VAULT_FILE, (json.dumps(meta, indent=1) + "\n").encode())
    return {"vault": str(root), "org": settings.org, "user": settings.user,
            "key_source": master.source, "created": True}


class Vault:
    """One user's view of an initialised vault, opened with a checked master key."""

    def __init__(self, settings: Settings, master: MasterKey | None = None) -> None:
        self.settings = settings
        self.root = settings.vault
        self.meta = read_vault_meta(self.root)
        self.master = master or load_master_key(settings)
        if self.master.check_value() != self.meta["key_check"]:
            raise Refused(f"wrong key: the master key from {self.master.source} does not open "
                          f"the vault at {self.root}")
        self.store = UserStore(self.root, settings.org, settings.user, self.master)
        self._search_index: SearchIndex | None = None
        self._index_rebuilt = False
        self._pending: list[tuple[str, Located | str]] = []
        self.audit = AuditLog(self.store.path(AUDIT), self.store.path(AUDIT_LOCK),
                              self.master.meta_key(settings.org, settings.user),
                              settings.lock_timeout)

    # --- locking and first write --------------------------------------------------------

    @contextlib.contextmanager
    def writing(self, allow_frozen: bool = False) -> Iterator[UserStore]:
        """Hold the user's lock; create the user on their first write; keep the index in step.

        Operations queue index changes with `_index_upsert` / `_index_delete`; they are
        committed once, after the vault files are written. If the index was stale or
        missing before, it is rebuilt instead.
        """
        fsio.ensure_dir(self.store.dir)
        with fsio.locked(self.store.lock_path, self.settings.lock_timeout,
                         f"user {self.settings.org}/{self.settings.user}"):
            fsio.remove_stale_temps(self.store.dir)
            if not self.store.exists():
                self.store.create()
                self.audit.append("user.create", key_version=1)
                self.search_index().create_empty()  # so the first write indexes incrementally
                self._write_stamp()
            if not allow_frozen and self.store.load_state().get("frozen"):
                raise Refused(f"the memory of {self.settings.org}/{self.settings.user} is "
                              "frozen: reads work, writes are refused until `mem unfreeze`")
            fresh = self._index_fresh()
            self._pending = []
            self.store.on_change = self._mark_index_stale
            head = self.audit.head
            self._index_rebuilt = False
            try:
                yield self.store
            finally:
                self.store.on_change = None
                pending, self._pending = self._pending, []
                if self.audit.head is not head and self.store.exists():
                    self._anchor_audit()
            if self.store.exists() and not self._index_rebuilt:  # not destroyed, not rebuilt
                self._sync_index(fresh, pending)

    def _anchor_audit(self) -> None:
        """Record the audit log's newest entry in state.json (MAC'd), so `verify` notices
        when entries are cut from the log's end."""
        state = self.store.load_state()
        old = state.get("audit_head")
        if isinstance(old, dict) and not state.get("audit_broken"):
            # The previous anchor must still be in the log, or entries were cut (or the log
            # deleted) since: keep that evidence, or this write would anchor a cut log.
            entry = self.audit.find(int(old.get("seq", 0)))
            if entry is None or entry.get("mac") != old.get("mac"):
                state["audit_broken"] = {"detected_at": now_iso(), "missing_seq": old["seq"]}
        state["audit_head"] = self.audit.head
        self.store.save_state(state)

    # --- the search index -------------------------------------------------------------

    def search_index(self) -> SearchIndex:
        if self._search_index is None:
            from mem.index import SearchIndex
            from mem.keys import index_key

            epoch = self.store.current_epoch()
            self._search_index = SearchIndex(self.store.path(INDEX),
                                             index_key(self.store.dek(epoch)))
        return self._search_index

    def _stamp_path(self) -> Path:
        return self.store.path(INDEX) / STAMP_FILE

    def _index_fresh(self) -> bool:
        """The index is current when it opens and its stamp is there. Writers remove the
        stamp before they change a content file and write it back after the index commit,
        so a crash in between leaves no stamp and the next reader rebuilds."""
        from mem.index import IndexUnavailable

        if not self._stamp_path().exists():
            return False
        try:
            self.search_index().open()
        except IndexUnavailable:
            return False
        return True

    def _mark_index_stale(self) -> None:
        fsio.remove(self._stamp_path())

    def _index_upsert(self, located: Located) -> None:
        self._pending.append(("upsert", located))

    def _index_delete(self, memory_id: str) -> None:
        self._pending.append(("delete", memory_id))

    def _sync_index(self, fresh: bool, pending: list[tuple[str, Located | str]]) -> None:
        """Apply queued changes, or rebuild. A failure here never fails the write itself
        (the vault is the truth): the stamp is dropped and the next reader rebuilds."""
        try:
            if not fresh:
                self.rebuild_index()
                return
            if pending:
                with self.search_index().writer() as w:
                    for _, item in pending:
                        if isinstance(item, Located):
                            w.upsert(item.record, item.loc, item.context)
                        else:
                            w.delete(item)
            self._write_stamp()
        except Exception:
            with contextlib.suppress(OSError):
                self._stamp_path().unlink()
            if os.environ.get("MEM_DEBUG"):
                raise

    def rebuild_index(self) -> int:
        """Rebuild the index from the vault (caller holds the lock). Returns the doc count."""
        index = self.search_index()
        count = index.build((x.record, x.loc, x.context) for x in self.located(True))
        self._write_stamp()
        self._index_rebuilt = True
        return count

    def reset_index(self) -> None:
        """Forget the open index (its key changes with the data key epoch)."""
        self._search_index = None

    def _write_stamp(self) -> None:
        fsio.atomic_write(self._stamp_path(), now_iso().encode())

    def ready_index(self) -> SearchIndex:
        """The index, rebuilt first (under the lock) when missing, corrupt or stale."""
        if not self._index_fresh():
            with fsio.locked(self.store.lock_path, self.settings.lock_timeout,
                             f"user {self.settings.org}/{self.settings.user}"):
                if not self._index_fresh():
                    self.rebuild_index()
        return self.search_index()

    def reindex(self) -> dict[str, Any]:
        self._require_user()
        with self.writing(allow_frozen=True):  # derived data: no memory changes
            count = self.rebuild_index()
            self.audit.append("reindex", documents=count)
        return {"documents": count}

    def _require_user(self) -> None:
        if not self.store.exists():
            raise NotFound(f"user {self.settings.org}/{self.settings.user} has no memory yet")

    def audit_read(self, op: str, ids: list[str] | None = None, **detail: Any) -> None:
        """Audit a read. Best effort: a read-only or full disk must not stop reading."""
        if self.store.exists():
            with contextlib.suppress(StorageError, Busy, OSError):
                self.audit.append(op, ids=ids, durable=False, **detail)

    # --- records --------------------------------------------------------------------------

    def located(self, include_archive: bool = False) -> list[Located]:
        """Every record with its location and, for messages, its neighbours' text."""
        if not self.store.exists():
            return []
        store = self.store
        out = [Located(r, CLAUDE_MD) for r in store.doc_records(CLAUDE_MD)]
        out += [Located(r, PREFERENCES) for r in store.doc_records(PREFERENCES)]
        for archived in ([False, True] if include_archive else [False]):
            for rel in store.line_files(archived=archived):
                scan = store.read_scan(rel)
                for i, (record, offset) in enumerate(zip(scan.records, scan.offsets,
                                                         strict=True)):
                    record.archived = archived
                    out.append(Located(record, f"{rel}@{offset}",
                                       neighbours(scan.records, i)))
        by_id = {x.record.memory_id: x.record for x in out}
        for x in out:
            target = by_id.get(x.record.supersedes or "")
            if target is not None:
                target.superseded_by = x.record.memory_id
        return out

    def _records(self, include_archive: bool = False) -> list[Record]:
        return [x.record for x in self.located(include_archive)]

    def add(self, text: str, kind: str, *, tags: list[str] | None = None,
            importance: float = 0.5, session: str | None = None,
            supersedes: str | None = None, message_id: str | None = None,
            role: str | None = None, channel: str | None = None) -> AddResult:
        check_type(kind)
        if not text.strip():
            raise UsageError("nothing to add: the text is empty")
        if len(text.encode()) > MAX_CONTENT:
            raise UsageError(f"text is larger than {MAX_CONTENT // 1024} KiB; "
                             "store long transcripts with `mem ingest`")
        if not 0.0 <= importance <= 1.0:
            raise UsageError("--importance must be between 0 and 1")
        clean_tags = _clean_tags(tags or [])
        if kind == "message":
            if session is None:
                raise UsageError("a message needs --session")
            role = role or "user"
        if session is not None:
            validate_name("session", session)
        text = self._redacted(text)
        home, category = TYPE_HOME[kind]
        digest = crypto.content_hash(text)
        with self.writing() as store:
            epoch = store.current_epoch()
            old_entry = None
            if supersedes is not None:
                old_entry = next((x for x in self.located(include_archive=True)
                                  if x.record.memory_id == supersedes), None)
                if old_entry is None:
                    raise NotFound(f"no memory with id {supersedes} to supersede")
            if home == SESSIONS:
                assert session is not None
                relpath = store.session_relpath(session)
                existing = store.read_lines(relpath)
            else:
                doc = store.read_doc(home) or {"format": 1, "records": []}
                existing = [Record.from_stored(r) for r in doc.get("records", [])]
            for old in existing:
                same = (old.message_id == message_id if message_id is not None and
                        home == SESSIONS else old.content_hash == digest and old.type == kind)
                if same:
                    self.audit.append("add", [old.memory_id], [self.audit.hash_of(digest)],
                                      type=kind, deduplicated=True)
                    return AddResult(old, deduplicated=True)
            stamp = now_iso()
            record = Record(
                memory_id=uuid7(), org_id=self.settings.org, user_id=self.settings.user,
                type=kind, content=text, content_hash=digest, category=category,
                tags=clean_tags, importance=importance, session_id=session,
                message_id=message_id, channel=channel, role=role, supersedes=supersedes,
                created_at=stamp, updated_at=stamp, key_version=epoch,
            )
            if home == SESSIONS:
                (offset,) = store.append_records(relpath, [record])
                turns = [*existing, record]
                self._index_upsert(Located(record, f"{relpath}@{offset}",
                                           neighbours(turns, -1)))
                offsets = store.read_scan(relpath).offsets  # earlier turns gain context
                for j in range(max(0, len(existing) - CONTEXT_TURNS), len(existing)):
                    self._index_upsert(Located(existing[j], f"{relpath}@{offsets[j]}",
                                               neighbours(turns, j)))
            else:
                records = [*existing, record]
                for r in records:
                    r.key_version = epoch
                doc["records"] = [r.stored() for r in records]
                store.write_doc(home, doc, epoch)
                self._index_upsert(Located(record, home))
            if old_entry is not None:
                old_entry.record.superseded_by = record.memory_id
                self._index_upsert(old_entry)
            self.audit.append("add", [record.memory_id], [self.audit.hash_of(digest)],
                              type=kind, deduplicated=False)
        return AddResult(record, deduplicated=False)

    def add_messages(self, session: str, messages: list[NewMessage],
                     prepare: Callable[[list[NewMessage]], list[NewMessage]] | None = None,
                     dry_run: bool = False) -> dict[str, Any]:
        """Append a transcript's messages to a session: only those not stored yet.

        A message is already stored when its message_id is (or, without an id, when the
        same role said the same thing at the same time). `prepare` (redaction) sees only
        the new messages and may drop some. One write, one fsync, one index commit for the
        whole batch. With `dry_run`, nothing is written: the result lists what would be.
        """
        validate_name("session", session)
        relpath = self.store.session_relpath(session)
        if dry_run:
            existing = self.store.read_lines(relpath) if self.store.exists() else []
            fresh, skipped = self._unseen(session, existing, messages, self._forgotten())
            fresh = prepare(fresh) if prepare else fresh
            return {"session_id": session, "messages_added": 0, "messages_skipped": skipped,
                    "would_add": fresh}
        with self.writing() as store:
            epoch = store.current_epoch()
            scan = store.read_scan(relpath)
            existing = scan.records
            fresh, skipped = self._unseen(session, existing, messages, self._forgotten())
            fresh = prepare(fresh) if prepare else fresh
            new = [Record(
                memory_id=uuid7(), org_id=self.settings.org, user_id=self.settings.user,
                type="message", content=m.content, content_hash=crypto.content_hash(m.content),
                category="conversation", tags=_clean_tags(m.tags), session_id=session,
                message_id=m.message_id, channel=m.channel, role=m.role,
                created_at=m.created_at or "", updated_at=m.created_at or "",
                key_version=epoch,
            ) for m in fresh]
            offsets = store.append_records(relpath, new)
            turns = [*existing, *new]
            first_new = len(existing)
            for i, (record, offset) in enumerate(zip(new, offsets, strict=True)):
                self._index_upsert(Located(record, f"{relpath}@{offset}",
                                           neighbours(turns, first_new + i)))
            if new:  # the last stored turns gain successors as context
                for j in range(max(0, first_new - CONTEXT_TURNS), first_new):
                    self._index_upsert(Located(existing[j], f"{relpath}@{scan.offsets[j]}",
                                               neighbours(turns, j)))
                self.audit.append("ingest", [r.memory_id for r in new],
                                  [self.audit.hash_of(r.content_hash) for r in new],
                                  session_file=relpath, skipped=skipped)
        return {"session_id": session, "messages_added": len(new),
                "messages_skipped": skipped, "memory_ids": [r.memory_id for r in new]}

    def _forgotten(self) -> set[str]:
        if not self.store.exists():
            return set()
        marks = self.store.load_state().get("forgotten", [])
        return set(marks) if isinstance(marks, list) else set()

    def _unseen(self, session: str, existing: list[Record], messages: list[NewMessage],
                forgotten: set[str]) -> tuple[list[NewMessage], int]:
        return _unseen(existing, messages,
                       lambda mid: bool(forgotten) and self.message_mark(session, mid)
                       in forgotten)

    def _redacted(self, text: str) -> str:
        """Refuse a critical secret (exit 77, nothing stored); mask personal data."""
        from mem.redact import scan

        result = scan(text, self.settings.redaction())
        if not result.clean:
            rules = ", ".join(sorted(set(result.refused)))
            raise Refused(f"refused: the text holds a secret ({rules}); nothing was stored")
        return result.text

    def message_mark(self, session: str, message_id: str) -> str:
        """A keyed hash naming one transcript message (for forgotten-message marks)."""
        return crypto.keyed_hash(self.audit.key, f"{session}\0{message_id}".encode())

    def scan_marks(self) -> dict[str, list[int]]:
        """Size and mtime of each transcript `ingest --scan` has seen, by keyed path hash."""
        if not self.store.exists():
            return {}
        marks = self.store.load_state().get("scan_marks", {})
        return marks if isinstance(marks, dict) else {}

    def set_scan_mark(self, key: str, mark: list[int]) -> None:
        with self.writing() as store:
            state = store.load_state()
            state.setdefault("scan_marks", {})[key] = mark
            store.save_state(state)

    def get(self, memory_id: str) -> Record:
        for record in self._records(include_archive=True):
            if record.memory_id == memory_id:
                self.audit_read("show", [memory_id])
                return record
        raise NotFound(f"no memory with id {memory_id}")

    def list_records(self, filters: Filters) -> list[Record]:
        records = [r for r in self._records(filters.include_archive) if filters.matches(r)]
        records.sort(key=lambda r: (r.created_at, r.memory_id), reverse=True)
        records = records[: filters.limit]
        self.audit_read("list", count=len(records))
        return records

    # --- key-value preferences --------------------------------------------------------------

    def _prefs(self) -> dict[str, Any]:
        doc = self.store.read_doc(PREFERENCES) if self.store.exists() else None
        settings = (doc or {}).get("settings", {})
        if not isinstance(settings, dict):
            raise DataError(f"{PREFERENCES} holds malformed settings")
        return settings

    def pref_set(self, key: str, value: str) -> dict[str, Any]:
        _check_pref_key(key)
        value = self._redacted(value)
        if self._redacted(key) != key:
            raise UsageError("a preference key must not hold personal data")
        with self.writing() as store:
            epoch = store.current_epoch()
            doc = store.read_doc(PREFERENCES) or {"format": 1, "records": []}
            settings = doc.setdefault("settings", {})
            entry = {"value": value, "updated_at": now_iso()}
            settings[key] = entry
            for r in doc.get("records", []):
                r["key_version"] = epoch
            store.write_doc(PREFERENCES, doc, epoch)
            self.audit.append("pref.set", hashes=[self.audit.hash_of(key)])
        return {"key": key, **entry}

    def pref_get(self, key: str) -> dict[str, Any]:
        _check_pref_key(key)
        settings = self._prefs()
        if key not in settings:
            raise NotFound(f"no preference named {key!r}")
        self.audit_read("pref.get", hashes=[self.audit.hash_of(key)])
        return {"key": key, **settings[key]}

    def pref_list(self) -> list[dict[str, Any]]:
        settings = self._prefs()
        self.audit_read("pref.list", count=len(settings))
        return [{"key": k, **v} for k, v in sorted(settings.items())]

    def pref_unset(self, key: str) -> dict[str, Any]:
        _check_pref_key(key)
        with self.writing() as store:
            epoch = store.current_epoch()
            doc = store.read_doc(PREFERENCES) or {}
            settings = doc.get("settings", {})
            if key not in settings:
                raise NotFound(f"no preference named {key!r}")
            removed = settings.pop(key)
            store.write_doc(PREFERENCES, doc, epoch)
            self.audit.append("pref.unset", hashes=[self.audit.hash_of(key)])
        return {"key": key, "removed": True, "value": removed.get("value")}

    # --- stats and verify ---------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        records = self._records(include_archive=True)
        by_type: dict[str, int] = {}
        by_category: dict[str, int] = {}
        for r in records:
            by_type[r.type] = by_type.get(r.type, 0) + 1
            by_category[r.category] = by_category.get(r.category, 0) + 1
        exists = self.store.exists()
        size = sum(p.stat().st_size for p in self.store.dir.rglob("*") if p.is_file()) \
            if exists else 0
        state = self.store.load_state() if exists else {}
        return {
            "org": self.settings.org, "user": self.settings.user, "exists": exists,
            "records": len(records),
            "active": sum(1 for r in records if not r.archived and not r.superseded_by),
            "archived": sum(1 for r in records if r.archived),
            "superseded": sum(1 for r in records if r.superseded_by),
            "by_type": dict(sorted(by_type.items())),
            "by_category": dict(sorted(by_category.items())),
            "sessions": len(self.store.line_files()) if exists else 0,
            "preferences": len(self._prefs()),
            "key_version": state.get("key_version"),
            "frozen": bool(state.get("frozen", False)),
            "bytes_on_disk": size,
            "audit_entries": len(self.audit.check().entries) if exists else 0,
        }

    def _verify_index(self, vault_ids: set[str], problem: Any) -> None:
        """A current index must hold exactly the vault's records. A missing or stale-marked
        index is not a problem (it is derived, and rebuilt on the next search); a record the
        index lacks is (search would never find it); an id the index has but the vault does
        not is healed by the next search that meets it."""
        from mem.index import IndexUnavailable

        if not self._stamp_path().exists():
            return
        try:
            index_ids = self.search_index().all_ids()
        except (IndexUnavailable, ValueError):
            return
        missing, extra = len(vault_ids - index_ids), len(index_ids - vault_ids)
        if missing or extra:
            problem(INDEX, _index_problem_text(missing, extra),
                    severity="error" if missing else "warning")

    def verify(self) -> dict[str, Any]:
        """Decrypt every file and record and check the audit chain; collect every problem."""
        problems: list[dict[str, Any]] = []
        files = records = 0
        store = self.store

        def problem(rel: str, text: str, line: int | None = None,
                    severity: str = "error") -> None:
            name = f"{self.settings.org}/{self.settings.user}/{rel}"
            text = text.removeprefix(name).lstrip(": ")  # the file is named once, in "file"
            problems.append({"file": name, "line": line, "problem": text,
                             "severity": severity})

        if not store.exists():
            return {"ok": True, "files_checked": 0, "records_checked": 0, "problems": []}
        try:
            store.load_state()
        except DataError as exc:
            problem(STATE, exc.message)
        files += 1
        for epoch in store.deks_on_disk():
            files += 1
            try:
                store.dek(epoch)
            except DataError as exc:
                problem(f"{KEYS}/{epoch}.dek", exc.message)
        seen: dict[str, str] = {}
        for rel in (CLAUDE_MD, PREFERENCES):
            if not store.path(rel).exists():
                continue
            files += 1
            try:
                for record in store.doc_records(rel):
                    records += 1
                    seen[record.memory_id] = rel
            except DataError as exc:
                problem(rel, exc.message)
        for rel in store.line_files() + store.line_files(archived=True):
            files += 1
            scan = store.scan_lines(rel)
            for p in scan.problems:
                problem(rel, p.problem, p.line, "warning" if p.torn_tail else "error")
            session = rel.split("/", 1)[1].removesuffix(".jsonl")
            for record in scan.records:
                records += 1
                if record.session_id != session:
                    problem(rel, f"record {record.memory_id} belongs to session "
                            f"{record.session_id}")
                if record.memory_id in seen:
                    problem(rel, f"record {record.memory_id} is stored twice "
                            f"(also in {seen[record.memory_id]})")
                seen[record.memory_id] = rel
        try:
            state = store.load_state()
        except DataError:
            state = {}
        anchor = state.get("audit_head")
        broken = state.get("audit_broken")
        if isinstance(broken, dict):
            problem(AUDIT, f"entry {broken.get('missing_seq')} and others were cut from the "
                    f"audit log or it was replaced (noticed {broken.get('detected_at')}); "
                    "the record of this stays")
        chain = self.audit.check(anchor)
        files += 1
        for line, text in chain.problems:
            problem(AUDIT, text, line)
        for line, text in chain.warnings:
            problem(AUDIT, text, line, "warning")
        if not any(p["severity"] == "error" for p in problems):  # else the ids are unknown
            self._verify_index(set(seen), problem)
        try:
            from mem.lifecycle import keys_in_use

            for epoch in sorted(set(store.deks_on_disk()) - keys_in_use(store)):
                problem(f"{KEYS}/{epoch}.dek", "data key no record uses (left by an "
                        "interrupted rotation); `mem verify --repair` deletes it",
                        severity="warning")
        except DataError:
            pass  # unreadable files are already reported above
        for leftover in store.dir.glob(fsio.TMP_PREFIX + "*"):
            problem(leftover.name, "temporary file left by an interrupted write", None,
                    "warning")
        ok = not any(p["severity"] == "error" for p in problems)
        self.audit_read("verify", ok=ok, problems=len(problems))
        return {"ok": ok, "files_checked": files, "records_checked": records,
                "problems": problems}


def _index_problem_text(missing: int, extra: int) -> str:
    return (f"the index disagrees with the vault: {missing} records missing from it, {extra} "
            "that no longer exist; `mem verify --repair` rebuilds it")


def _unseen(existing: list[Record], messages: list[NewMessage],
            forgotten: Callable[[str], bool]) -> tuple[list[NewMessage], int]:
    """The messages not stored yet (with their times normalised), and how many were."""
    seen = {_message_key(r.message_id, r.role, r.content_hash, r.created_at)
            for r in existing}
    fresh: list[NewMessage] = []
    skipped = 0
    for n, m in enumerate(messages, start=1):
        if not m.content.strip() or (m.message_id and forgotten(m.message_id)):
            skipped += 1
            continue
        try:
            stamp = normalise_time(m.created_at) if m.created_at else now_iso()
        except UsageError:
            raise DataError(f"message {m.message_id or n} has an invalid time "
                            f"{m.created_at!r}; nothing was stored") from None
        key = _message_key(m.message_id, m.role, crypto.content_hash(m.content), stamp)
        if key in seen:
            skipped += 1
            continue
        seen.add(key)
        fresh.append(replace(m, created_at=stamp))
    return fresh, skipped


def _message_key(message_id: str | None, role: str | None, digest: str,
                 created_at: str) -> tuple[str, ...]:
    if message_id:
        return ("id", message_id)
    return ("content", role or "", digest, created_at)


CONTEXT_TURNS = 2  # turns on each side whose words help find a message


def neighbours(records: list[Record], i: int) -> tuple[str, ...]:
    """The texts of the turns around record `i` of a session (indexed as context: an
    answer's words are often in the question just before it)."""
    n = len(records)
    i = i % n
    return tuple(records[j].content for j in range(i - CONTEXT_TURNS, i + CONTEXT_TURNS + 1)
                 if j != i and 0 <= j < n)


def _clean_tags(tags: list[str]) -> list[str]:
    out: list[str] = []
    for tag in tags:
        tag = tag.strip()
        if not tag or len(tag) > MAX_TAG or any(c.isspace() for c in tag):
            raise UsageError(f"invalid tag {tag!r}: 1-{MAX_TAG} characters, no spaces")
        if tag not in out:
            out.append(tag)
    return out


def _check_pref_key(key: str) -> None:
    if not key or len(key) > PREF_KEY_MAX or any(c.isspace() for c in key):
        raise UsageError(f"invalid preference key {key!r}: 1-{PREF_KEY_MAX} characters, "
                         "no spaces")
