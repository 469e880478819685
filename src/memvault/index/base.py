"""The derived-index protocol: what every index beside the vault promises, and the stamp
that says whether it is current.

An index is derived data: it can always be thrown away and rebuilt from the vault.
The vault's transaction drives every index the same way (docs/architecture.md):

1. before the first content file of a write changes: `mark_stale()` (the stamp goes);
2. after the files are written and the audit entry is appended: `apply()` the queued
   changes, then `mark_current()`; if the index was not current when the write began,
   `rebuild()` instead; after erasing, `rewrite()` rebuilds the index re-deriving only
   the files that changed (the rest is carried over from the index itself);
3. a reader that finds it not current rebuilds it under the user's lock.

A crash anywhere in between leaves no stamp, so the next reader rebuilds. The keyed-term
Tantivy index is one implementation; a vector index can sit beside it on the same terms.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from memvault.model.location import Location
from memvault.model.records import CONTEXT_NEIGHBOURS, Record, now_iso
from memvault.storage import fsio

STAMP_FILE = "stamp"


class IndexUnavailable(Exception):
    """The index is missing, incompatible or corrupt: the caller rebuilds it."""


@dataclass(frozen=True)
class Entry:
    """What an index is fed for one record: the record, where it lives, and (messages)
    the texts of the turns around it."""

    record: Record
    location: Location
    context: tuple[str, ...] = ()
    # A person's turn: the texts of the people's turns just before and after it in its
    # session (None: none there), which its vector borrows from (index/vectors.py).
    beside: tuple[str | None, str | None] = (None, None)


def said_by_a_person(record: Record) -> bool:
    """A turn a person typed (a user's, or a chat member's), not an agent's or a tool's."""
    return record.type == "message" and record.role == "user"


def beside(records: Sequence[Record], i: int) -> tuple[str | None, str | None]:
    """The texts of the turns just before and after record `i` of a session that a person
    said, when record `i` is one too: a short turn ("Yes, I did!") means what the people
    around it said. An agent's reply is not borrowed from and borrows nothing: it restates
    the user's words at length, and a turn mixed with it is like every question on the
    reply's topic (bench/RANKING.md, "A turn's neighbours, among people")."""
    if not 0 <= i < len(records) or not said_by_a_person(records[i]):
        return None, None
    before = records[i - 1] if i > 0 else None
    after = records[i + 1] if i + 1 < len(records) else None
    return (before.content if before is not None and said_by_a_person(before) else None,
            after.content if after is not None and said_by_a_person(after) else None)


def neighbours(records: Sequence[Record], i: int) -> tuple[str, ...]:
    """The texts of the turns around record `i` of a session (indexed as context: an
    answer's words are often in the question just before it)."""
    i = i % len(records)
    before = records[max(0, i - CONTEXT_NEIGHBOURS):i]
    after = records[i + 1:i + 1 + CONTEXT_NEIGHBOURS]
    return tuple(r.content for r in (*before, *after))


def file_entries(records: Sequence[Record], locations: Sequence[Location],
                 only: range | None = None) -> list[Entry]:
    """Index entries for one file's records (all, or those at positions in `only`)."""
    session = bool(locations) and not locations[0].is_doc
    span = only if only is not None else range(len(records))
    return [Entry(records[i], locations[i], neighbours(records, i), beside(records, i))
            if session else Entry(records[i], locations[i]) for i in span]


class DerivedIndex(Protocol):
    name: str

    def is_current(self) -> bool: ...

    def mark_stale(self) -> None: ...

    def mark_current(self) -> None: ...

    def apply(self, upserts: Sequence[Entry], deletes: Sequence[str],
              created: Collection[str] = ()) -> None: ...

    def rebuild(self, entries: Iterable[Entry]) -> int: ...

    def rewrite(self, entries: Iterable[Entry], changed: set[str], kept_line_files: list[str],
                superseded: Callable[[str], bool]) -> int: ...

    def locate(self, memory_ids: Sequence[str]) -> dict[str, Location]: ...


class Stamp:
    """A file whose presence says the index matches the vault (O(1) to check)."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / STAMP_FILE

    def present(self) -> bool:
        return self.path.exists()

    def remove(self) -> None:
        fsio.remove(self.path)

    def write(self) -> None:
        fsio.atomic_write(self.path, now_iso().encode())

    def drop_quietly(self) -> None:
        with contextlib.suppress(OSError):
            self.path.unlink()
