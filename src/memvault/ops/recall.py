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
    from collections.abc import Collection, Iterable
    from datetime import datetime
    from typing import Any

    from memvault.index.fusion import Asked, Fused
    from memvault.index.keyed import Analyzer, Hit, SearchIndex
    from memvault.index.vectors import VectorHit, VectorStore

SNIPPET_CHARS = 160
MODES = ("lexical", "semantic", "hybrid", "words")


def _run(vault: Vault, text: str, filters: Filters, state: UserState,
         now: datetime | None = None, words_only: bool = False, weak: bool = False
         ) -> tuple[list[tuple[Fused, Record]], list[str], int]:
    """The hits of a query by words, ranked and floored (index/fusion.py), with their
    decrypted records; a hit whose location no longer holds its record means a stale
    index, which is rebuilt once. `weak`: the hits under the floor too, after the rest.
    `words_only` (what `forget --query` takes): every record holding a word, by BM25."""
    from memvault.index.fusion import Fused, fuse

    for attempt in (1, 2):
        index = vault.ready_index(state)
        query, stems = index.build_query(text, filters, now, words_only=words_only,
                                         names=_names(vault))
        if text.strip() and not stems:
            # Listing the most recent items would answer a question nobody asked.
            return [], [], index.live_count()
        try:
            if not stems:  # the most recent items, newest first
                hits, total = index.search(query, filters.limit, recent=True)
                top = [Fused(h.memory_id, 0.0, i + 1, None, 0.0, None)
                       for i, h in enumerate(hits)]
            else:
                hits, total = index.search(query, filters.limit) if words_only else \
                    _lexical(index, query, text, filters, now, vault)
                ideal = index.ideal(stems)
                question, held = (None, {}) if words_only else _evidence(
                    vault, index, text, stems, {h.memory_id: h.score for h in hits}, ideal)
                top = _kept(fuse([(h.memory_id, h.score) for h in hits], [],
                                 ideal=ideal, floor=not words_only,
                                 kinds={h.memory_id: h.kind for h in hits},
                                 question=question, held=held),
                            filters.limit, weak)
            where = {h.memory_id: h.location for h in hits}
            located = {f.memory_id: loc for f in top
                       if (loc := where[f.memory_id]) is not None}
            records, stale = vault.read_located(located, state)
            stale = stale or len(located) < len(top)
        except IndexUnavailable:  # damage that only a query reveals
            stale, top, records, total = True, [], {}, 0
        if not stale or attempt == 2:
            break
        vault.reindex_for_reading()
    return [(f, records[f.memory_id]) for f in top if f.memory_id in records], stems, total


def _lexical(index: SearchIndex, query: Any, text: str, filters: Filters,
             now: datetime | None, vault: Vault) -> tuple[list[Hit], int]:
    """The lexical leg's candidates, best first: the top CANDIDATES (more than asked
    for: a stored memory may outrank the turns above it), and the stored memories'
    own top CANDIDATES, which a question's common words ("live", "use") could leave
    below thousands of transcript lines."""
    from dataclasses import replace

    from memvault.index.fusion import CANDIDATES
    from memvault.model.records import TYPES

    n = max(filters.limit, CANDIDATES)
    hits, total = index.search(query, n)
    kinds = [t for t in filters.types or TYPES if t != "message"]
    if len(hits) >= n and kinds:  # a stored memory may lie below the cut
        stored, _ = index.search(index.build_query(text, replace(filters, types=kinds), now,
                                                   names=_names(vault))[0], n)
        seen = {h.memory_id for h in hits}
        hits = hits + [h for h in stored if h.memory_id not in seen]
    hits.sort(key=lambda h: (-h.score, h.memory_id))  # as the index orders equals
    return hits, total


