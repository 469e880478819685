"""The base of every result, and the results of the commands a user runs most: add, show,
list and search (the rest are in model/results.py, which imports these too).

Apart so that those commands do not define some thirty other frozen dataclasses at each
start (about a millisecond each, a tenth of `mem add`'s own time; bench/bench_startup.py).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar

from memvault.model.records import Record


def _plain(value: Any) -> Any:
    if isinstance(value, Result | Record):
        return value.to_dict()
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class Result:
    # Fields that stay out of the JSON document (kept for the human rendering).
    _internal: ClassVar[frozenset[str]] = frozenset()

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)
                if f.name not in self._internal}


@dataclass(frozen=True)
class AddResult(Result):
    record: Record
    deduplicated: bool
    # The id of an earlier record with the same content that another had replaced: the
    # new record makes it current again, replacing that other one (`supersedes`).
    restated: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"memory_id": self.record.memory_id, "content_hash": self.record.content_hash,
                "created_at": self.record.created_at, "deduplicated": self.deduplicated,
                "restated": self.restated, "supersedes": self.record.supersedes}


@dataclass(frozen=True)
class RecordResult(Result):
    record: Record

    def to_dict(self) -> dict[str, Any]:
        return self.record.to_dict()


@dataclass(frozen=True)
class RecordList(Result):
    records: tuple[Record, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"records": [r.to_dict() for r in self.records], "count": len(self.records)}


@dataclass(frozen=True)
class SearchHit(Result):
    memory_id: str
    category: str
    type: str
    content: str
    snippet: str
    score: float
    tags: tuple[str, ...]
    created_at: str
    session_id: str | None
    message_id: str | None
    compacted_from: tuple[str, ...] = ()  # a summary's originals (in the archive)
    agent: str | None = None  # the agent a session's message came from
    # Each leg's place and score (None: that leg did not return the record).
    lexical_rank: int | None = None
    semantic_rank: int | None = None
    lexical_score: float | None = None
    semantic_score: float | None = None
    weak: bool = False  # under the relevance floor: returned only when asked (--all)


@dataclass(frozen=True)
class SearchResult(Result):
    _internal: ClassVar[frozenset[str]] = frozenset({"no_words"})
    results: tuple[SearchHit, ...]
    total_searched: int
    query_time_ms: float
    no_words: bool = False  # the query held no word to search for (so nothing was)
    mode: str = "lexical"  # how it was ranked: lexical, semantic or hybrid
    notice: str | None = None  # why it was ranked by words alone when asked otherwise
