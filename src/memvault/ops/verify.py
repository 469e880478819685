"""Verify every file a user has, and repair what an interrupted write left behind.

`verify` decrypts every record and walks the audit chain, one file at a time: its
memory holds 8 bytes per record (a digest of each id, to find a record stored twice
and to compare with the index), never the records themselves.
"""

from __future__ import annotations

import hashlib
import heapq
import os
import tempfile
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from memvault.errors import DataError
from memvault.index.base import IndexUnavailable
from memvault.index.keyed import SearchIndex
from memvault.model.location import session_of
from memvault.model.progress import NO_PROGRESS, Progress
from memvault.model.records import ARCHIVE
from memvault.model.results import Problem, RepairResult, VerifyResult
from memvault.ops.keys import keys_in_use, retire_unused_keys
from memvault.storage import fsio
from memvault.storage.layout import AUDIT, INDEX, KEYS, STATE
from memvault.storage.state import UserState
from memvault.storage.userstore import StateMissing
from memvault.text.words import counted
from memvault.vault import migrations
from memvault.vault.vault import Transaction, Vault


def id_digest(memory_id: str) -> int:
    """64 bits of a record id: 8 bytes a record to find one stored twice."""
    return int.from_bytes(hashlib.blake2b(memory_id.encode(), digest_size=8).digest(), "big")


class _Digests:
    """Record-id digests, 8 bytes a record, sorted in runs of bounded size that are
    spilled to an unnamed temporary file: memory stays flat however many records there
    are (the file holds keyed digests of ids, never content, and vanishes with the
    process)."""

    RUN = 1 << 16
    CHUNK = 1 << 12  # digests read back at a time from each run, while merging

    def __init__(self, where: Path) -> None:
        self.where = where
        self.file: IO[bytes] | None = None
        self.runs: list[tuple[int, int]] = []  # (offset, count) in the file
        self.pending: list[int] = []

    def add(self, digest: int) -> None:
        self.pending.append(digest)
        if len(self.pending) >= self.RUN:
            self._flush()

    def _flush(self) -> None:
        if not self.pending:
            return
        if self.file is None:
            try:
                self.file = tempfile.TemporaryFile(dir=self.where)
            except OSError:  # a vault that takes no writes (mounted read-only)
                self.file = tempfile.TemporaryFile()
        offset = self.file.seek(0, os.SEEK_END)
        array("Q", sorted(self.pending)).tofile(self.file)
        self.runs.append((offset, len(self.pending)))
        self.pending = []

    def _run(self, offset: int, count: int) -> Iterator[int]:
        assert self.file is not None
        read = 0
        while read < count:
            chunk = array("Q")
            n = min(self.CHUNK, count - read)
            self.file.seek(offset + 8 * read)
            chunk.fromfile(self.file, n)
            read += n
            yield from chunk

    def repeated(self) -> set[int]:
        """The digests added more than once (ids stored twice)."""
        self._flush()
        twice: set[int] = set()
        previous = None
        try:
            for digest in heapq.merge(*(self._run(o, n) for o, n in self.runs)):
                if digest == previous:
                    twice.add(digest)
                previous = digest
        finally:
            if self.file is not None:
                self.file.close()
        return twice


class _Problems:
    def __init__(self, vault: Vault) -> None:
        self.prefix = f"{vault.org}/{vault.user}/"
        self.items: list[Problem] = []

    def add(self, rel: str, text: str, line: int | None = None, severity: str = "error",
            repairable: bool = False) -> None:
        name = self.prefix + rel
        text = text.removeprefix(name).lstrip(": ")  # the file is named once, in "file"
        self.items.append(Problem(name, line, text, severity, repairable))

    @property
    def errors(self) -> bool:
        return any(p.severity == "error" for p in self.items)