def _evidence(vault: Vault, index: SearchIndex, text: str, stems: list[str],
              scores: dict[str, float], ideal: float) -> tuple[Asked | None, dict[str, int]]:
    """What of the question is evidence of a match (index/fusion.py `asked`), and which
    of its stems each candidate clearing the words' floor holds (by its BM25 `scores`);
    (None, {}): every searched word is (no frame word, no topic word the memory lacks),
    so whatever clears the floor matches."""
    from memvault.index.fusion import HELD_MAX, WORDS_FLOOR, asked, words_relevance
    from memvault.index.keyed import ROLE_WORDS, STOPWORDS

    if len(stems) > HELD_MAX:
        return None, {}
    a = index.analyzer
    skip = STOPWORDS | ROLE_WORDS | {w for n in _names(vault) for w in a.words(n)}
    question = asked(a, text, stems, skip, index.doc_freqs(stems)[0])
    if question.held == (1 << len(stems)) - 1:
        return None, {}
    return question, index.holding(stems, [
        m for m, score in scores.items() if words_relevance(score, ideal) >= WORDS_FLOOR])


def _kept(ranked: list[Fused], limit: int, weak: bool) -> list[Fused]:
    """The first `limit` matches; with `weak`, the weak ones after them (still `limit`
    in all)."""
    return ranked[:limit] if weak else [f for f in ranked[:limit] if f.matches]


def _names(vault: Vault) -> tuple[str, ...]:
    """The user's own name, a role word in their own memory ("what does ana prefer")."""
    return (vault.user,)


def search(vault: Vault, text: str, filters: Filters,
           now: datetime | None = None, audit: bool = True,
           mode: str | None = None, meaning: _Meaning | None = None,
           weak: bool = False) -> SearchResult:
    """The best matches for `text`. With `now` (the moment the question is asked), its
    time phrases ("last week", "two days ago") count too; without, only its words.
    Without `audit`, the search is a step of another operation (forget), not a read.

    `mode`: "lexical" (words only), "semantic" (meaning only), "hybrid" (both fused,
    index/fusion.py), "words" (the records holding a word of the query in their own
    text: no speaker, day, neighbouring turn or meaning; what `forget --query` takes),
    or None: hybrid when the user has vectors of the configured model, else lexical.
    When the meaning cannot be had (no vectors, the embedder fails), the words alone
    rank and the result's `notice` says why. `meaning`: the query's, asked already (by
    search_preferring, which searches twice).

    Only matches are returned (index/fusion.py: a record whose words or meaning clear
    the floor), stored memories before transcript turns that match as well; `weak`
    returns the weaker ones too, after them, marked. Scores are on one scale (0 to 1)
    whatever the mode."""
    check_mode(mode)
    started = time.perf_counter()
    if not vault.exists():
        return SearchResult((), 0, 0.0)
    state = vault.state()
    used, notice, ranked = "lexical", None, None
    if mode not in ("lexical", "words") and text.strip():
        vector, store, notice = meaning or _meaning(vault, state, text,
                                                    explicit=mode is not None)
        if vector is not None and store is not None:
            used = mode or "hybrid"
            try:
                ranked = _fused(vault, text, filters, state, now, vector, store,
                                semantic_only=used == "semantic", weak=weak)
            except _VectorsUnreadable as e:
                used, notice = "lexical", f"the vector store is unreadable ({e}): ranked by " \
                    "words only"
            if ranked is None:  # no word to search for: the most recent, as by words
                used = "lexical"
    if mode == "words":
        used = "words"
    if ranked is None:
        ranked = _run(vault, text, filters, state, now, words_only=mode == "words",
                      weak=weak)
    found, stems, total = ranked
    analyzer = vault.search_index(state.key_version).analyzer
    results = tuple(SearchHit(
        memory_id=r.memory_id, category=r.category, type=r.type, content=r.content,
        snippet=snippet(analyzer, r.content, stems), score=round(min(1.0, f.score), 4),
        weak=not f.matches,
        tags=tuple(r.tags), created_at=r.created_at, session_id=r.session_id,
        message_id=r.message_id, compacted_from=tuple(r.compacted_from), agent=r.agent,
        lexical_rank=f.lexical_rank, semantic_rank=f.semantic_rank,
        lexical_score=_rounded(f.lexical_score), semantic_score=_rounded(f.semantic_score),
    ) for f, r in found)
    if audit:
        vault.audit_read("search", [r.memory_id for r in results], _sessions(
            r for _, r in found), retrieved=_memories(r for _, r in found),
            results=len(results))
    elapsed = (time.perf_counter() - started) * 1000
    return SearchResult(results, total, round(elapsed, 2),
                        no_words=bool(text.strip()) and not stems, mode=used, notice=notice)


