"""Moving sessions' records to the archive together with the summary that replaces
them, as one step a crash cannot split (SPEC §9).

The files that change: preferences.json gains the behavioural facts a summariser drew
(preferences, instructions, corrections); CLAUDE.md gains the summaries and the other
facts; for each session, archive/<session>.jsonl gains the originals and
sessions/<session>.jsonl loses them. Each change is atomic on its own; the journal in
the state (`compacting`) makes them one. It is saved first, with the counters as they
will be after the move, and names the records, the summaries, the facts written to
preferences.json and each archive file's size before:

- the summaries not in CLAUDE.md: the step is undone (the journal's facts taken out of
  preferences.json, each archive file cut back to its old size, the counters put back);
- the summaries in CLAUDE.md (one write adds them all) or none to add: the step is
  finished (the facts are written already; what is missing from an archive file is
  copied from its session file, then the session file is rewritten without the moved
  records; both are idempotent).

Either way the originals are active or the summary is, never both and never neither.
The next transaction (or read) finishes what a killed one began (`recover`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from memvault.errors import DataError
from memvault.index.base import file_entries
from memvault.model.location import session_file
from memvault.model.records import CLAUDE_MD, PREFERENCES, Record
from memvault.storage import fsio
from memvault.vault.vault import Transaction


def move(tx: Transaction, moves: Mapping[str, Sequence[str]], summaries: Sequence[Record],
         facts: Sequence[Record] = ()) -> int:
    """Archive the records named per session (ids of its live file) and append the
    `summaries` to CLAUDE.md, with the `facts` drawn from them, each in its own document
    (preferences, instructions and corrections in preferences.json, the others in
    CLAUDE.md with the summaries, in one write). Returns the number of records moved."""
    kinds: dict[str, int] = {}
    for r in facts:
        kinds[r.type] = kinds.get(r.type, 0) + 1
    behavioral = [r for r in facts if r.home == PREFERENCES]
    journal: dict[str, Any] = {"summaries": [r.memory_id for r in summaries], "moves": [],
                               "facts": kinds,
                               "preferences": [r.memory_id for r in behavioral]}
    for session, ids in sorted(moves.items()):
        live = session_file(session)
        wanted = set(ids)
        present = {i for i in tx.store.line_ids(live) if i in wanted}
        if present != wanted:
            raise DataError(f"{tx.store.layout.name(live)} no longer holds every record "
                            "to archive; nothing was changed")
        journal["moves"].append({"session": session, "ids": sorted(wanted),
                                 "archive_size": _size(tx, session_file(session, True))})
    _count(tx, journal, +1)
    tx.state.compacting = journal
    tx.save_state()  # durable before any file changes
    # preferences.json before CLAUDE.md: until the summaries are there the step is undone,
    # which takes these out again by the ids the journal names; once they are there the
    # step is finished, and these are already written (never lost, never written twice).
    tx.add_to_doc(PREFERENCES, behavioral)
    tx.add_to_doc(CLAUDE_MD, [*summaries, *(r for r in facts if r.home == CLAUDE_MD)])
    _finish(tx, journal)
    return sum(len(m["ids"]) for m in journal["moves"])


def recover(tx: Transaction) -> str | None:
    """Finish or undo a move a killed process left half done (the caller holds the
    lock). Returns what was done ("finished", "undone"); None when nothing was pending."""
    journal = tx.state.compacting
    if journal is None:
        return None
    summaries = set(journal.get("summaries") or [])
    if not summaries or summaries & {r.memory_id for r in tx.store.doc_records(CLAUDE_MD)}:
        _finish(tx, journal)
        tx.save_state()
        tx.rebuild_indexes()
        return "finished"
    _take_out(tx, PREFERENCES, set(journal.get("preferences") or []))
    for step in journal.get("moves", []):
        archive = session_file(str(step["session"]), archived=True)
        size = int(step["archive_size"])
        if _size(tx, archive) > size:
            tx.truncate_tail(archive)  # marks the index stale before the file changes
            path = tx.store.layout.path(archive)
            if size == 0:
                fsio.remove(path)
            else:
                fsio.truncate_to(path, size)
    _count(tx, journal, -1)
    tx.state.compacting = None
    tx.save_state()
    tx.rebuild_indexes()
    return "undone"


def _finish(tx: Transaction, journal: dict[str, Any]) -> None:
    """Copy to the archive what is not there yet, then drop the moved records from the
    session file, then clear the journal. Safe to repeat after a kill at any point."""
    for step in journal.get("moves", []):
        session = str(step["session"])
        wanted = set(step["ids"])
        live, archive = session_file(session), session_file(session, archived=True)
        tx.truncate_tail(archive)  # a copy torn by a kill is cut, then written again
        have = set(tx.store.line_ids(archive))
        scan = tx.store.read_scan(live)
        copies = [r for r in scan.records if r.memory_id in wanted and r.memory_id not in have]
        for record in copies:
            record.key_version, record.archived = tx.epoch, True
        if copies:
            tx.index(file_entries(copies, tx.append(archive, copies)))
        kept = [r for r in scan.records if r.memory_id not in wanted]
        if len(kept) != len(scan.records):
            tx.index(file_entries(kept, tx.rewrite(live, kept)))
    tx.state.compacting = None
    tx.touch()


def _take_out(tx: Transaction, name: str, ids: set[str]) -> None:
    """Remove the records with these ids from a document, if it holds any of them."""
    doc = tx.store.read_doc(name) if ids else None
    if not doc:
        return
    records = doc.get("records", [])
    kept = [r for r in records if not (isinstance(r, dict) and r.get("memory_id") in ids)]
    if len(kept) != len(records):
        tx.write_doc(name, {**doc, "records": kept})


def _count(tx: Transaction, journal: dict[str, Any], sign: int) -> None:
    moved = sum(len(m["ids"]) for m in journal.get("moves", []))
    tx.state.count("message", -sign * moved)
    tx.state.count("message", sign * moved, archived=True)
    if journal.get("summaries"):
        tx.state.count("summary", sign * len(journal["summaries"]))
    for kind, n in (journal.get("facts") or {}).items():
        tx.state.count(str(kind), sign * int(n))


def _size(tx: Transaction, relpath: str) -> int:
    try:
        return os.stat(tx.store.layout.path(relpath)).st_size
    except FileNotFoundError:
        return 0