def verify(vault: Vault, repaired: tuple[str, ...] | None = None,
           progress: Progress = NO_PROGRESS) -> VerifyResult:
    """Decrypt every file and record and check the audit chain; collect every problem.
    `progress` counts the content files checked (it changes nothing: nothing to keep)."""
    store = vault.store
    problems = _Problems(vault)
    if not store.exists():
        return VerifyResult(True, 0, 0, (), repaired)
    files = records = 0
    try:
        # A compaction step a kill left half done is finished (or undone) first, as by
        # every read: verify checks the vault as every other command will see it.
        if store.load_state().compacting is not None:
            vault.state()
    except DataError:
        pass  # reported below
    try:
        state: UserState | None = store.load_state()
    except StateMissing as exc:  # lost, not new: rebuilt from the files by repair
        problems.add(STATE, exc.message.removesuffix(", and nothing was read or written"),
                     repairable=True)
        state = None
    except DataError as exc:
        problems.add(STATE, exc.message)
        state = None
    files += 1
    for epoch in store.deks_on_disk():
        files += 1
        try:
            store.dek(epoch)
        except DataError as exc:
            problems.add(f"{KEYS}/{epoch}.dek", exc.message)
    index = _current_index(vault, state)
    digests = _Digests(store.layout.dir)
    live: dict[str, int] = {}
    archived: dict[str, int] = {}
    content = list(store.layout.content_files())
    progress.start(len(content), "files")
    for relpath in content:
        progress.advance()
        files += 1
        table = archived if relpath.startswith(ARCHIVE + "/") else live
        if relpath.endswith(".jsonl"):
            scan = store.scan_lines(relpath)
            for p in scan.problems:
                problems.add(relpath, p.problem, p.line, "warning" if p.torn_tail else "error",
                             repairable=p.torn_tail)
            found = scan.records
            session = session_of(relpath)
            for record in found:
                if record.session_id != session:
                    problems.add(relpath, f"record {record.memory_id} belongs to session "
                                 f"{record.session_id}")
        else:
            try:
                found = store.doc_records(relpath)
            except DataError as exc:
                problems.add(relpath, exc.message)
                continue
        for record in found:
            records += 1
            table[record.type] = table.get(record.type, 0) + 1
            digests.add(id_digest(record.memory_id))
    twice = digests.repeated()
    if twice:
        _name_duplicates(vault, twice, problems)
    _check_audit(vault, state, problems)
    files += 1
    if state is not None and not problems.errors:  # else the counts are unknown
        if state.counted and (state.live, state.archived) != (live, archived):
            problems.add(STATE, "the record counters disagree with the files",
                         severity="warning", repairable=True)
        if index is not None:
            _check_index(vault, index, records, problems)
        try:
            for epoch in sorted(set(store.deks_on_disk()) -
                                keys_in_use(store, state.key_version)):
                problems.add(f"{KEYS}/{epoch}.dek", "data key no record uses (left by an "
                             "interrupted rotation)", severity="warning", repairable=True)
        except DataError:
            pass  # unreadable files are already reported above
    if state is not None:
        _check_vectors(vault, state, problems)
    if state is not None and state.retire_through is not None:
        problems.add(STATE, f"an interrupted forget --now or rotate-key --now: data keys up "
                     f"to version {state.retire_through} are still to be deleted (the next "
                     "write finishes it)", severity="warning", repairable=True)
    for leftover in store.stale_temps():
        problems.add(leftover, "temporary file left by an interrupted write",
                     severity="warning", repairable=True)
    ok = not problems.errors
    vault.audit_read("verify", every=True, ok=ok, problems=len(problems.items))
    return VerifyResult(ok, files, records, tuple(problems.items), repaired)


def _name_duplicates(vault: Vault, twice: set[int], problems: _Problems) -> None:
    """A second pass, only when some id is stored twice: which files hold it. Line files
    are read from their clear headers (nothing is decrypted)."""
    store = vault.store
    seen: dict[str, str] = {}
    for relpath in store.layout.content_files():
        try:
            ids = [r.memory_id for r in store.doc_records(relpath)] \
                if not relpath.endswith(".jsonl") else list(store.line_ids(relpath))
        except DataError:
            continue  # reported already
        for memory_id in ids:
            if id_digest(memory_id) not in twice:
                continue
            if memory_id in seen:
                problems.add(relpath, f"record {memory_id} is stored twice (also in "
                             f"{seen[memory_id]})")
            seen[memory_id] = relpath


def _check_audit(vault: Vault, state: UserState | None, problems: _Problems) -> None:
    if state is not None and state.audit_broken is not None:
        broken = state.audit_broken
        problems.add(AUDIT, f"entry {broken.get('missing_seq')} and others were cut from "
                     f"the audit log or it was replaced (noticed {broken.get('detected_at')}"
                     "); the record of this stays")
    chain = vault.audit.check(state.audit_head if state else None, keep_entries=False)
    for line, text in chain.problems:
        problems.add(AUDIT, text, line)
    for line, text in chain.warnings:
        problems.add(AUDIT, text, line, "warning", repairable=True)


