"""Search: run a query against the user's index, fetch and decrypt the hits, cut snippets."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from mem.records import CLAUDE_MD, PREFERENCES, Filters, Record

if TYPE_CHECKING:
    from mem.index import Analyzer, Hit
    from mem.vault import Vault

SNIPPET_CHARS = 160


def search(vault: Vault, text: str, filters: Filters) -> dict[str, Any]:
    started = time.perf_counter()
    if not vault.store.exists():
        return {"results": [], "total_searched": 0, "query_time_ms": 0.0}
    from mem.index import IndexUnavailable

    index = vault.ready_index()
    query, stems = index.build_query(text, filters)
    try:
        hits, total = index.search(query, filters.limit, recent=not stems)
        records = _fetch(vault, hits)
    except IndexUnavailable:  # damage that only a query reveals
        records = None
    if records is None:  # a hit pointed at a moved line: the index was stale
        with vault.writing(allow_frozen=True):  # derived data: no write to the memory
            vault.rebuild_index()
        hits, total = index.search(query, filters.limit, recent=not stems)
        records = _fetch(vault, hits) or []
    results: list[dict[str, Any]] = []
    for hit, record in zip(hits, records, strict=True):
        results.append({
            "memory_id": record.memory_id, "category": record.category, "type": record.type,
            "content": record.content,
            "snippet": snippet(index.analyzer, record.content, stems),
            "score": round(hit.score, 4), "tags": record.tags,
            "created_at": record.created_at, "session_id": record.session_id,
            "message_id": record.message_id,
        })
    vault.audit_read("search", [r["memory_id"] for r in results], results=len(results))
    elapsed = (time.perf_counter() - started) * 1000
    return {"results": results, "total_searched": total, "query_time_ms": round(elapsed, 2)}


def _fetch(vault: Vault, hits: list[Hit]) -> list[Record] | None:
    """Decrypt exactly the hit records; None when any location no longer holds its record."""
    docs: dict[str, dict[str, Record]] = {}
    out = []
    for hit in hits:
        if hit.loc in (CLAUDE_MD, PREFERENCES):
            if hit.loc not in docs:
                docs[hit.loc] = {r.memory_id: r for r in vault.store.doc_records(hit.loc)}
            record = docs[hit.loc].get(hit.memory_id)
        else:
            relpath, _, offset = hit.loc.rpartition("@")
            if not offset.isdigit() or not relpath.startswith(("sessions/", "archive/")):
                return None  # a location that does not open: the index is rebuilt
            record = vault.store.read_line_at(relpath, int(offset))
            if record is not None:
                record.archived = relpath.startswith("archive/")
        if record is None or record.memory_id != hit.memory_id:
            return None
        out.append(record)
    return out


def snippet(analyzer: Analyzer, content: str, stems: list[str],
            width: int = SNIPPET_CHARS) -> str:
    """The window of `content` holding the most query terms, on one line."""
    flat = " ".join(content.split())
    if len(flat) <= width:
        return flat
    wanted = set(stems)
    starts = [start for stem, start, _ in analyzer.spans(flat) if stem in wanted]
    best, best_count = 0, 0
    for start in starts:
        count = sum(1 for s in starts if start <= s < start + width)
        if count > best_count:
            best, best_count = start, count
    begin = max(0, best - width // 4)
    end = min(len(flat), begin + width)
    cut = flat[begin:end]
    return ("…" if begin > 0 else "") + cut + ("…" if end < len(flat) else "")
