"""What the review queue returns (`mem review`, the viewer's review screen): findings
about the memory that a person or an agent decides on, and the outcome of a decision.

Apart from model/results.py so that the queue's shapes live beside each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from memvault.model.record_results import Result
from memvault.model.records import Record

# The kinds of finding, in the order the queue lists them (docs/guide.md says each rule).
DUPLICATE = "duplicate"
NEAR_DUPLICATE = "near_duplicate"
SUPERSEDED_IN_FACT = "superseded_in_fact"
NOISE = "noise"
UNUSED = "unused"
KINDS = (DUPLICATE, NEAR_DUPLICATE, SUPERSEDED_IN_FACT, NOISE, UNUSED)
# The kinds a merge settles: one record stays, the others are superseded by it.
MERGEABLE = frozenset({DUPLICATE, NEAR_DUPLICATE, SUPERSEDED_IN_FACT})


@dataclass(frozen=True)
class ReviewItem(Result):
    """One finding: the records it is about, the one to keep (a merge keeps it and
    supersedes the others; None where nothing is merged), and why."""

    key: str  # stable while the finding is the same: what keep and merge are given
    kind: str
    records: tuple[Record, ...]
    keep: str | None
    reason: str
    score: float | None = None  # how alike (near duplicates), else None

    @property
    def memory_ids(self) -> tuple[str, ...]:
        return tuple(r.memory_id for r in self.records)

    @property
    def others(self) -> tuple[str, ...]:
        """The ids a merge supersedes (or that a forget of the finding would take)."""
        return tuple(i for i in self.memory_ids if i != self.keep) if self.keep else \
            self.memory_ids

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "kind": self.kind, "reason": self.reason,
                "keep": self.keep, "memory_ids": list(self.memory_ids),
                "others": list(self.others), "score": self.score,
                "records": [_brief_record(r) for r in self.records]}


def _brief_record(r: Record) -> dict[str, Any]:
    return {"memory_id": r.memory_id, "type": r.type, "category": r.category,
            "content": r.content, "tags": list(r.tags), "importance": r.importance,
            "created_at": r.created_at, "session_id": r.session_id,
            "supersedes": r.supersedes, "channel": r.channel}


@dataclass(frozen=True)
class ReviewResult(Result):
    _internal: ClassVar[frozenset[str]] = frozenset({"notice"})
    items: tuple[ReviewItem, ...]
    memories_checked: int
    unused_days: int
    kept_hidden: int  # findings the user kept earlier, not listed again
    meaning: bool  # near duplicates were also looked for by meaning (vectors)
    notice: str | None = None  # why meaning was not used, when it was wanted

    def to_dict(self) -> dict[str, Any]:
        counts = {kind: 0 for kind in KINDS}
        for item in self.items:
            counts[item.kind] += 1
        return {"items": [i.to_dict() for i in self.items], "counts": counts,
                "memories_checked": self.memories_checked, "unused_days": self.unused_days,
                "kept_hidden": self.kept_hidden, "by_meaning": self.meaning}


@dataclass(frozen=True)
class ReviewDecision(Result):
    """What a decision on a finding did: kept (nothing changed but the mark), merged
    (`superseded` now replaced by `keep`)."""

    key: str
    action: str  # "keep" or "merge"
    keep: str | None
    superseded: tuple[str, ...] = ()
    audit_id: str | None = None


@dataclass(frozen=True)
class EditResult(Result):
    """A memory changed in place (retag): its id, and what it holds now."""

    memory_id: str
    tags: tuple[str, ...]
    updated_at: str
    audit_id: str


@dataclass(frozen=True)
class Inspection(Result):
    """One record as the viewer's detail pane shows it: the record, the chain of records
    it replaced (newest first) and what replaced it, a summary's originals and, for an
    original, the summary made from it."""

    record: Record
    replaced: tuple[str, ...]  # what it supersedes, then what that superseded, ...
    replaced_by: tuple[str, ...]  # what supersedes it, then what supersedes that, ...
    originals: tuple[str, ...]  # a summary's compacted_from
    summarised_in: tuple[str, ...]  # the summaries made from it


@dataclass(frozen=True)
class SessionDay(Result):
    """One session in the timeline: when it began and ended, how many messages it holds
    (live and archived), the agent it came from where its records say (claude-code,
    codex, ...) and its project (the keyed project tag of its first message)."""

    session_id: str
    first: str
    last: str
    messages: int
    archived: bool
    agent: str | None
    project: str | None = None
