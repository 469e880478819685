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
from typing import Any

from memvault.crypto import envelope
from memvault.errors import StorageError
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
            with self.path.open("rb") as fh:
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

    def _last(self) -> dict[str, Any] | None:
        """The newest complete entry: the one a new entry chains from."""
        for _, lines in self._tail():
            # Complete lines only: bytes after the last newline are a torn append (cut by
            # the next append_line), never the entry to chain from.
            complete = [ln for ln in lines[:-1] if ln.strip()]
            if complete:
                try:
                    last: dict[str, Any] = json.loads(complete[-1])
                    return last
                except ValueError:
                    return None  # an edited tail; `verify` reports it
        return None

    def last_seq(self) -> int:
        """How many entries the log holds, read from its end (O(1) in its length)."""
        last = self._last()
        return int(last.get("seq", 0)) if last else 0

    def find(self, seq: int) -> dict[str, Any] | None:
        """The entry with this sequence number, read backwards from the end (an anchor is
        near the end: only reads come after the last write's entry)."""
        for _, lines in self._tail():
            entries = []
            for raw in lines:
                try:
                    entry = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(entry, dict):
                    entries.append(entry)
            for entry in entries:
                if entry.get("seq") == seq:
                    return entry
            earliest = entries[0].get("seq") if entries else None
            if isinstance(earliest, int) and earliest < seq:
                return None
        return None

    def append(self, op: str, ids: list[str] | None = None, hashes: list[str] | None = None,
               durable: bool = True, **detail: Any) -> str:
        """Append one entry and return its audit id. `detail` must hold no content."""
        with fsio.locked(self.lock_path, self.lock_timeout, "the audit log"):
            last = self._last()
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
                self.head = {"seq": body["seq"], "mac": entry["mac"]}
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
            fh = self.path.open("rb")
        except FileNotFoundError:
            fh = None
        for number, raw in enumerate(fh or (), start=1):
            if not raw.endswith(b"\n"):  # an append was interrupted
                if raw.strip():
                    check.warnings.append((number, "torn last audit entry (an append was "
                                           "interrupted); the next write cuts it"))
                break
            if not raw.strip():
                continue
            try:
                entry = json.loads(raw)
                body = {k: v for k, v in entry.items() if k != "mac"}
                mac = entry["mac"]
            except (ValueError, AttributeError, KeyError):
                check.problems.append((number, "unreadable audit entry"))
                continue
            if mac != self._mac(body):
                check.problems.append((number, "audit entry was edited (MAC mismatch)"))
            elif body.get("prev") != prev or body.get("seq") != seq + 1:
                check.problems.append((number, "audit chain broken: an entry before this "
                                       "one was removed, reordered or edited"))
            prev, seq = str(mac), int(body.get("seq", seq + 1))
            if anchor and anchored is None and entry.get("seq") == anchor.get("seq"):
                anchored = entry
            if keep_entries:
                check.entries.append(entry)
        if fh is not None:
            fh.close()
        if anchor:
            if anchored is None:
                check.problems.append((None, f"audit log ends before entry {anchor.get('seq')}"
                                       ": entries were cut from its end, or it was deleted"))
            elif anchored.get("mac") != anchor.get("mac"):
                check.problems.append((None, f"audit entry {anchor.get('seq')} was replaced"))
        return check


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
