"""reads.json: when the user's memory was last read, so that reads need not grow the audit log.

Two small facts, authenticated (HMAC under the user's meta key) like state.json and, like
it, holding no content:

- the day each kind of read (`search`, `brief`, ...) was last audited for each actor: the
  first such read of a day gets an audit entry, later ones that day get none;
- the day each session was last read, under a keyed mark of its name: compaction spares
  a session read within `archive_after_days`;
- the day each memory (a record that is not a message) was last retrieved (returned by
  search, show or the brief), under a keyed mark of its id: `mem review` names the
  memories nothing has retrieved for long;
- the review queue's findings the user chose to keep (keyed marks): not proposed again.

A read writes this file only when one of those days changes, so reading again and again
grows nothing. It is bookkeeping, never memory: a damaged file is read as empty (a read
must not fail for it) and replaced by the next read that writes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from memvault.crypto import envelope
from memvault.errors import DataError
from memvault.model.records import now_iso
from memvault.storage import fsio

READS_FORMAT = 1


@dataclass
class ReadMarks:
    day: str = ""  # the UTC day `audited` is about
    audited: set[str] = field(default_factory=set)  # "op actor" audited on `day`
    sessions: dict[str, str] = field(default_factory=dict)  # session mark -> last day read
    records: dict[str, str] = field(default_factory=dict)  # memory mark -> last day retrieved
    kept: set[str] = field(default_factory=set)  # review findings the user kept (marks)


def today() -> str:
    return now_iso()[:10]


class ReadLog:
    def __init__(self, path: Path, lock_path: Path, key: bytes, lock_timeout: float) -> None:
        self.path = path
        self.lock_path = lock_path
        self.key = key
        self.lock_timeout = lock_timeout

    def _mac(self, body: dict[str, object]) -> str:
        return envelope.keyed_hash(self.key, json.dumps(
            body, sort_keys=True, separators=(",", ":")).encode(), size=32)

    def load(self) -> ReadMarks:
        """The marks; empty when the file is missing, damaged or fails authentication."""
        try:
            doc = json.loads(fsio.read_regular(self.path, self.path.name, limit=1 << 24))
            body = doc["reads"]
            if doc["mac"] != self._mac(body) or body.get("format") != READS_FORMAT:
                return ReadMarks()
            return ReadMarks(str(body["day"]), set(map(str, body["audited"])),
                             {str(k): str(v) for k, v in body["sessions"].items()},
                             # Absent from a file an earlier release wrote.
                             {str(k): str(v) for k, v in body.get("records", {}).items()},
                             set(map(str, body.get("kept", []))))
        except (OSError, DataError, ValueError, KeyError, TypeError, AttributeError):
            return ReadMarks()

    def _save(self, marks: ReadMarks) -> None:
        body: dict[str, object] = {"format": READS_FORMAT, "day": marks.day,
                                   "audited": sorted(marks.audited),
                                   "sessions": dict(sorted(marks.sessions.items()))}
        if marks.records:
            body["records"] = dict(sorted(marks.records.items()))
        if marks.kept:
            body["kept"] = sorted(marks.kept)
        fsio.atomic_write(self.path, json.dumps(
            {"reads": body, "mac": self._mac(body)}, separators=(",", ":")).encode() + b"\n")

    def note(self, op: str, actor: str, sessions: Iterable[str],
             audit: Callable[[], object], retrieved: Iterable[str] = ()) -> None:
        """Note a read of `op` by `actor` that returned records of `sessions` (marks) and
        the memories `retrieved` (marks). `audit` appends the read's audit entry: called
        for the first such read of the day only. Reads nothing but this file, and writes
        it only when a day changes."""
        day, key, wanted = today(), f"{op} {actor}", set(sessions)
        memories = set(retrieved)

        def due(marks: ReadMarks) -> bool:
            return (marks.day != day or key not in marks.audited
                    or any(marks.sessions.get(s, "") < day for s in wanted)
                    or any(marks.records.get(m, "") < day for m in memories))

        if not due(self.load()):
            return
        with fsio.locked(self.lock_path, self.lock_timeout, "the read log"):
            marks = self.load()
            if not due(marks):
                return
            if marks.day != day:
                marks.day, marks.audited = day, set()
            if key not in marks.audited:
                # The entry before the mark: a crash between them logs the read twice,
                # never not at all.
                audit()
                marks.audited.add(key)
            marks.sessions.update(dict.fromkeys(wanted, day))
            marks.records.update(dict.fromkeys(memories, day))
            self._save(marks)

    def keep(self, finding: str) -> None:
        """Note that the user kept a review finding (its mark): it is not proposed again."""
        with fsio.locked(self.lock_path, self.lock_timeout, "the read log"):
            marks = self.load()
            if finding not in marks.kept:
                marks.kept.add(finding)
                self._save(marks)

    def sessions_since(self, day: str) -> set[str]:
        """The marks of the sessions read on `day` (YYYY-MM-DD) or later."""
        return {mark for mark, last in self.load().sessions.items() if last >= day}
