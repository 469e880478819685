"""The hash-chained audit log: what was done, when, by whom, to which ids. Never content.

Each entry carries the MAC of the one before it and its own MAC under the user's
meta key, so editing, removing or reordering an entry breaks the chain.
"""

from __future__ import annotations

import getpass
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mem import crypto, fsio
from mem.records import now_iso, uuid7

GENESIS = "0" * 64
AUDIT_FORMAT = 1


def actor() -> str:
    """Who did it: MEM_ACTOR (hooks and cron set it) or the login name."""
    explicit = os.environ.get("MEM_ACTOR")
    if explicit:
        return explicit[:64]
    try:
        return getpass.getuser()
    except Exception:
        return "unknown"


@dataclass
class ChainCheck:
    entries: list[dict[str, Any]]
    problems: list[tuple[int, str]]

    @property
    def ok(self) -> bool:
        return not self.problems


class AuditLog:
    def __init__(self, path: Path, lock_path: Path, key: bytes, lock_timeout: float) -> None:
        self.path = path
        self.lock_path = lock_path
        self.key = key
        self.lock_timeout = lock_timeout

    def _mac(self, body: dict[str, Any]) -> str:
        return crypto.keyed_hash(self.key, _canonical(body), size=32)

    def hash_of(self, content_hash: str) -> str:
        """A keyed hash of a record's content hash: links audit entries without leaking."""
        return crypto.keyed_hash(self.key, content_hash.encode())

    def _last(self) -> dict[str, Any] | None:
        try:
            with self.path.open("rb") as fh:
                size = fh.seek(0, os.SEEK_END)
                block = 4096
                while True:
                    start = max(0, size - block)
                    fh.seek(start)
                    tail = fh.read(size - start)
                    # Complete lines only: bytes after the last newline are a torn append
                    # (cut by the next append_line), never the entry to chain from.
                    lines = [ln for ln in tail.split(b"\n")[:-1] if ln.strip()]
                    if len(lines) >= 2 or start == 0:
                        break
                    block *= 4
        except FileNotFoundError:
            return None
        if not lines:
            return None
        try:
            last: dict[str, Any] = json.loads(lines[-1])
            return last
        except ValueError:
            return None  # a torn or edited tail; `verify` reports it

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
                "actor": actor(),
                "ids": ids or [],
                "hashes": hashes or [],
                "detail": detail,
                "prev": str(last.get("mac", GENESIS)) if last else GENESIS,
            }
            entry = dict(body, mac=self._mac(body))
            line = json.dumps(entry, separators=(",", ":")).encode() + b"\n"
            fsio.append_line(self.path, line, sync=durable)
            return str(body["audit_id"])

    def check(self) -> ChainCheck:
        entries: list[dict[str, Any]] = []
        problems: list[tuple[int, str]] = []
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return ChainCheck(entries, problems)
        prev, seq = GENESIS, 0
        for number, raw in enumerate(data.split(b"\n"), start=1):
            if not raw.strip():
                continue
            try:
                entry = json.loads(raw)
                body = {k: v for k, v in entry.items() if k != "mac"}
                mac = entry["mac"]
            except (ValueError, AttributeError, KeyError):
                problems.append((number, "unreadable audit entry"))
                continue
            if mac != self._mac(body):
                problems.append((number, "audit entry was edited (MAC mismatch)"))
            elif body.get("prev") != prev or body.get("seq") != seq + 1:
                problems.append((number, "audit chain broken: an entry before this one "
                                 "was removed, reordered or edited"))
            prev, seq = str(mac), int(body.get("seq", seq + 1))
            entries.append(entry)
        return ChainCheck(entries, problems)


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
