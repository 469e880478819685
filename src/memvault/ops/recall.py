"""Reading memory back: search, show one record, list the newest.

Every read is proportional to what it returns: the index names the records (and
where each lives), and only those are decrypted, never the user's whole history.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from memvault.errors import NotFound
from memvault.index.base import IndexUnavailable
from memvault.model.record_results import RecordList, RecordResult, SearchHit, SearchResult
from memvault.model.records import Filters, Record
from memvault.storage.state import UserState
from memvault.vault.vault import Vault

if TYPE_CHECKING:
    from collections.abc import Iterable
    from datetime import datetime

    from memvault.index.keyed import Analyzer, Hit

SNIPPET_CHARS = 160


def _run(vault: Vault, text: str, filters: Filters, state: UserState,
         now: datetime | None = None) -> tuple[list[tuple[Hit, Record]], list[str], int]:
    """The hits of a query with their decrypted records; a hit whose location no longer
    holds its record means a stale index, which is rebuilt once."""
    for attempt in (1, 2):
        index = vault.ready_index(state)
        query, stems = index.build_query(text, filters, now)
        if text.strip() and not stems:
            # Listing the most recent items would answer a question nobody asked.
            return [], [], index.live_count()
        try:
            hits, total = index.search(query, filters.limit, recent=not stems)
            located = {h.memory_id: h.location for h in hits if h.location is not None}
            records, stale = vault.read_located(located, state)
            stale = stale or len(located) < len(hits)
        except IndexUnavailable:  # damage that only a query reveals
            stale, hits, records, total = True, [], {}, 0
        if not stale or attempt == 2:
            break
        vault.reindex_for_reading()
    pairs = [(h, records[h.memory_id]) for h in hits if h.memory_id in records]
    return pairs, stems, total


def search(vault: Vault, text: str, filters: Filters,
           now: datetime | None = None, audit: bool = True) -> SearchResult:
    """The best matches for `text`. With `now` (the moment the question is asked), its
    time phrases ("last week", "two days ago") count too; without, only its words.
    Without `audit`, the search is a step of another operation (forget), not a read."""
    started = time.perf_counter()
    if not vault.exists():
        return SearchResult((), 0, 0.0)
    state = vault.state()
    pairs, stems, total = _run(vault, text, filters, state, now)
    analyzer = vault.search_index(state.key_version).analyzer
    results = tuple(SearchHit(
        memory_id=r.memory_id, category=r.category, type=r.type, content=r.content,
        snippet=snippet(analyzer, r.content, stems), score=round(hit.score, 4),
        tags=tuple(r.tags), created_at=r.created_at, session_id=r.session_id,
        message_id=r.message_id, compacted_from=tuple(r.compacted_from),
    ) for hit, r in pairs)
    if audit:
        vault.audit_read("search", [r.memory_id for r in results], _sessions(
            r for _, r in pairs), results=len(results))
    elapsed = (time.perf_counter() - started) * 1000
    return SearchResult(results, total, round(elapsed, 2),
                        no_words=bool(text.strip()) and not stems)


def search_preferring(vault: Vault, text: str, filters: Filters, tag: str,
                      now: datetime | None = None) -> SearchResult:
    """`search`, with the records that carry `tag` (the current project) first: the best
    of them, then the best of the rest, `filters.limit` in all."""
    from dataclasses import replace

    mine = search(vault, text, replace(filters, tags=[*filters.tags, tag]), now)
    rest = search(vault, text, filters, now)
    seen = {h.memory_id for h in mine.results}
    merged = (*mine.results, *(h for h in rest.results if h.memory_id not in seen))
    return replace(rest, results=merged[: filters.limit],
                   query_time_ms=round(mine.query_time_ms + rest.query_time_ms, 2))


def show(vault: Vault, memory_id: str) -> RecordResult:
    record = vault.fetch([memory_id]).get(memory_id)
    if record is None:
        raise NotFound(f"no memory with id {memory_id}")
    vault.audit_read("show", [memory_id], _sessions([record]))
    return RecordResult(record)


def _sessions(records: Iterable[Record]) -> set[str]:
    """The live sessions whose messages a read returned: compaction spares them."""
    return {r.session_id for r in records
            if r.type == "message" and r.session_id and not r.archived}


def list_records(vault: Vault, filters: Filters) -> RecordList:
    """The newest records that match, newest first: the index orders them by time and
    only `limit` of them are decrypted."""
    if not vault.exists():
        return RecordList(())
    state = vault.state()
    pairs, _, _ = _run(vault, "", filters, state)
    records = [r for _, r in pairs if filters.matches(r)]
    records.sort(key=lambda r: (r.created_at, r.memory_id), reverse=True)
    vault.audit_read("list", count=len(records))
    return RecordList(tuple(records))


def snippet(analyzer: Analyzer, content: str, stems: list[str],
            width: int = SNIPPET_CHARS) -> str:
    """The window of `content` holding the most query terms, on one line.

    Linear in the number of term hits: the hits are in text order, so a window that
    starts at each hit in turn only moves its end forward (a message of one repeated
    term has as many hits as words)."""
    flat = " ".join(content.split())
    if len(flat) <= width:
        return flat
    wanted = set(stems)
    starts = [start for stem, start, _ in analyzer.spans(flat) if stem in wanted]
    best, best_count = 0, 0
    end = 0  # the first hit at or past the window's end
    for first, start in enumerate(starts):
        end = max(end, first)
        while end < len(starts) and starts[end] < start + width:
            end += 1
        if end - first > best_count:
            best, best_count = start, end - first
    begin = max(0, best - width // 4)
    end = min(len(flat), begin + width)
    cut = flat[begin:end]
    return ("…" if begin > 0 else "") + cut + ("…" if end < len(flat) else "")
