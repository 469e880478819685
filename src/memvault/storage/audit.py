"""The hash-chained audit log: what was done, when, by whom, to which ids. Never content.

Each entry carries the MAC of the one before it and its own MAC under the user's
meta key, so editing, removing or reordering an entry breaks the chain.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from memvault.crypto import envelope
from memvault.errors import DataError, StorageError
from memvault.model.records import now_iso, uuid7
from memvault.storage import fsio

GENESIS = "0" * 64
AUDIT_FORMAT = 1


@dataclass
class ChainCheck:
    entries: list[dict[str, Any]]
    problems: list[tuple[int | None, str]]
    warnings: list[tuple[int | None, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


class AuditLog:
    def __init__(self, path: Path, lock_path: Path, key: bytes, lock_timeout: float,
                 actor: str = "unknown") -> None:
        self.path = path
        self.actor = actor[:64]  # who the entries name: a login, a hook, a cron job
        self.lock_path = lock_path
        self.key = key
        self.lock_timeout = lock_timeout
        self.head: dict[str, Any] | None = None  # seq and MAC of the last durable entry
        self.pending: dict[str, Any] | None = None  # ... of the last one not fsynced yet

    def _mac(self, body: dict[str, Any]) -> str:
        return envelope.keyed_hash(self.key, _canonical(body), size=32)

    def hash_of(self, content_hash: str) -> str:
        """A keyed hash of a record's content hash: links audit entries without leaking."""
        return envelope.keyed_hash(self.key, content_hash.encode())

    def _tail(self) -> Iterator[tuple[int, list[bytes]]]:
        """The log's end as lines, in growing blocks: (start offset, lines). The first
        line of a block that does not start the file may be cut, so it is left out; the
        last item is what follows the final newline (b"" unless an append was torn)."""
        try:
            with self._open() as fh:
                size = fh.seek(0, os.SEEK_END)
                block = 4096
                while True:
                    start = max(0, size - block)
                    fh.seek(start)
                    lines = fh.read(size - start).split(b"\n")
                    yield start, lines[1:] if start else lines
                    if start == 0:
                        return
                    block *= 4
        except FileNotFoundError:
            return

    def _open(self) -> BinaryIO:
        """The log, open for reading: a FIFO, a device or a folder in its place is refused
        (DataError) without blocking."""
        try:
            return fsio.open_regular(self.path, self.path.name)
        except IsADirectoryError:
            raise DataError(f"{self.path.name} is a folder, not a file") from None

    def _end(self) -> tuple[dict[str, Any] | None, int, int]:
        """The newest well-formed entry (the one a new entry chains from), the offset just
        past its line, and the log's size. What follows that offset is a torn tail: an
        append cut short (no newline), or a damaged or garbage last line. Readers skip
        it, `verify` reports it, and the next append cuts it (as append_line cuts a torn
        append). Read from the end in growing blocks: O(1) in the log's length."""
        try:
            fh = self._open()
        except FileNotFoundError:
            return None, 0, 0
        with fh:
            size = fh.seek(0, os.SEEK_END)
            block = 4096
            while True:
                start = max(0, size - block)
                fh.seek(start)
                data = fh.read(size - start)
                stop = data.rfind(b"\n")  # the newline of the last complete line
                while stop >= 0:
                    begin = data.rfind(b"\n", 0, stop) + 1
                    if begin == 0 and start > 0:
                        break  # the line may begin before this block: read a bigger one
                    entry = _entry(data[begin:stop])
                    if entry is not None:
                        return entry, start + stop + 1, size
                    stop = begin - 1
                if start == 0:
                    return None, 0, size
                block *= 4

    def _last(self) -> dict[str, Any] | None:
        """The newest complete, well-formed entry: the one a new entry chains from."""
        return self._end()[0]

    def last_seq(self) -> int:
        """How many entries the log holds, read from its end (O(1) in its length)."""
        last = self._last()
        return int(last["seq"]) if last else 0

    def find(self, seq: int) -> dict[str, Any] | None:
        """The entry with this sequence number, read backwards from the end (an anchor is
        near the end: only reads come after the last write's entry)."""
        for _, lines in self._tail():
            entries = []
            for raw in lines:
                entry = _entry(raw)
                if entry is not None:
                    entries.append(entry)
            for entry in entries:
                if entry.get("seq") == seq:
                    return entry
            earliest = entries[0].get("seq") if entries else None
            if isinstance(earliest, int) and earliest < seq:
                return None
        return None

    def ids_since(self, since: str, ops: frozenset[str]) -> set[str]:
        """The ids named by entries of `ops` at or after `since` (an ISO time), read from
        the log's end back to the first older entry: what was read lately costs what the
        recent entries cost, not the whole log. Not verified against the chain: it
        decides only what is old enough to compact."""
        found: set[str] = set()
        for _, lines in self._tail():
            oldest = None
            for raw in lines:
                entry = _entry(raw)
                if entry is None:
                    continue
                ts = str(entry.get("ts", ""))
                oldest = ts if oldest is None else min(oldest, ts)
                if ts >= since and entry.get("op") in ops:
                    found.update(str(i) for i in entry.get("ids") or [])
            if oldest is not None and oldest < since:
                break
        return found

    def sync(self) -> None:
        """Make the entries appended without an fsync durable, with one (a scan audits
        each session it stores, then syncs once), and the newest of them the head."""
        if self.pending is not None:
            fsio.fsync_file(self.path)
            self.head, self.pending = self.pending, None

    def append(self, op: str, ids: list[str] | None = None, hashes: list[str] | None = None,
               durable: bool = True, **detail: Any) -> str:
        """Append one entry and return its audit id. `detail` must hold no content."""
        with fsio.locked(self.lock_path, self.lock_timeout, "the audit log"):
            last, end, size = self._end()
            if end < size:  # a torn or garbage tail: cut, as append_line cuts a torn one
                fsio.truncate_to(self.path, end)
            body = {
                "v": AUDIT_FORMAT,
                "seq": (int(last.get("seq", 0)) + 1) if last else 1,
                "audit_id": uuid7(),
                "ts": now_iso(),
                "op": op,
                "actor": self.actor,
                "ids": ids or [],
                "hashes": hashes or [],
                "detail": detail,
                "prev": str(last.get("mac", GENESIS)) if last else GENESIS,
            }
            entry = dict(body, mac=self._mac(body))
            line = json.dumps(entry, separators=(",", ":")).encode() + b"\n"
            try:
                fsio.append_line(self.path, line, sync=durable)
            except StorageError as exc:
                reason = exc.message.removesuffix("; nothing was changed")
                raise StorageError(f"{reason}; the change itself was saved but not audited",
                                   hint="verify") from None
            if durable:
                self.head, self.pending = {"seq": body["seq"], "mac": entry["mac"]}, None
            else:
                self.pending = {"seq": body["seq"], "mac": entry["mac"]}
            return str(body["audit_id"])

    def check(self, anchor: dict[str, Any] | None = None,
              keep_entries: bool = True) -> ChainCheck:
        """Walk the chain, one line at a time. `anchor` (from state.json) is the last entry
        a write made: it must still be there, so cutting the log's tail or deleting it is
        detected. Without `keep_entries` (verify), memory stays flat however long the log."""
        check = ChainCheck([], [])
        prev, seq = GENESIS, 0
        anchored: dict[str, Any] | None = None
        number = 0
        try:
            fh: BinaryIO | None = self._open()
        except FileNotFoundError:
            fh = None
        garbage: tuple[int, int] | None = None  # unreadable lines no entry followed yet
        for number, raw in enumerate(fh or (), start=1):
            if not raw.endswith(b"\n"):  # an append was interrupted
                if raw.strip():
                    check.warnings.append((number, "torn last audit entry (an append was "
                                           "interrupted); the next write cuts it"))
                break
            if not raw.strip():
                continue
            entry = _entry(raw)
            if entry is None:
                garbage = (garbage[0], garbage[1] + 1) if garbage else (number, 1)
                continue
            if garbage:  # unreadable lines followed by an entry: damage, not a torn end
                check.problems.append((garbage[0], "unreadable audit entry" + (
                    f" (and the {garbage[1] - 1} lines after it)" if garbage[1] > 1 else "")))
                garbage = None
            body = {k: v for k, v in entry.items() if k != "mac"}
            mac = entry["mac"]
            if mac != self._mac(body):
                check.problems.append((number, "audit entry was edited (MAC mismatch)"))
            elif body.get("prev") != prev or body.get("seq") != seq + 1:
                check.problems.append((number, "audit chain broken: an entry before this "
                                       "one was removed, reordered or edited"))
            prev, seq = str(mac), int(body["seq"])
            if anchor and anchored is None and entry.get("seq") == anchor.get("seq"):
                anchored = entry
            if keep_entries:
                check.entries.append(entry)
        if garbage:
            # Like a torn append: nothing authenticated is lost by skipping it.
            check.warnings.append((garbage[0], "unreadable last audit entry (a damaged or "
                                   "torn end of the log); skipped, the next write cuts it"))
        if fh is not None:
            fh.close()
        if anchor:
            if anchored is None:
                check.problems.append((None, f"audit log ends before entry {anchor.get('seq')}"
                                       ": entries were cut from its end, or it was deleted"))
            elif anchored.get("mac") != anchor.get("mac"):
                check.problems.append((None, f"audit entry {anchor.get('seq')} was replaced"))
        return check


def _entry(raw: bytes) -> dict[str, Any] | None:
    """A well-formed entry (an object with an integer seq and a string MAC), else None."""
    try:
        entry = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(entry, dict) or type(entry.get("seq")) is not int \
            or not isinstance(entry.get("mac"), str):
        return None
    return entry


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