def _check_vectors(vault: Vault, state: UserState, problems: _Problems) -> None:
    """Every frame of the vector store opens, in its place, and none is missing. Derived
    data: repair drops a damaged store, and the records are embedded again."""
    if not vault.layout.vectors_dir.exists():
        return
    try:
        found = vault.vector_store(state.key_version).verify()
    except DataError:
        return  # the data key is reported above
    for text in found:
        rel, _, problem = text.partition(" ")
        problems.add(rel, problem, repairable=True)


def drop_damaged_vectors(tx: Transaction) -> list[str]:
    """Drop the vector store when any of it fails to verify (the records are embedded
    again by the next `embed`)."""
    if not tx.store.layout.vectors_dir.exists():
        return []
    store = tx.vault.vector_store(tx.epoch)
    found = store.verify()
    if not found:
        return []
    store.clear()
    return [f"dropped the damaged vector store ({found[0]}); its records are embedded again"]


def _current_index(vault: Vault, state: UserState | None) -> SearchIndex | None:
    """The index, if it claims to be current. A missing, stale-marked or unreadable index
    is not a problem: it is derived, and rebuilt by the next search."""
    if state is None:
        return None
    try:
        index = vault.search_index(state.key_version)
        return index if index.stamp.present() else None
    except (DataError, IndexUnavailable, ValueError, OSError):
        return None  # an unreadable data key is reported with its file


def _check_index(vault: Vault, index: SearchIndex, records: int,
                 problems: _Problems) -> None:
    """A current index must hold exactly the vault's records: a record it lacks is an
    error (search would never find it); a document for a record that no longer exists
    is a warning (the next search that meets it heals it).

    Counts first, so that a sound index costs nothing and memory stays flat; only when
    they disagree is every record id looked up (for a live document: a deleted one keeps
    its term), never by reading every stored document. (A record missing and another
    document extra at once, the counts equal, go unnoticed here; the next rebuild heals
    both.)"""
    try:
        live = index.live_count()
        if live == records:
            return
        index.open()
    except (IndexUnavailable, ValueError, OSError):
        return  # derived: the next search rebuilds it
    missing = sum(1 for memory_id in _ids(vault) if not index.holds_live(memory_id))
    extra = max(0, live - (records - missing))
    if missing or extra:
        problems.add(INDEX, f"the index disagrees with the vault: {missing} records missing "
                     f"from it, {extra} that no longer exist",
                     severity="error" if missing else "warning", repairable=True)


def _ids(vault: Vault) -> Iterator[str]:
    """Every record id, from documents and the clear headers of session lines."""
    store = vault.store
    for relpath in store.layout.content_files():
        if relpath.endswith(".jsonl"):
            yield from store.line_ids(relpath)
        else:
            yield from (r.memory_id for r in store.doc_records(relpath))


def repair(vault: Vault) -> RepairResult:
    """Under the lock: drop stale temp files, rebuild a lost state, cut torn tails, drop
    unused keys, recount, rebuild the index. What an interrupted write or rotation left
    behind is set right. A user that does not exist is not created (NotFound)."""
    vault.require_user()
    actions: list[str] = []
    with vault.lock():
        actions += [f"removed {rel}, a temporary file left by an interrupted write"
                    for rel in vault.store.remove_stale_temps()]
        actions += migrations.rebuild_state(vault.store, vault.audit)
    with vault.transaction(allow_frozen=True) as tx:
        store = tx.store
        for relpath in [*store.layout.line_files(), *store.layout.line_files(archived=True)]:
            try:
                if tx.truncate_tail(relpath):
                    actions.append(f"cut a torn last line from {relpath}")
            except DataError as exc:
                actions.append(f"left {relpath} alone: {exc.message}")
        if fsio.drop_torn_tail(vault.audit.path):
            actions.append("cut a torn last audit entry")
        actions += drop_damaged_vectors(tx)
        # What follows reads every record: a damaged file stops it, and verify names it.
        try:
            retired = retire_unused_keys(tx)
            actions += [f"deleted unused data key {e}" for e in retired]
            migrations.recount(store, tx.state)
            tx.touch()
            count = tx.rebuild_indexes()
            actions.append(f"recounted and rebuilt the index ({counted(count, 'record')})")
        except DataError as exc:
            actions.append(f"could not rebuild the index or retire keys: {exc.message}")
    return RepairResult(tuple(actions))
