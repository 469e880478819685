"""The one owner of ciphertext I/O: a user's encrypted files, data keys and state.

Nothing else in mem opens a file that holds memory content. `UserStore` turns
records into envelopes and back (crypto.py), and writes them durably (fsio.py).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mem import crypto, fsio
from mem.errors import DataError, StorageError
from mem.keys import MasterKey, record_key
from mem.records import CLAUDE_MD, PREFERENCES, SESSIONS, Record

ARCHIVE = "archive"
KEYS = "keys"
INDEX = "index"
STATE = "state.json"
AUDIT = "audit.jsonl"
LOCK = ".lock"
AUDIT_LOCK = ".audit.lock"
STATE_FORMAT = 1
DOC_FORMAT = 1


@dataclass
class LineProblem:
    line: int
    problem: str
    torn_tail: bool = False


@dataclass
class LineScan:
    """Records read from a line file, and what could not be read."""

    records: list[Record] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)  # byte offset of each record's line
    problems: list[LineProblem] = field(default_factory=list)
    good_size: int = 0  # bytes up to the end of the last complete line
    newline_missing: bool = False  # the last line is a whole record without its newline


class UserStore:
    def __init__(self, root: Path, org: str, user: str, master: MasterKey) -> None:
        self.root = root
        self.org = org
        self.user = user
        self.master = master
        self.dir = root / org / user
        self._deks: dict[int, bytes] = {}
        self._record_keys: dict[int, bytes] = {}
        # Called before any content file changes (the vault marks its index stale there).
        self.on_change: Callable[[], None] | None = None

    def _changing(self) -> None:
        if self.on_change is not None:
            self.on_change()

    # --- layout ------------------------------------------------------------------------

    def exists(self) -> bool:
        return (self.dir / STATE).exists()

    def path(self, relpath: str) -> Path:
        return self.dir / relpath

    @property
    def lock_path(self) -> Path:
        return self.dir / LOCK

    def session_relpath(self, session_id: str, archived: bool = False) -> str:
        return f"{ARCHIVE if archived else SESSIONS}/{session_id}.jsonl"

    def line_files(self, archived: bool = False) -> list[str]:
        folder = self.dir / (ARCHIVE if archived else SESSIONS)
        if not folder.is_dir():
            return []
        prefix = ARCHIVE if archived else SESSIONS
        return sorted(f"{prefix}/{p.name}" for p in folder.iterdir() if p.suffix == ".jsonl")

    def _name(self, relpath: str) -> str:
        return f"{self.org}/{self.user}/{relpath}"

    # --- creation and state ----------------------------------------------------------------

    def create(self) -> None:
        """Make the user's directories, first data key and state (on the user's first write)."""
        for sub in ("", SESSIONS, ARCHIVE, KEYS):
            fsio.ensure_dir(self.dir / sub if sub else self.dir)
        if not self.deks_on_disk():
            self.new_epoch(1)
        self.save_state({"format": STATE_FORMAT, "key_version": 1, "frozen": False})

    def load_state(self) -> dict[str, Any]:
        path = self.path(STATE)
        try:
            doc = json.loads(path.read_bytes())
            body, mac = doc["state"], doc["mac"]
        except FileNotFoundError:
            raise
        except (OSError, ValueError, KeyError, TypeError):
            raise DataError(f"{self._name(STATE)} is corrupt") from None
        expected = crypto.keyed_hash(self.master.meta_key(self.org, self.user),
                                     _canonical(body), size=32)
        if not isinstance(body, dict) or mac != expected:
            raise DataError(f"{self._name(STATE)} fails authentication (edited or moved)")
        if body.get("format", STATE_FORMAT) > STATE_FORMAT:
            raise DataError(f"{self._name(STATE)} was written by a newer mem; upgrade mem")
        return body

    def save_state(self, state: dict[str, Any]) -> None:
        mac = crypto.keyed_hash(self.master.meta_key(self.org, self.user),
                                _canonical(state), size=32)
        data = json.dumps({"state": state, "mac": mac}, indent=1).encode() + b"\n"
        fsio.atomic_write(self.path(STATE), data)

    # --- data keys ------------------------------------------------------------------------

    def deks_on_disk(self) -> list[int]:
        folder = self.dir / KEYS
        if not folder.is_dir():
            return []
        return sorted(int(p.stem) for p in folder.glob("*.dek") if p.stem.isdigit())

    def new_epoch(self, epoch: int) -> None:
        dek = os.urandom(crypto.KEY_LEN)
        blob = crypto.wrap_dek(self.master.kek(self.org, self.user, epoch), epoch,
                               self.org, self.user, dek)
        fsio.atomic_write(self.dir / KEYS / f"{epoch}.dek", blob)
        self._deks[epoch] = dek

    def dek(self, epoch: int) -> bytes:
        if epoch not in self._deks:
            rel = f"{KEYS}/{epoch}.dek"
            try:
                blob = self.path(rel).read_bytes()
            except FileNotFoundError:
                raise DataError(
                    f"{self._name(rel)} is missing: data under key version {epoch} "
                    "cannot be decrypted"
                ) from None
            try:
                self._deks[epoch] = crypto.unwrap_dek(
                    self.master.kek(self.org, self.user, epoch), epoch, self.org, self.user, blob)
            except (crypto.AuthError, DataError):
                raise DataError(f"{self._name(rel)} fails authentication (tampered)") from None
        return self._deks[epoch]

    def record_key(self, epoch: int) -> bytes:
        if epoch not in self._record_keys:
            self._record_keys[epoch] = record_key(self.dek(epoch))
        return self._record_keys[epoch]

    def current_epoch(self) -> int:
        return int(self.load_state()["key_version"])

    # --- whole-file documents (CLAUDE.md, preferences.json) --------------------------------

    def read_doc(self, relpath: str) -> dict[str, Any] | None:
        """Decrypt a whole-file envelope; None when the file does not exist yet."""
        try:
            blob = self.path(relpath).read_bytes()
        except FileNotFoundError:
            return None
        name = self._name(relpath)
        try:
            epoch = crypto.file_key_version(blob)
            plain = crypto.open_file(self.record_key(epoch), self.org, self.user, relpath, blob)
            doc = json.loads(plain)
        except crypto.AuthError:
            raise DataError(
                f"{name} fails authentication: it was modified, truncated, or belongs "
                "to another user or file"
            ) from None
        except DataError as exc:
            raise DataError(f"{name}: {exc.message}") from None
        except ValueError:
            raise DataError(f"{name} decrypts to malformed JSON") from None
        if not isinstance(doc, dict):
            raise DataError(f"{name} decrypts to an unexpected document")
        if doc.get("format", DOC_FORMAT) != DOC_FORMAT:
            raise DataError(f"{name} holds document format {doc.get('format')!r}; this mem "
                            f"reads format {DOC_FORMAT}")
        return doc

    def write_doc(self, relpath: str, doc: dict[str, Any], epoch: int) -> None:
        self._changing()
        plain = json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()
        blob = crypto.seal_file(self.record_key(epoch), epoch, self.org, self.user, relpath, plain)
        fsio.atomic_write(self.path(relpath), blob)

    def doc_records(self, relpath: str) -> list[Record]:
        doc = self.read_doc(relpath)
        if doc is None:
            return []
        try:
            return [Record.from_stored(r) for r in doc.get("records", [])]
        except DataError as exc:
            raise DataError(f"{self._name(relpath)}: {exc.message}") from None

    # --- line files (sessions/, archive/) -------------------------------------------------

    def seal_record(self, relpath: str, record: Record) -> bytes:
        plain = json.dumps(record.stored(), ensure_ascii=False, separators=(",", ":")).encode()
        return crypto.seal_line(self.record_key(record.key_version), record.key_version,
                                self.org, self.user, relpath, record.memory_id,
                                record.created_at, plain)

    def append_records(self, relpath: str, records: list[Record]) -> list[int]:
        """Append records to a line file: one write, one fsync, for the whole batch.

        The caller holds the lock; fsio cuts a torn last line first, so the new lines are
        never glued to it. Returns the byte offset of each record's line (for the index).
        """
        if not records:
            return []
        self._changing()
        lines = [self.seal_record(relpath, r) for r in records]
        if self._last_byte(relpath) not in (None, b"\n") and \
                self.scan_lines(relpath).newline_missing:
            # The last record is whole and only lost its newline: give it back.
            fsio.append_line(self.path(relpath), b"\n", keep_tail=True)
        offset = fsio.append_line(self.path(relpath), b"".join(lines))
        offsets = []
        for line in lines:
            offsets.append(offset)
            offset += len(line)
        return offsets

    def rewrite_lines(self, relpath: str, records: list[Record]) -> None:
        """Replace a line file atomically with these records (sealed under their own key
        versions); an empty list removes the file."""
        self._changing()
        if not records:
            fsio.remove(self.path(relpath))
            return
        fsio.atomic_write(self.path(relpath), b"".join(self.seal_record(relpath, r)
                                                       for r in records))

    def remove_dek(self, epoch: int) -> None:
        """Delete a wrapped data key: whatever is still encrypted under it is lost for good."""
        fsio.remove(self.dir / KEYS / f"{epoch}.dek")
        self._deks.pop(epoch, None)
        self._record_keys.pop(epoch, None)

    def destroy(self) -> int:
        """Delete the user's directory, wrapped keys first (so that an interruption still
        leaves nothing readable). Returns the number of files deleted."""
        import shutil

        files = sum(1 for p in self.dir.rglob("*") if p.is_file())
        for epoch in self.deks_on_disk():
            self.remove_dek(epoch)
        try:
            shutil.rmtree(self.dir)
            fsio.fsync_dir(self.dir.parent)
        except OSError as exc:
            raise StorageError(f"cannot delete {self.dir}: {exc.strerror}; its keys are "
                                    "already gone, run `mem destroy` again") from None
        return files

    def _last_byte(self, relpath: str) -> bytes | None:
        try:
            with self.path(relpath).open("rb") as fh:
                size = fh.seek(0, os.SEEK_END)
                if size == 0:
                    return None
                fh.seek(size - 1)
                return fh.read(1)
        except FileNotFoundError:
            return None

    def read_line_at(self, relpath: str, offset: int) -> Record | None:
        """The record whose line starts at `offset`; None when the file has changed."""
        try:
            with self.path(relpath).open("rb") as fh:
                fh.seek(offset)
                raw = fh.readline()
        except OSError:
            return None
        if not raw.endswith(b"\n"):
            return None
        try:
            return self._open_line(relpath, raw[:-1])
        except DataError:
            return None  # not a record boundary any more: the caller rebuilds the index

    def _open_line(self, relpath: str, raw: bytes) -> Record:
        doc = crypto.parse_line(raw)
        kv = doc["kv"]
        assert isinstance(kv, int)
        try:
            plain = crypto.open_line(self.record_key(kv), self.org, self.user, relpath, doc)
        except crypto.AuthError:
            raise DataError("fails authentication (modified, or moved from another "
                            "file or user)") from None
        try:
            record = Record.from_stored(json.loads(plain))
        except ValueError:
            raise DataError("decrypts to malformed JSON") from None
        if record.memory_id != doc["id"]:
            raise DataError("record id does not match its envelope")
        return record

    def scan_lines(self, relpath: str) -> LineScan:
        """Read every record of a line file, collecting problems instead of raising."""
        scan = LineScan()
        try:
            data = self.path(relpath).read_bytes()
        except FileNotFoundError:
            return scan
        lines = data.split(b"\n")
        complete, tail = lines[:-1], lines[-1]
        offset = 0
        for number, raw in enumerate(complete, start=1):
            start, offset = offset, offset + len(raw) + 1
            try:
                scan.records.append(self._open_line(relpath, raw))
                scan.offsets.append(start)
            except DataError as exc:
                scan.problems.append(LineProblem(number, exc.message))
            scan.good_size = offset
        if tail:
            # No newline: a crash in the middle of an append. Skipped, and cut by the next
            # append. A complete record that only lost its newline is still read, and the
            # next append restores the newline instead of cutting it.
            try:
                scan.records.append(self._open_line(relpath, tail))
                scan.offsets.append(offset)
                scan.problems.append(LineProblem(len(complete) + 1, "last line lacks its "
                                                 "newline; the next append restores it",
                                                 torn_tail=True))
                scan.good_size = len(data)
                scan.newline_missing = True
            except DataError:
                scan.problems.append(LineProblem(len(complete) + 1, "torn last line (an "
                                                 "append was interrupted); skipped",
                                                 torn_tail=True))
        return scan

    def read_lines(self, relpath: str) -> list[Record]:
        """Records of a line file; a torn tail is skipped, any other bad line is an error."""
        return self.read_scan(relpath).records

    def read_scan(self, relpath: str) -> LineScan:
        """Like scan_lines, but any bad line other than a torn tail is an error."""
        scan = self.scan_lines(relpath)
        for problem in scan.problems:
            if not problem.torn_tail:
                raise DataError(f"{self._name(relpath)} line {problem.line}: {problem.problem}")
        return scan

    def repair_tail(self, relpath: str) -> bool:
        """Drop a torn last line (caller holds the lock). True when something was cut."""
        path = self.path(relpath)
        scan = self.scan_lines(relpath)
        if path.exists() and any(p.torn_tail for p in scan.problems):
            self._changing()
            fsio.truncate_to(path, scan.good_size)
            return True
        return False

    # --- everything -------------------------------------------------------------------------

    def all_records(self, include_archive: bool = False) -> Iterator[Record]:
        yield from self.doc_records(CLAUDE_MD)
        yield from self.doc_records(PREFERENCES)
        for relpath in self.line_files():
            yield from self.read_lines(relpath)
        if include_archive:
            for relpath in self.line_files(archived=True):
                for record in self.read_lines(relpath):
                    record.archived = True
                    yield record


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
