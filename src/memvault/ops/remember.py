"""Remember one thing: `mem add` (and an agent's explicit store)."""

from __future__ import annotations

from typing import Any

from memvault.config import validate_name
from memvault.crypto.envelope import content_hash
from memvault.errors import NotFound, Refused, UsageError
from memvault.index.base import Entry, file_entries
from memvault.model.location import Location, session_file
from memvault.model.record_results import AddResult
from memvault.model.records import (
    COMPACTION_CHANNEL,
    CONTEXT_NEIGHBOURS,
    MAX_CONTENT,
    SESSIONS,
    TYPE_HOME,
    Record,
    check_type,
    clean_tags,
    normalise_time,
    now_iso,
    uuid7,
)
from memvault.ops.admission import AdmissionPolicy
from memvault.storage.state import Superseded
from memvault.vault.vault import Transaction, Vault


def add(vault: Vault, text: str, kind: str, *, tags: list[str] | None = None,
        importance: float = 0.5, session: str | None = None, supersedes: str | None = None,
        message_id: str | None = None, role: str | None = None,
        channel: str | None = None, created_at: str | None = None,
        may_restate: bool = True, agent: str | None = None) -> AddResult:
    """Store one record; identical content (same user and type) is stored once.
    `created_at` dates it in the past (an agent's summary of an old session). Without
    `may_restate` (an agent that has used its supersedes), saying again a record that
    another replaced is refused: it would replace that other one."""
    check_type(kind)
    if not text.strip():
        raise UsageError("nothing to add: the text is empty")
    if len(text.encode()) > MAX_CONTENT:
        raise UsageError(f"the text is larger than {MAX_CONTENT // 1024} KiB",
                         hint="ingest")
    if not 0.0 <= importance <= 1.0:
        raise UsageError("importance must be between 0 and 1", field="importance")
    tags = clean_tags(tags or [])
    if kind == "message":
        if session is None:
            raise UsageError("a message needs a session", field="session")
        role = role or "user"
    if session is not None:
        validate_name("session", session)
    policy = AdmissionPolicy(vault.settings)
    policy.admit_tags(tags)
    text = policy.admit(text)
    if not text.strip():
        raise UsageError("nothing to add: the text holds only terminal control characters "
                         "or a copy of mem's brief")
    digest = content_hash(text)
    home, category = TYPE_HOME[kind]
    with vault.transaction() as tx:
        old = None
        if supersedes is not None:
            old = tx.fetch([supersedes]).get(supersedes)
            if old is None:
                raise NotFound(f"no memory with id {supersedes} to supersede")
        if home == SESSIONS:
            assert session is not None
            relpath = session_file(session)
            scan = tx.store.read_scan(relpath)
            existing = scan.records
        else:
            doc = tx.store.read_doc(home) or {"format": 1, "records": []}
            existing = [Record.from_stored(r) for r in doc.get("records", [])]
        same = [prior for prior in existing
                if (prior.message_id == message_id if message_id is not None and
                    home == SESSIONS else prior.content_hash == digest and prior.type == kind)]
        current = next((p for p in same if p.memory_id != supersedes
                        and not tx.state.superseded_by(p.memory_id)), None)
        # Only a current record absorbs a repeat: one that another record replaced is
        # hidden, and saying it again makes it current again (a new record that
        # replaces whatever replaced it). With --supersedes, what it names is replaced
        # whatever else holds the same words.
        if same and supersedes is None and (current is not None or home == SESSIONS
                                            and message_id is not None):
            prior = current or same[0]
            if home != SESSIONS and prior.inferred and channel != COMPACTION_CHANNEL:
                _now_stated(tx, home, doc, existing, prior, channel)
            tx.audit("add", [prior.memory_id], [tx.hash_of(digest)], type=kind,
                     deduplicated=True)
            return AddResult(prior, deduplicated=True)
        restated = None
        if same and old is None:
            if not may_restate:
                raise Refused("refused: this repeats a memory that another replaced, and "
                              "storing it would replace that one; this session has used its "
                              "supersedes", field="supersedes")
            restated = same[-1]
            head = _current_of(tx, restated.memory_id)
            old = tx.fetch([head]).get(head) if head != restated.memory_id else None
            supersedes = old.memory_id if old is not None else None
        stamp = normalise_time(created_at) if created_at else now_iso()
        record = Record(
            memory_id=uuid7(), org_id=vault.org, user_id=vault.user, type=kind,
            content=text, content_hash=digest, category=category, tags=tags,
            importance=importance, session_id=session, message_id=message_id,
            channel=channel, role=role, agent=agent, supersedes=supersedes,
            created_at=stamp, updated_at=stamp, key_version=tx.epoch,
        )
        if home == SESSIONS:
            (location,) = tx.append(relpath, [record])
            turns = [*existing, record]
            locations = [*scan.locations(relpath), location]
            # The new turn, and the turns before it, which gain it as context.
            tx.index(file_entries(turns, locations,
                                  range(max(0, len(existing) - CONTEXT_NEIGHBOURS),
                                        len(turns))))
        else:
            records = [*existing, record]
            for r in records:
                r.key_version = tx.epoch
            doc["records"] = [r.stored() for r in records]
            tx.write_doc(home, doc)
            tx.index([Entry(record, Location.doc(home))])
        tx.state.count(kind, +1)
        if old is not None:
            supersede(tx, old, record)
        tx.touch()
        detail: dict[str, Any] = {"type": kind, "deduplicated": False}
        if restated is not None:
            detail["restated"] = restated.memory_id
        tx.audit("add", [record.memory_id], [tx.hash_of(digest)], **detail)
    return AddResult(record, deduplicated=False,
                     restated=restated.memory_id if restated else None)


def _current_of(tx: Transaction, memory_id: str) -> str:
    """The record that replaces `memory_id` now: the end of its chain of supersede
    links (a loop, which only damage can make, ends where it closes)."""
    seen = {memory_id}
    while (by := tx.state.superseded_by(memory_id)) is not None and by not in seen:
        seen.add(by)
        memory_id = by
    return memory_id


def _now_stated(tx: Transaction, home: str, doc: dict[str, Any], records: list[Record],
                prior: Record, channel: str | None) -> None:
    """A record a summariser inferred, now stated by the user: it becomes theirs (the
    brief ranks it so; a forget of the session it was inferred from leaves it)."""
    prior.channel, prior.compacted_from, prior.updated_at = channel, [], now_iso()
    for r in records:
        r.key_version = tx.epoch
    doc["records"] = [r.stored() for r in records]
    tx.write_doc(home, doc)
    tx.index([Entry(prior, Location.doc(home))])


def supersede(tx: Transaction, old: Record, new: Record) -> None:
    """Mark `old` as replaced by `new`: one link in the state, and the old record
    re-indexed as superseded (so search and list leave it out)."""
    tx.state.superseded[old.memory_id] = Superseded(new.memory_id, old.archived)
    old.superseded_by = new.memory_id
    location = tx.vault.search_index(tx.epoch).locate([old.memory_id]).get(old.memory_id)
    if location is not None:
        tx.index([_entry_of(tx, location, old)])


def _entry_of(tx: Transaction, location: Location, record: Record) -> Entry:
    """`record`'s index entry, with its session's turns around it (a turn's context and
    what its vector borrows are unchanged by a supersede)."""
    if location.is_doc:
        return Entry(record, location)
    scan = tx.store.read_scan(location.file)
    entries = file_entries(scan.records, scan.locations(location.file))
    at = next((e for e in entries if e.record.memory_id == record.memory_id), None)
    return Entry(record, location, at.context, at.beside) if at is not None \
        else Entry(record, location)