def check_mode(mode: str | None) -> None:
    from memvault.errors import UsageError

    if mode is not None and mode not in MODES:
        raise UsageError(f"unknown search mode {mode!r}: lexical, semantic, hybrid or "
                         "words", field="mode")


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


# The query's vector and the store to search with it; or None and why not.
_Meaning = tuple["Any", "VectorStore | None", "str | None"]


def _meaning(vault: Vault, state: UserState, text: str, explicit: bool) -> _Meaning:
    """The query's meaning, or why not (said only when meaning was asked for, or when the
    embedder failed). Whatever an endpoint does (it fails, it is not there, it answers
    slowly: bounded by its `max_wait`), the search goes on by words: every request to
    it is made here, the query's embedding before its model is compared (an endpoint
    whose dimensions are not set learns them from that answer, not from another)."""
    from memvault.embed import open_embedder
    from memvault.embed.base import EmbeddingsError

    embedder = open_embedder(vault.settings.embeddings)
    if embedder is None:
        return None, None, ("embeddings are turned off (provider: none): ranked by words "
                            "only" if explicit else None)
    store = vault.vector_store(state.key_version)
    try:
        stored = store.model() if store.count() else None
    except IndexUnavailable:  # a damaged store: verify reports it, search goes on
        stored = None
    try:
        if stored is None:  # nothing to search: the endpoint is not asked for the query
            return None, None, (f"no vectors of {embedder.model.key()} yet: ranked by "
                                "words only" if explicit else None)
        vector = embedder.embed([text])[0]
        if stored != embedder.model:
            return None, None, (f"no vectors of {embedder.model.key()} yet: ranked by "
                                "words only" if explicit else None)
    except EmbeddingsError as e:
        return None, None, f"{e.message}; ranked by words only"
    return vector, store, None


class _VectorsUnreadable(Exception):
    """The vector store turned out damaged on use: the search goes on by words."""


def _near(store: VectorStore, vector: Any, k: int, include_archive: bool,
          allowed: Collection[str] | None) -> list[VectorHit]:
    try:
        return store.search(vector, k, include_archive=include_archive, allowed=allowed)
    except IndexUnavailable as e:
        raise _VectorsUnreadable(str(e)) from e


def _narrowing(filters: Filters) -> bool:
    """Whether the filters leave out more than archived and superseded records."""
    return bool(filters.types or filters.categories or filters.tags or filters.after
                or filters.before or filters.session is not None
                or filters.agent is not None)


