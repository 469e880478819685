"""Moving sessions' records to the archive together with the summary that replaces
them, as one step a crash cannot split (SPEC §9).

The files that change: CLAUDE.md gains the summary; for each session,
archive/<session>.jsonl gains the originals and sessions/<session>.jsonl loses them.
Each change is atomic on its own; the journal in the state (`compacting`) makes them
one. It is saved first, with the counters as they will be after the move, and names the
records, the summary and each archive file's size before:

- the summaries not in CLAUDE.md: nothing visible changed yet, so the step is undone
  (each archive file cut back to its old size, the counters put back);
- the summaries in CLAUDE.md (one write adds them all) or none to add: the step is
  finished (what is missing from
  an archive file is copied from its session file, then the session file is rewritten
  without the moved records; both are idempotent).

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
from memvault.model.records import CLAUDE_MD, Record
from memvault.storage import fsio
from memvault.vault.vault import Transaction


def move(tx: Transaction, moves: Mapping[str, Sequence[str]], summaries: Sequence[Record],
         facts: Sequence[Record] = ()) -> int:
    """Archive the records named per session (ids of its live file) and append the
    `summaries` (and `facts` that live in CLAUDE.md) to CLAUDE.md, in one write. Returns
    the number of records moved."""
    kinds: dict[str, int] = {}
    for r in facts:
        kinds[r.type] = kinds.get(r.type, 0) + 1
    journal: dict[str, Any] = {"summaries": [r.memory_id for r in summaries], "moves": [],
                               "facts": kinds}
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
    tx.add_to_doc(CLAUDE_MD, [*summaries, *facts])
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
