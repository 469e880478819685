"""A user's state.json, typed: small facts about the user that every write keeps current.

It is authenticated (HMAC under the user's meta key), not encrypted: it holds no
content, only ids, counters and keyed hashes. Format 2 adds what lets reads stay
proportional to what they return: counters per type (for `stats`) and which record
supersedes which (for `brief`, `show` and `list`, without reading every session).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

STATE_FORMAT = 2


@dataclass
class Superseded:
    by: str  # the record that replaces it
    archived: bool = False  # where the replaced record lives (for `stats`)


@dataclass
class UserState:
    key_version: int = 1
    frozen: bool = False
    audit_head: dict[str, Any] | None = None  # seq and MAC of the last write's audit entry
    audit_broken: dict[str, Any] | None = None  # evidence that entries were cut
    forgotten: set[str] = field(default_factory=set)  # keyed marks of forgotten messages
    # Ids of records erased here or by another machine (forget, a duplicate dropped):
    # the erasure ledger sync re-asserts to every remote and never pulls back, kept in
    # this authenticated file rather than the sync cache, which may be removed.
    erased: set[str] = field(default_factory=set)
    scan_marks: dict[str, list[int]] = field(default_factory=dict)  # ingest --scan
    # Where each large live transcript was read to (ops/ingest.py), sealed under the
    # user's data key, by a keyed mark of its path: an ingest again reads what was added.
    read_to: dict[str, str] = field(default_factory=dict)
    superseded: dict[str, Superseded] = field(default_factory=dict)
    live: dict[str, int] = field(default_factory=dict)  # records per type
    archived: dict[str, int] = field(default_factory=dict)
    # A compaction step under way (vault/archive.py): finished or undone by the next
    # open, so that a kill never leaves both the originals and their summary active.
    compacting: dict[str, Any] | None = None
    # Records were forgotten (or the key rotated) since the current key epoch began:
    # the next compaction re-encrypts under a new epoch and deletes the old data key.
    rekey_pending: bool = False
    # A `forget --now` or `rotate-key --now` under way: every data key up to this epoch
    # must go. Saved before the first file changes, so that an interrupted run is
    # finished by the next write instead of leaving the old key (and every old copy of a
    # forgotten record) readable.
    retire_through: int | None = None
    # The last compaction run for this user (time, summaries added, messages archived,
    # problems): what `mem doctor` reports. No content.
    last_compaction: dict[str, Any] | None = None
    format: int = STATE_FORMAT
    extra: dict[str, Any] = field(default_factory=dict)  # keys a newer minor mem added

    @property
    def counted(self) -> bool:
        """Whether the counters and supersede links are kept (format 2 and later)."""
        return self.format >= 2

    def count(self, kind: str, delta: int, archived: bool = False) -> None:
        table = self.archived if archived else self.live
        table[kind] = table.get(kind, 0) + delta
        if table[kind] <= 0:
            del table[kind]

    def superseded_by(self, memory_id: str) -> str | None:
        link = self.superseded.get(memory_id)
        return link.by if link else None

    @classmethod
    def from_doc(cls, body: dict[str, Any]) -> UserState:
        """Raises (KeyError, TypeError, ValueError) on a malformed body."""
        known = {"format", "key_version", "frozen", "audit_head", "audit_broken",
                 "forgotten", "erased", "scan_marks", "read_to", "superseded", "counts",
                 "compacting", "rekey_pending", "retire_through", "last_compaction"}
        counts = body.get("counts") or {}
        superseded = body.get("superseded") or {}
        state = cls(
            format=int(body.get("format", 1)),
            key_version=int(body["key_version"]),
            frozen=bool(body.get("frozen", False)),
            audit_head=body.get("audit_head") if isinstance(body.get("audit_head"), dict)
            else None,
            audit_broken=body.get("audit_broken") if isinstance(body.get("audit_broken"), dict)
            else None,
            forgotten=set(map(str, body.get("forgotten") or [])),
            erased=set(map(str, body.get("erased") or [])),
            scan_marks={str(k): list(v) for k, v in (body.get("scan_marks") or {}).items()},
            read_to={str(k): str(v) for k, v in (body.get("read_to") or {}).items()},
            superseded={str(k): Superseded(str(v["by"]), bool(v.get("archived")))
                        for k, v in superseded.items()},
            live={str(k): int(v) for k, v in (counts.get("live") or {}).items()},
            archived={str(k): int(v) for k, v in (counts.get("archived") or {}).items()},
            compacting=body.get("compacting") if isinstance(body.get("compacting"), dict)
            else None,
            rekey_pending=bool(body.get("rekey_pending", False)),
            retire_through=int(body["retire_through"])
            if body.get("retire_through") is not None else None,
            last_compaction=body.get("last_compaction")
            if isinstance(body.get("last_compaction"), dict) else None,
            extra={k: v for k, v in body.items() if k not in known},
        )
        return state

    def to_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {**self.extra, "format": self.format,
                               "key_version": self.key_version, "frozen": self.frozen}
        if self.audit_head is not None:
            doc["audit_head"] = self.audit_head
        if self.audit_broken is not None:
            doc["audit_broken"] = self.audit_broken
        if self.forgotten:
            doc["forgotten"] = sorted(self.forgotten)
        if self.erased:
            doc["erased"] = sorted(self.erased)
        if self.scan_marks:
            doc["scan_marks"] = self.scan_marks
        if self.read_to:
            doc["read_to"] = self.read_to
        if self.compacting is not None:
            doc["compacting"] = self.compacting
        if self.rekey_pending:
            doc["rekey_pending"] = True
        if self.retire_through is not None:
            doc["retire_through"] = self.retire_through
        if self.last_compaction is not None:
            doc["last_compaction"] = self.last_compaction
        if self.counted:
            doc["superseded"] = {k: {"by": v.by, **({"archived": True} if v.archived else {})}
                                 for k, v in sorted(self.superseded.items())}
            doc["counts"] = {"live": dict(sorted(self.live.items())),
                             "archived": dict(sorted(self.archived.items()))}
        return doc
