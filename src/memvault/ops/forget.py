"""Forget: erase records from every file that holds them and from the index (SPEC §10).

What a request names is found through the index (ids, session, date, tag, words) and
only the files that hold it are read and rewritten. The index is then rebuilt, since
deleted Tantivy documents keep their terms until a merge; with `now`, the live records
move to a new key epoch at once and the old data key is deleted.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from memvault.errors import NotFound, UsageError
from memvault.model.location import session_file
from memvault.model.records import CLAUDE_MD, DOC_FILES, Filters, Record
from memvault.model.results import ForgetPlan, ForgetResult
from memvault.ops import keys
from memvault.storage.state import UserState
from memvault.vault.vault import Transaction, Vault

if TYPE_CHECKING:
    from memvault.index.keyed import Hit, SearchIndex

# A forget by query that takes more than this many records and more than this share of
# the user's records is confirmed by typing the count (or `--all-matches`): `--yes`
# alone is not enough (docs/guide.md).
BROAD_COUNT = 20
BROAD_SHARE = 0.10


def select(vault: Vault, ids: list[str], session: str | None = None,
           before: datetime | None = None, tag: str | None = None,
           query: str | None = None) -> ForgetPlan:
    """The records a forget request names (every criterion given must match), and the
    summaries compacted from them."""
    if not (ids or session or before or tag or query):
        raise UsageError("name what to forget: ids, a session, a date, a tag or a query")
    if not vault.exists():
        if ids:
            raise NotFound(f"no memory with id {ids[0]}")
        return ForgetPlan(())
    state = vault.state()
    if state.retire_through is not None:
        # An interrupted `forget --now`: running forget again finishes it (the write
        # transaction does), even when what it named is gone by now.
        with vault.transaction():
            pass
        state = vault.state()
    filters = Filters(session=session, before=before, tags=[tag] if tag else [],
                      include_archive=True, include_superseded=True, limit=1)
    chosen: list[Record] = []
    if ids:
        found = vault.fetch(ids, state)
        missing = [i for i in ids if i not in found]
        if missing:
            raise NotFound(f"no memory with id {missing[0]}" +
                           (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
        chosen = [r for r in (found[i] for i in dict.fromkeys(ids)) if filters.matches(r)]
    held = 0
    if query is not None:
        chosen, held = _found(vault, state, query, chosen if ids else None, filters)
        # A summary found because a record it was made from is found too is made again
        # without that record (forget()), not forgotten with everything else it says.
        # Named by id, it goes.
        named, hits = set(ids), {r.memory_id for r in chosen}
        chosen = [r for r in chosen if r.memory_id in named or r.type != "summary"
                  or not set(r.compacted_from) & hits]
    elif not ids:
        chosen = _matching(vault, state, filters)
    gone = {r.memory_id for r in chosen}
    derived, remade = _derived(vault, gone)
    targets = tuple(chosen + derived)
    return ForgetPlan(targets, remade, held, query is not None and _broad(len(targets), held))


def _broad(taken: int, held: int) -> bool:
    """Whether words would take so much of the memory that the user is asked again, by
    count: a query meant for a few records that turns out to hold common words."""
    return taken > BROAD_COUNT and taken > held * BROAD_SHARE


def _matching(vault: Vault, state: UserState, filters: Filters) -> list[Record]:
    """Every record the filters select, through the index (all of them, newest first)."""
    def hits(index: SearchIndex) -> list[Hit]:
        query, _ = index.build_query("", filters)
        return index.search(query, max(int(index.searcher().num_docs), 1), recent=True)[0]

    return _read(vault, state, hits)


def _read(vault: Vault, state: UserState,
          hits_of: Callable[[SearchIndex], list[Hit]]) -> list[Record]:
    """The records the index names, read from their files, in the index's order. A
    location that no longer holds its record means a stale index: rebuilt once, and
    asked again."""
    for attempt in (1, 2):
        hits = hits_of(vault.ready_index(state))
        located = {h.memory_id: h.location for h in hits if h.location is not None}
        records, stale = vault.read_located(located, state)
        if not (stale or len(located) < len(hits)) or attempt == 2:
            break
        with vault.lock():
            vault.rebuild_indexes(vault.locked_state())
    return [records[h.memory_id] for h in hits if h.memory_id in records]


def _found(vault: Vault, state: UserState, query: str, chosen: list[Record] | None,
           filters: Filters) -> tuple[list[Record], int]:
    """Every record holding a word of the query in its own text (every quoted phrase, as
    written), with the other criteria as filters, however many: by words only, never by
    meaning (whose nearest neighbours are near at any distance), a speaker, a day or a
    neighbouring turn. The same set, in the same order, as `mem search QUERY --mode words
    --include-archive --include-superseded` with no limit. With ids, only those of them.
    Also how many records the user has (the share a broad query would take)."""
    words = Filters(session=filters.session, before=filters.before, tags=filters.tags,
                    include_archive=True, include_superseded=True)
    index = vault.ready_index(state)
    if not index.build_query(query, Filters(), words_only=True)[1]:
        # A search for no words lists the most recent items: never "forget everything".
        raise UsageError(f"the query {query!r} has no words to search for; nothing "
                         "was forgotten", field="query")
    held = index.live_count()

    def hits(index: SearchIndex) -> list[Hit]:
        q, _ = index.build_query(query, words, words_only=True)
        count = index.count(q)
        return index.search(q, count)[0] if count else []

    if chosen is not None:  # already read: the index only says which of them match
        keep = {r.memory_id: r for r in chosen}
        return [keep[h.memory_id] for h in hits(index) if h.memory_id in keep], held
    return _read(vault, state, hits), held


def _derived(vault: Vault, gone: set[str]) -> tuple[list[Record], tuple[str, ...]]:
    """What compaction made from forgotten records and holds nothing else: a summary
    whose every source is forgotten (then summaries made from those), and a fact a
    summariser drew from them (it cannot be told which message it came from). And the
    ids of the summaries with sources left, which are made again from those instead
    (`_rebuilt`)."""
    made = [r for home in DOC_FILES for r in vault.store.doc_records(home)
            if r.compacted_from]
    derived: list[Record] = []
    while more := [r for r in made if r.memory_id not in gone and (
            set(r.compacted_from) <= gone if r.type == "summary"
            else bool(set(r.compacted_from) & gone))]:
        derived += more
        gone.update(r.memory_id for r in more)
    remade = tuple(r.memory_id for r in made if r.type == "summary"
                   and r.memory_id not in gone and set(r.compacted_from) & gone)
    return derived, remade


def _rebuilt(tx: Transaction, gone: set[str]) -> dict[str, Record]:
    """Summaries that were made partly from forgotten records, made again (with the
    built-in summariser) from the records left: the forgotten content leaves the summary
    too. Read before anything changes; a summary whose sources cannot all be read is
    forgotten instead (absent from the result, and added to `gone`)."""
    from memvault.ops.compact import remade_summary

    out: dict[str, Record] = {}
    for summary in tx.store.doc_records(CLAUDE_MD):
        left = [i for i in summary.compacted_from if i not in gone]
        if summary.type != "summary" or summary.memory_id in gone or \
                len(left) == len(summary.compacted_from):
            continue
        sources = tx.fetch(left)
        if len(sources) != len(left):
            gone.add(summary.memory_id)
            continue
        out[summary.memory_id] = remade_summary(tx, summary, [sources[i] for i in left])
    return out


def forget(vault: Vault, plan: ForgetPlan, now: bool = False,
           merging: bool = False) -> ForgetResult:
    """Remove the records from every file that holds them, then rebuild the index.
    `merging`: an erasure another machine made, applied by sync (a frozen user takes it,
    as it takes what others stored before the freeze reached them)."""
    targets = plan.targets
    gone = {r.memory_id for r in targets}
    rewritten: list[str] = []
    with vault.transaction(allow_frozen=merging) as tx:
        # Marks first, durably: a crash after this can only leave content that the next
        # forget finds again, never a message that a re-ingest would bring back.
        # A transcript's messages and its agent's summaries carry their transcript ids.
        marks = {vault.message_mark(r.session_id, r.message_id) for r in targets
                 if r.type in ("message", "summary") and r.session_id and r.message_id}
        # With `now`, the promise to retire the current key is saved with them: a run
        # killed before it is kept is finished by the next write.
        if now:
            tx.state.retire_through = tx.epoch
        # The ids join the erasure ledger with them: sync never pulls them back, and
        # sends the forget again to a remote that lacks it (rolled back, emptied).
        if marks - tx.state.forgotten or gone - tx.state.erased or now:
            tx.state.forgotten |= marks
            tx.state.erased |= gone
            tx.save_state()
        remade = _rebuilt(tx, gone)
        removed: list[Record] = []
        for home in DOC_FILES:
            doc = tx.store.read_doc(home)
            if doc is None:
                continue
            records = [Record.from_stored(r) for r in doc.get("records", [])]
            kept = [remade.get(r.memory_id, r) for r in records if r.memory_id not in gone]
            if len(kept) != len(records) or any(r.memory_id in remade for r in records):
                removed += [r for r in records if r.memory_id in gone]
                for r in kept:
                    r.key_version = tx.epoch
                doc["records"] = [r.stored() for r in kept]
                tx.write_doc(home, doc)
                rewritten.append(home)
        # A message lives in the line file of its session (live or archived): only those
        # files are read and rewritten, not every session of the user.
        files = sorted({session_file(r.session_id, r.archived) for r in targets
                        if r.type == "message" and r.session_id})
        for relpath in files:
            lines = tx.store.read_lines(relpath)
            kept_lines = [r for r in lines if r.memory_id not in gone]
            if len(kept_lines) != len(lines):
                removed += [r for r in lines if r.memory_id in gone]
                tx.rewrite(relpath, kept_lines)
                rewritten.append(relpath)
        for r in removed:
            tx.state.count(r.type, -1, archived=r.archived)
        for old, link in list(tx.state.superseded.items()):
            if old in gone or link.by in gone:  # gone, or current again
                del tx.state.superseded[old]
        if removed and not now:
            # Old copies (backups, snapshots) stay decryptable until the key epoch
            # changes: the next compaction re-encrypts and deletes the old key.
            tx.state.rekey_pending = True
        tx.touch()
        audit_id = tx.audit("forget", sorted(gone),
                            [tx.hash_of(r.content_hash) for r in targets],
                            files=len(rewritten), summaries_rebuilt=sorted(remade))
        # Deleted Tantivy documents keep their terms until a merge: rebuild instead,
        # deriving again only the files just rewritten.
        tx.rebuild_indexes(changed=set(rewritten))
        if now:
            keys.reencrypt(tx)
    return ForgetResult(len(gone), tuple(sorted(gone)), tuple(rewritten), audit_id, now,
                        tuple(sorted(remade)))