def _fused(vault: Vault, text: str, filters: Filters, state: UserState,
           now: datetime | None, vector: Any, store: VectorStore, semantic_only: bool,
           weak: bool = False) -> tuple[list[tuple[Fused, Record]], list[str], int] | None:
    """Both legs' candidates fused (or, `semantic_only`, the semantic leg's alone), each
    record decrypted only if it is in the final list. None: the query has no words (the
    most recent items are listed, as by words). Both legs see the same filters: the
    semantic leg's candidates pass through the index, which scores their words (and
    their time, for a time phrase) and says where they live."""
    from memvault.index.fusion import CANDIDATES, fuse, meaning_floor

    n = max(filters.limit, CANDIDATES)
    for attempt in (1, 2):
        index = vault.ready_index(state)
        query, stems = index.build_query(text, filters, now, names=_names(vault))
        if not stems:
            return None
        try:
            lexical, total = ([], index.live_count()) if semantic_only \
                else _lexical(index, query, text, filters, now, vault)
            allowed = index.matching(index.build_query("", filters)[0]) \
                if _narrowing(filters) else None
            near = _near(store, vector, n, filters.include_archive, allowed)
            hits = {h.memory_id: h for h in lexical}
            others = [h.memory_id for h in near if h.memory_id not in hits]
            if others:
                hits.update((h.memory_id, h) for h in _scored(index, text, filters, now,
                                                             others, _names(vault)))
            semantic = [(h.memory_id, h.score) for h in near if h.memory_id in hits]
            # Where this model puts what does not match this query: the floor's origin.
            floor = meaning_floor(store.baseline(vector))
            ideal = index.ideal(stems)
            question, held = (None, {}) if semantic_only else _evidence(
                vault, index, text, stems, {m: h.score for m, h in hits.items()}, ideal)
            fused = fuse([(h.memory_id, h.score) for h in lexical], semantic, ideal=ideal,
                         lexical_scores={m: hits[m].score for m in others if m in hits},
                         semantic_only=semantic_only,
                         kinds={m: h.kind for m, h in hits.items()},
                         meaning_floor=floor, question=question, held=held)
            top = _kept(fused, filters.limit, weak)
            located = {f.memory_id: loc for f in top
                       if (loc := hits[f.memory_id].location) is not None}
            records, stale = vault.read_located(located, state)
            stale = stale or len(located) < len(top)
        except IndexUnavailable:
            stale, top, records, total = True, [], {}, 0
        if not stale or attempt == 2:
            break
        vault.reindex_for_reading()
    return [(f, records[f.memory_id]) for f in top if f.memory_id in records], stems, total


def _scored(index: SearchIndex, text: str, filters: Filters, now: datetime | None,
            ids: list[str], names: Collection[str] = ()) -> list[Hit]:
    """These records as the lexical query scores them (0: no word in common), those the
    filters leave out left out."""
    query, _ = index.build_query(text, filters, now, ids=ids, names=names)
    return index.search(query, len(ids))[0]


def search_preferring(vault: Vault, text: str, filters: Filters, tag: str,
                      now: datetime | None = None, mode: str | None = None,
                      weak: bool = False) -> SearchResult:
    """`search`, with the records that carry `tag` (the current project) first: the best
    of them, then the best of the rest, `filters.limit` in all."""
    from dataclasses import replace

    check_mode(mode)
    meaning = None
    if mode not in ("lexical", "words") and text.strip() and vault.exists():
        # Asked once for both searches: an endpoint that is down costs its wait once.
        meaning = _meaning(vault, vault.state(), text, explicit=mode is not None)
    mine = search(vault, text, replace(filters, tags=[*filters.tags, tag]), now, mode=mode,
                  meaning=meaning, weak=weak)
    rest = search(vault, text, filters, now, mode=mode, meaning=meaning, weak=weak)
    seen = {h.memory_id for h in mine.results}
    # The project's matches first, then the other matches, then (asked for) the weak ones.
    merged = (*(h for h in mine.results if not h.weak),
              *(h for h in rest.results if h.memory_id not in seen and not h.weak),
              *(h for h in mine.results if h.weak),
              *(h for h in rest.results if h.memory_id not in seen and h.weak))
    return replace(rest, results=merged[: filters.limit],
                   query_time_ms=round(mine.query_time_ms + rest.query_time_ms, 2))


def show(vault: Vault, memory_id: str) -> RecordResult:
    """One record by its id, or a unique prefix of it (Vault.resolve_ids)."""
    memory_id = vault.resolve_ids([memory_id])[0]
    record = vault.fetch([memory_id]).get(memory_id)
    if record is None:
        raise NotFound(f"no memory with id {memory_id}")
    vault.audit_read("show", [memory_id], _sessions([record]), retrieved=_memories([record]))
    return RecordResult(record)


def _sessions(records: Iterable[Record]) -> set[str]:
    """The live sessions whose messages a read returned: compaction spares them."""
    return {r.session_id for r in records
            if r.type == "message" and r.session_id and not r.archived}


def _memories(records: Iterable[Record]) -> list[str]:
    """The memories (records other than messages) a read retrieved: `mem review` names
    those nothing retrieves."""
    return [r.memory_id for r in records if r.type != "message"]


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
