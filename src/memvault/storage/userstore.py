"""The one owner of a user's ciphertext I/O: encrypted documents and session lines, data
keys and state.

Nothing else in mem opens a file that holds memory content. `UserStore` turns records
into envelopes and back (crypto/envelope.py) and writes them durably (fsio.py). It
knows nothing of indexes or audit: the vault's transaction calls it.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
from collections.abc import Container, Iterable, Iterator
from collections.abc import Set as AbstractSet
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from memvault.crypto import envelope
from memvault.crypto.keys import MasterKey, record_key
from memvault.errors import DataError, StorageError
from memvault.model.location import Location
from memvault.model.records import ARCHIVE, SESSIONS, Record
from memvault.storage import fsio
from memvault.storage.layout import MARKS, UserLayout
from memvault.storage.state import STATE_FORMAT, UserState


def _compact_json(doc: object) -> bytes:
    """A document or record as sealed: compact UTF-8 JSON, which json.loads reads; made
    by orjson, ten times the stdlib's speed (a line is sealed per message)."""
    import orjson  # imported on the first write: it loads uuid (about 7 ms)

    return orjson.dumps(doc)


DOC_FORMAT = 1
# Beside each line file, the keyed marks of the messages it holds (see Marks).
MARKS_SUFFIX = ".marks"
MARK_LEN = 16
_MARKS_HEAD = ">QQ32s"  # the line file's inode, the bytes covered, a digest of their end
_MARKS_TAIL = 64  # the last bytes covered, checked again before the marks are trusted
MARKS_HELD = 8  # line files whose marks a process keeps in memory
# Past this many marks a line file's are kept in a table on disk, not in memory (a first
# ingest of a huge transcript holds its session's marks throughout); a frame of the marks
# file holds at most this many, so writing or reading them whole holds one frame.
MARKS_SPILL = 16_384


class StateMissing(DataError):
    """state.json is gone but the user has memory: a damaged user, not a new one. Reads
    and writes refuse it; `verify --repair` rebuilds the state from the files."""


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

    def locations(self, relpath: str) -> list[Location]:
        return [Location.line(relpath, o) for o in self.offsets]


class MarkMap:
    """Marks (mark -> content digest): a dict while few, past MARKS_SPILL a table in a
    temporary SQLite file of `scratch` (the user's folder, else the system's temporary
    folder), unlinked as soon as it is open, so memory holds its page cache whatever the
    session's size. The marks are keyed already (the user's metadata key): nothing of a
    message is written in clear."""

    def __init__(self, pairs: Iterable[tuple[bytes, bytes]] = (),
                 scratch: Path | None = None) -> None:
        self._small: dict[bytes, bytes] = {}
        self._db: Any = None  # sqlite3.Connection once spilled
        self.scratch = scratch
        self.update(pairs)

    def get(self, mark: bytes) -> bytes | None:
        if self._db is None:
            return self._small.get(mark)
        row = self._db.execute("SELECT v FROM m WHERE k = ?", (mark,)).fetchone()
        return bytes(row[0]) if row is not None else None

    def __contains__(self, mark: object) -> bool:
        return isinstance(mark, bytes) and self.get(mark) is not None

    def __getitem__(self, mark: bytes) -> bytes:
        digest = self.get(mark)
        if digest is None:
            raise KeyError(mark)
        return digest

    def __setitem__(self, mark: bytes, digest: bytes) -> None:
        self.update(((mark, digest),))

    def held(self) -> int:
        """The marks held in memory (once spilled, none: they wait in the table)."""
        return len(self._small)

    def __len__(self) -> int:
        if self._db is None:
            return len(self._small)
        return int(self._db.execute("SELECT count(*) FROM m").fetchone()[0])

    def __iter__(self) -> Iterator[bytes]:
        return (k for k, _ in self.items())

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        if self._db is None:
            yield from list(self._small.items())
            return
        # A page of rows at a time, in key order: never all of them in memory.
        last = b""
        while True:
            rows = self._db.execute("SELECT k, v FROM m WHERE k > ? ORDER BY k LIMIT 4096",
                                    (last,)).fetchall()
            for k, v in rows:
                yield bytes(k), bytes(v)
            if len(rows) < 4096:
                return
            last = rows[-1][0]

    def update(self, pairs: Iterable[tuple[bytes, bytes]]) -> None:
        if self._db is None:
            self._small.update(pairs)
            if len(self._small) <= MARKS_SPILL:
                return
            pairs, self._small = list(self._small.items()), {}
            self._db = _scratch_table(self.scratch)
        db = self._db
        db.execute("BEGIN")
        db.executemany("INSERT OR REPLACE INTO m VALUES (?, ?)", pairs)
        db.execute("COMMIT")


@dataclass
class Marks:
    """What an ingest asks of a stored session, without decrypting it: a keyed mark of
    each message a line file holds (its id, else who said what when) and a keyed digest
    of its content (so a message that grew is told from one stored already).

    Kept beside the file (`<file>.marks`) as sealed frames, each the marks of one append
    with the bytes of the file they cover; derived data, checked against the file before
    it is trusted (the same file, no shorter, the same bytes where they end) and carried
    on over what was appended since (only those lines decrypted). A rewrite of the file
    writes them whole; a frame lost or torn is only a few lines read again."""

    relpath: str
    kept: MarkMap = field(default_factory=MarkMap)  # mark -> content digest
    end: int = 0  # bytes of the line file covered (whole lines)
    ino: int = 0
    tail: bytes = b""  # digest of the last bytes covered
    size: int = 0  # bytes of the marks file read or written (-1: it must be written whole)

    def holds(self, mark: bytes) -> bool:
        return mark in self.kept


@dataclass(frozen=True, slots=True)  # compaction plans with one per live line
class LineHeader:
    memory_id: str
    created_at: str
    key_version: int
    sealed_chars: int  # base64 characters of the ciphertext
    digest: str  # of the line's bytes: changes whenever the line is written again


@dataclass(frozen=True, slots=True)
class SealedLine:
    """A line of a line file as it is on disk, not decrypted (UserStore.lines_without)."""

    relpath: str
    number: int  # from 1
    at: int  # where it starts
    raw: bytes  # with its newline, when it has one
    memory_id: str | None  # of its clear header; None: a torn tail

    @property
    def digest(self) -> str | None:
        """Of its bytes, as line_headers gives it; None: no newline (a torn or unfinished
        tail, or a whole last record that lost it)."""
        import hashlib

        return hashlib.sha256(self.raw).hexdigest()[:32] if self.raw.endswith(b"\n") \
            else None


class UserStore:
    def __init__(self, layout: UserLayout, master: MasterKey) -> None:
        self.layout = layout
        self.org, self.user = layout.org, layout.user
        self.master = master
        self.meta_key = master.meta_key(layout.org, layout.user)
        self._deks: dict[int, bytes] = {}
        self._record_keys: dict[int, bytes] = {}
        self._marks: dict[str, Marks] = {}
        self._mark_keys: tuple[bytes, bytes] | None = None

    @property
    def dir(self) -> Path:
        return self.layout.dir

    def exists(self) -> bool:
        """Whether the user has memory: a state, or what only a user with a state can
        have (then load_state says what is wrong), or a destroy under way."""
        return (self.layout.state_path.exists() or self.layout.destroy_path.exists()
                or bool(self.layout.written()))

    def stale_temps(self) -> list[str]:
        """Temp files a killed writer left in the user's folders, and the index folders
        a killed rebuild left beside the index (`index.new-*`, `index.old-*`: they may
        hold a forgotten record's terms), as relative paths."""
        return [p.relative_to(self.layout.dir).as_posix()
                for p in [*fsio.stale_temps(*self.layout.temp_dirs()), *self._stale_indexes()]]

    def remove_stale_temps(self) -> list[str]:
        """Remove them (the caller holds the user's lock, which every writer takes, and
        under which every index rebuild runs)."""
        removed = fsio.remove_stale_temps(*self.layout.temp_dirs())
        for leftover in self._stale_indexes():
            shutil.rmtree(leftover, ignore_errors=True)
            if not leftover.exists():
                removed.append(leftover)
        return [p.relative_to(self.layout.dir).as_posix() for p in removed]

    def _stale_indexes(self) -> list[Path]:
        name = self.layout.index_dir.name
        try:
            return sorted(p for p in self.layout.dir.iterdir() if p.is_dir() and (
                p.name.startswith(f"{name}.new-") or p.name.startswith(f"{name}.old-")))
        except OSError:
            return []

    def _name(self, relpath: str) -> str:
        return self.layout.name(relpath)

    # --- creation and state ----------------------------------------------------------------

    def create(self) -> UserState:
        """Make the user's directories, first data key and state (on the user's first write)."""
        for folder in (self.layout.dir, self.layout.dir / SESSIONS,
                       self.layout.dir / ARCHIVE, self.layout.keys_dir):
            fsio.ensure_dir(folder)
        if not self.deks_on_disk():
            self.new_epoch(1)
        state = UserState(key_version=max(self.deks_on_disk()))
        self.save_state(state)
        return state

    def load_state(self) -> UserState:
        """The user's state. FileNotFoundError only for a new user (nothing written yet);
        StateMissing when the state is gone but the user's memory is not; DataError while
        an interrupted destroy is unfinished."""
        path = self.layout.state_path
        if self.layout.destroy_path.exists():
            raise DataError(f"user {self.org}/{self.user} is being destroyed: a destroy is "
                            "under way, or was interrupted and must be run again",
                            hint="destroy-again")
        try:
            doc = json.loads(fsio.read_regular(path, self._name(path.name)))
            body, mac = doc["state"], doc["mac"]
        except FileNotFoundError:
            written = self.layout.written()
            if written:
                raise StateMissing(
                    f"{self._name(path.name)} is missing but the user has memory "
                    f"({', '.join(written)}): the user is damaged, not new, and nothing "
                    "was read or written", hint="rebuild-state") from None
            raise
        except (OSError, ValueError, KeyError, TypeError):
            raise DataError(f"{self._name(path.name)} is corrupt") from None
        expected = envelope.keyed_hash(self.meta_key, _canonical(body), size=32)
        if not isinstance(body, dict) or mac != expected:
            raise DataError(f"{self._name(path.name)} fails authentication (edited or moved)")
        if int(body.get("format", 1)) > STATE_FORMAT:
            raise DataError(f"{self._name(path.name)} was written by a newer mem; upgrade mem")
        try:
            return UserState.from_doc(body)
        except (KeyError, TypeError, ValueError, AttributeError):
            raise DataError(f"{self._name(path.name)} holds malformed fields") from None

    def save_state(self, state: UserState) -> None:
        body = state.to_doc()
        mac = envelope.keyed_hash(self.meta_key, _canonical(body), size=32)
        data = json.dumps({"state": body, "mac": mac}, indent=1).encode() + b"\n"
        fsio.atomic_write(self.layout.state_path, data)

    # --- data keys ------------------------------------------------------------------------

    def deks_on_disk(self) -> list[int]:
        folder = self.layout.keys_dir
        if not folder.is_dir():
            return []
        return sorted(int(p.stem) for p in folder.glob("*.dek") if p.stem.isdigit())

    def new_epoch(self, epoch: int) -> None:
        """Write a new wrapped data key. A key file is never overwritten: a second writer
        that got here first wins, and this one fails instead of orphaning its data."""
        dek = os.urandom(envelope.KEY_LEN)
        blob = envelope.wrap_dek(self.master.kek(self.org, self.user, epoch), epoch,
                                 self.org, self.user, dek)
        fsio.create_new(self.layout.dek_path(epoch), blob)
        self._deks[epoch] = dek

    def dek(self, epoch: int) -> bytes:
        if epoch not in self._deks:
            rel = f"keys/{epoch}.dek"
            try:
                blob = _read(self.layout.dek_path(epoch), self._name(rel))
            except FileNotFoundError:
                raise DataError(
                    f"{self._name(rel)} is missing: data under key version {epoch} "
                    "cannot be decrypted"
                ) from None
            try:
                self._deks[epoch] = envelope.unwrap_dek(
                    self.master.kek(self.org, self.user, epoch), epoch, self.org, self.user, blob)
            except (envelope.AuthError, DataError):
                raise DataError(f"{self._name(rel)} fails authentication (tampered)") from None
        return self._deks[epoch]

    def record_key(self, epoch: int) -> bytes:
        if epoch not in self._record_keys:
            self._record_keys[epoch] = record_key(self.dek(epoch))
        return self._record_keys[epoch]

    def forget_keys(self) -> None:
        """Drop the data keys read so far: under the lock they are read again, since a
        destroy (and a new user of the same name) may have replaced them since."""
        self._deks.clear()
        self._record_keys.clear()

    def remove_dek(self, epoch: int) -> None:
        """Delete a wrapped data key: whatever is still encrypted under it is lost for good."""
        fsio.remove(self.layout.dek_path(epoch))
        self._deks.pop(epoch, None)
        self._record_keys.pop(epoch, None)

    def keys_in_use(self, current: int) -> set[int]:
        """The key versions some file is sealed under (read from clear headers)."""
        used = {current}
        for relpath in self.layout.content_files():
            used |= self.key_versions(relpath)
        return used

    def key_versions(self, relpath: str) -> set[int]:
        """The key versions a file's records are sealed under, read from the clear
        headers (nothing is decrypted)."""
        path = self.layout.path(relpath)
        if not relpath.endswith(".jsonl"):
            return {envelope.file_key_version(_read(path, self._name(relpath)))}
        versions: set[int] = set()
        with _open(path, self._name(relpath)) as fh:
            for raw in fh:
                if raw.endswith(b"\n"):
                    try:
                        kv = envelope.parse_line(raw[:-1])["kv"]
                    except DataError:
                        continue
                    assert isinstance(kv, int)
                    versions.add(kv)
        return versions

    def line_headers(self, relpath: str) -> list[LineHeader]:
        """The clear header of every complete line of a line file (nothing is decrypted):
        id, time, key version, the ciphertext's length and a digest of the line's bytes
        (a line rewritten or re-encrypted gets a new nonce, so a new digest)."""
        return list(self.headers(relpath))

    def headers(self, relpath: str) -> Iterator[LineHeader]:
        """line_headers a line at a time: memory holds one, whatever the file's size."""
        import hashlib

        try:
            fh = _open(self.layout.path(relpath), self._name(relpath))
        except FileNotFoundError:
            return
        with fh:
            for raw in fh:
                if raw.endswith(b"\n"):
                    try:
                        doc = envelope.parse_line(raw[:-1])
                    except DataError:
                        continue
                    yield LineHeader(str(doc["id"]), str(doc["ts"]), int(str(doc["kv"])),
                                     len(str(doc["ct"])), hashlib.sha256(raw).hexdigest()[:32])

    def lines_without(self, relpath: str, held: AbstractSet[bytes]
                      ) -> Iterator[tuple[SealedLine | None, SealedLine, SealedLine | None]]:
        """Each line of a line file whose record id (its clear header's, encoded) is not
        in `held`, with the lines just before and after it, as they are sealed (nothing
        is decrypted: open_sealed opens the few a caller needs). The file is read a block
        of lines at a time (memory holds one, whatever the file's size), and a block
        whose ids are all held costs a search for its headers' ids, no line of it parsed.
        A line that is not a record's never waits (open_sealed says what it is, when it
        is beside one that does); a last line without its newline comes too."""
        try:
            fh = _open(self.layout.path(relpath), self._name(relpath))
        except FileNotFoundError:
            return
        # The line before, the line read, and whether it waits: (number, at, raw, id).
        before: tuple[int, int, bytes, bytes | None] | None = None
        line: tuple[int, int, bytes, bytes | None] | None = None
        waits = False
        number = offset = 0
        with fh:
            while block := fh.read(_BLOCK):
                if not block.endswith(b"\n"):
                    block += fh.readline()  # to the end of its last line
                ids = _LINE_ID.findall(block)  # one a line, at its start, as written
                if not waits and block.endswith(b"\n") and \
                        len(ids) == block.count(b"\n") and set(ids) <= held:
                    # Nothing waits here: only its last line matters, beside the next.
                    last = block.rfind(b"\n", 0, len(block) - 1) + 1
                    number += len(ids)
                    before, line = None, (number, offset + last, block[last:], ids[-1])
                    offset += len(block)
                    continue
                for raw in _lines(block):
                    number += 1
                    at, offset = offset, offset + len(raw)
                    key = _line_key(raw)
                    if waits and line is not None:
                        yield (_sealed(relpath, before) if before else None,
                               _sealed(relpath, line), _sealed(relpath, (number, at, raw, key)))
                    before, line = line, (number, at, raw, key)
                    waits = key is not None and key not in held
            if waits and line is not None:
                yield _sealed(relpath, before) if before else None, _sealed(relpath, line), None

    def open_sealed(self, line: SealedLine) -> Record | None:
        """The record of a line lines_without gave; None for a torn tail (an interrupted
        append, skipped as read_lines skips it), any other bad line is a DataError."""
        try:
            record = self._open_line(line.relpath, line.raw.removesuffix(b"\n"))
        except DataError as exc:
            if line.digest is None:
                return None
            raise DataError(f"{self._name(line.relpath)} line {line.number}: "
                            f"{exc.message}") from None
        record.archived = line.relpath.startswith(ARCHIVE + "/")
        return record

    def line_digests(self, relpath: str, offsets: Iterable[int]
                     ) -> dict[int, tuple[str | None, int]]:
        """The digest (as line_headers gives it) of the line that starts at each offset,
        and of the line just after it, with where each ends: one seek a line, whatever
        the file's size. A line without its newline (a torn or unfinished tail) has None;
        an offset at or past the end has no entry. Nothing is decrypted: an offset the
        file was rewritten under gives bytes of another line, so another digest."""
        import hashlib

        out: dict[int, tuple[str | None, int]] = {}
        try:
            fh = _open(self.layout.path(relpath), self._name(relpath))
        except FileNotFoundError:
            return out
        with fh:
            for start in sorted(set(offsets)):
                at = start
                for _ in range(2):  # the line, then the one after it
                    if at in out:
                        at = out[at][1]
                        continue
                    fh.seek(at)
                    raw = fh.readline()
                    if not raw:
                        break
                    whole = raw.endswith(b"\n")
                    out[at] = (hashlib.sha256(raw).hexdigest()[:32] if whole else None,
                               at + len(raw))
                    at += len(raw)
        return out

    def lines_near(self, relpath: str, offsets: Iterable[int], reach: int
                   ) -> dict[int, tuple[str | None, str, int]]:
        """The lines from `reach` lines before each offset through `reach` lines after the
        line there, read from around it, whatever the file's size: offset -> (the record
        id of its clear header, None for a line that is not a record's; its digest as
        line_headers gives it; where it ends). A torn or unfinished tail is not a line
        (as line_headers); an offset where no line starts has nothing around it."""
        import hashlib

        out: dict[int, tuple[str | None, str, int]] = {}
        starts: dict[int, int] = {}  # where a line read ends -> where it starts
        try:
            fh = _open(self.layout.path(relpath), self._name(relpath))
        except FileNotFoundError:
            return out
        with fh:
            for start in sorted(set(offsets)):
                if start < 0 or not _byte_at(fh, start) or (
                        start > 0 and start not in starts
                        and _byte_at(fh, start - 1) != b"\n"):
                    continue  # at or past the end, or inside a line
                first = start
                for _ in range(reach):
                    if first == 0:
                        break
                    first = starts[first] if first in starts else _line_start(fh, first)
                at, past = first, 0
                while at <= start or past < reach:
                    if at not in out:  # lines beside each other are read once
                        fh.seek(at)
                        raw = fh.readline()
                        if not raw.endswith(b"\n"):
                            break
                        try:
                            memory_id: str | None = envelope.line_id(raw[:-1])
                        except DataError:
                            memory_id = None
                        out[at] = (memory_id, hashlib.sha256(raw).hexdigest()[:32],
                                   at + len(raw))
                        starts[at + len(raw)] = at
                    if at > start:
                        past += 1
                    at = out[at][2]
        return out

    def line_ids(self, relpath: str) -> Iterator[str]:
        """The record ids of a line file, from the clear headers (nothing is decrypted)."""
        try:
            fh = _open(self.layout.path(relpath), self._name(relpath))
        except FileNotFoundError:
            return
        with fh:
            for raw in fh:
                if raw.endswith(b"\n"):
                    try:
                        yield envelope.line_id(raw[:-1])
                    except DataError:
                        continue

    # --- whole-file documents (CLAUDE.md, preferences.json) --------------------------------

    def read_doc(self, relpath: str) -> dict[str, Any] | None:
        """Decrypt a whole-file envelope; None when the file does not exist yet."""
        try:
            blob = _read(self.layout.path(relpath), self._name(relpath))
        except FileNotFoundError:
            return None
        name = self._name(relpath)
        try:
            epoch = envelope.file_key_version(blob)
            plain = envelope.open_file(self.record_key(epoch), self.org, self.user, relpath,
                                       blob)
            doc = json.loads(plain)
        except envelope.AuthError:
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
        plain = _compact_json(doc)
        blob = envelope.seal_file(self.record_key(epoch), epoch, self.org, self.user, relpath,
                                  plain)
        fsio.atomic_write(self.layout.path(relpath), blob)

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
        plain = _compact_json(record.stored())
        return envelope.seal_line(self.record_key(record.key_version), record.key_version,
                                  self.org, self.user, relpath, record.memory_id,
                                  record.created_at, plain)

    def append_records(self, relpath: str, records: list[Record]) -> list[Location]:
        """Append records to a line file: one write, one fsync, for the whole batch.

        The caller holds the lock; fsio cuts a torn last line first, so the new lines are
        never glued to it. Returns each record's location (for the index).
        """
        if not records:
            return []
        lines = [self.seal_record(relpath, r) for r in records]
        path = self.layout.path(relpath)
        if _last_byte(path) not in (None, b"\n") and self.scan_lines(relpath).newline_missing:
            # The last record is whole and only lost its newline: give it back.
            fsio.append_line(path, b"\n", keep_tail=True)
        offset = fsio.append_line(path, b"".join(lines))
        out = []
        for line in lines:
            out.append(Location.line(relpath, offset))
            offset += len(line)
        return out

    def rewrite_lines(self, relpath: str, records: list[Record]) -> list[Location]:
        """Replace a line file atomically with these records (sealed under their own key
        versions); an empty list removes the file. Returns the new locations."""
        path = self.layout.path(relpath)
        self._marks.pop(relpath, None)
        if not records:
            fsio.remove(path)
            fsio.remove(self._marks_path(relpath))  # nothing of a forgotten session stays
            return []
        lines = [self.seal_record(relpath, r) for r in records]
        fsio.atomic_write(path, b"".join(lines))
        out, offset = [], 0
        for line in lines:
            out.append(Location.line(relpath, offset))
            offset += len(line)
        # The marks of what the file holds now: a forgotten message's go with it.
        marks = self._new_marks(relpath, size=-1)
        marks.kept.update((self.record_mark(r), self.content_mark(r.content_hash))
                          for r in records)
        with suppress(OSError, StorageError):  # derived: the next read makes them again
            self._cover(marks, path)
            self._write_marks(marks)
        return out

    # --- the keyed marks of a line file's messages (Marks) -----------------------------

    def _keys(self) -> tuple[bytes, bytes]:
        if self._mark_keys is None:
            self._mark_keys = (envelope.hkdf(self.meta_key, "mem/v1/message-marks"),
                               envelope.hkdf(self.meta_key, "mem/v1/message-marks-seal"))
        return self._mark_keys

    def message_mark(self, message_id: str | None, role: str | None, content_hash: str,
                     created_at: str) -> bytes:
        """A message's mark: its id, else who said what when (the key ingest stores a
        message once by), keyed with the user's metadata key."""
        import hmac

        data = (b"id\0" + message_id.encode() if message_id else
                "\0".join(("content", role or "", content_hash, created_at)).encode())
        return hmac.digest(self._keys()[0], data, "sha256")[:MARK_LEN]

    def content_mark(self, content_hash: str) -> bytes:
        import hmac

        return hmac.digest(self._keys()[0], b"content\0" + content_hash.encode(),
                           "sha256")[:MARK_LEN]

    def record_mark(self, record: Record) -> bytes:
        return self.message_mark(record.message_id, record.role, record.content_hash,
                                 record.created_at)

    def marks(self, relpath: str) -> Marks:
        """The marks of the messages a line file holds now: those kept beside it, when
        they are still the file's, carried on over the lines appended since (only these
        are decrypted); made from the whole file otherwise. A bad line other than a torn
        tail is a DataError, as read_scan reports it."""
        path = self.layout.path(relpath)
        try:
            fh = _open(path, self._name(relpath))
        except FileNotFoundError:
            self._marks.pop(relpath, None)
            return self._new_marks(relpath, size=-1)
        with fh:
            st = os.fstat(fh.fileno())
            marks = self._marks.get(relpath) or self._load_marks(relpath)
            if marks is None or not self._still(marks, st, fh):
                marks = self._new_marks(relpath, ino=st.st_ino, size=-1)
            self._hold(marks)
            if marks.end < st.st_size:
                self._read_on(marks, fh)
        return marks

    def _hold(self, marks: Marks) -> None:
        """Keep the marks of the files used last (a scan goes through thousands)."""
        self._marks.pop(marks.relpath, None)
        self._marks[marks.relpath] = marks
        while len(self._marks) > MARKS_HELD:
            del self._marks[next(iter(self._marks))]

    def _still(self, marks: Marks, st: os.stat_result, fh: BinaryIO) -> bool:
        if marks.ino != st.st_ino or marks.end > st.st_size:
            return False
        return self._tail_of(fh, marks.end) == marks.tail

    @staticmethod
    def _tail_of(fh: BinaryIO, end: int) -> bytes:
        import hashlib

        fh.seek(max(0, end - _MARKS_TAIL))
        return hashlib.sha256(fh.read(min(end, _MARKS_TAIL))).digest()

    def _read_on(self, marks: Marks, fh: BinaryIO) -> None:
        """Add the marks of the lines after those covered: a line at a time."""
        fh.seek(marks.end)
        offset = marks.end
        pairs: list[tuple[bytes, bytes]] = []  # added a few thousand at a time
        for raw in fh:
            if not raw.endswith(b"\n"):
                # No newline: torn by an interrupted append (skipped, as read_scan skips
                # it), or a whole record that lost its newline: stored, not covered.
                with suppress(DataError):
                    record = self._open_line(marks.relpath, raw)
                    pairs.append((self.record_mark(record),
                                  self.content_mark(record.content_hash)))
                    marks.size = -1
                break
            try:
                record = self._open_line(marks.relpath, raw[:-1])
            except DataError as exc:
                raise DataError(f"{self._name(marks.relpath)} at byte {offset}: "
                                f"{exc.message}") from None
            pairs.append((self.record_mark(record), self.content_mark(record.content_hash)))
            if len(pairs) >= 4096:
                marks.kept.update(pairs)
                pairs = []
            offset += len(raw)
        marks.kept.update(pairs)
        if offset != marks.end:
            marks.end = offset
            marks.tail = self._tail_of(fh, offset)
            marks.size = -1  # what was read on is not in the file of marks yet

    def note_appended(self, marks: Marks, records: list[Record], at: int) -> None:
        """Keep the marks of records just appended to the file at `at` (caller holds the
        lock): a frame appended to the marks, or the marks written whole when those on
        disk do not cover the file up to the append. Derived data: a failure leaves the
        next read to make them again."""
        pairs = [(self.record_mark(r), self.content_mark(r.content_hash)) for r in records]
        marks.kept.update(pairs)
        path = self.layout.path(marks.relpath)
        with suppress(OSError, StorageError):
            start, ours = marks.end, self._marks.get(marks.relpath) is marks
            self._cover(marks, path)
            if marks.size < 0 or at != start or not ours:
                self._write_marks(marks)
            else:
                self._write_marks(marks, pairs, start)

    def _cover(self, marks: Marks, path: Path) -> None:
        """Say that the marks cover the whole file as it is now."""
        with _open(path, self._name(marks.relpath)) as fh:
            st = os.fstat(fh.fileno())
            if marks.ino != st.st_ino:
                marks.size = -1
            marks.ino, marks.end = st.st_ino, st.st_size
            marks.tail = self._tail_of(fh, st.st_size)
        self._hold(marks)

    def _marks_path(self, relpath: str) -> Path:
        """marks/sessions/<session>.marks for sessions/<session>.jsonl: beside the line
        files' folders, not in them (those hold line envelopes only)."""
        return self.layout.dir / MARKS / (relpath.removesuffix(".jsonl") + MARKS_SUFFIX)

    def _frame(self, relpath: str, at: int, marks: Marks,
               pairs: list[tuple[bytes, bytes]]) -> bytes:
        import struct

        plain = struct.pack(_MARKS_HEAD, marks.ino, marks.end, marks.tail) + b"".join(
            k + v for k, v in pairs)
        aad = f"marks\0{self.org}\0{self.user}\0{relpath}\0{at}".encode()
        return envelope.seal_token(self._keys()[1], plain, aad).encode() + b"\n"

    def _frames(self, marks: Marks) -> Iterator[bytes]:
        """The marks whole, as frames of at most MARKS_SPILL each (one at least): each
        says what the marks cover, so any of them can be the last read."""
        at = 0
        pairs: list[tuple[bytes, bytes]] = []
        for pair in marks.kept.items():
            pairs.append(pair)
            if len(pairs) == MARKS_SPILL:
                frame = self._frame(marks.relpath, at, marks, pairs)
                yield frame
                at, pairs = at + len(frame), []
        if pairs or not at:
            yield self._frame(marks.relpath, at, marks, pairs)

    def _write_marks(self, marks: Marks, pairs: list[tuple[bytes, bytes]] | None = None,
                     start: int = 0) -> None:
        """Write the marks whole, or (`pairs`) append a frame of those to the file of
        marks: its frames are read in order, the last one's coverage holding."""
        path = self._marks_path(marks.relpath)
        if pairs is None or marks.size < 0 or start <= 0:
            if len(marks.kept) <= MARKS_SPILL and not path.exists():
                data = next(self._frames(marks))
                fsio.ensure_dir(path.parent)
                # A new session's: made by its first append (no rename, no fsync).
                at = fsio.append_line(path, data, sync=False)
                if at == 0:
                    marks.size = len(data)
                    return
            size = 0

            def frames() -> Iterator[bytes]:
                nonlocal size
                for frame in self._frames(marks):
                    size += len(frame)
                    yield frame

            fsio.ensure_dir(path.parent)
            fsio.atomic_write(path, frames())
            marks.size = size
            return
        data = self._frame(marks.relpath, marks.size, marks, pairs)
        # Not synced: the marks follow the file they mark, which is.
        at = fsio.append_line(path, data, sync=False)
        marks.size = at + len(data) if at == marks.size else -1

    def _load_marks(self, relpath: str) -> Marks | None:
        """The marks kept beside a line file, as far as their frames open in order;
        None when there are none."""
        import struct

        from memvault.crypto.envelope import AuthError, open_token

        try:
            fh = _open(self._marks_path(relpath), self._name(relpath))
        except (OSError, DataError):
            return None
        marks: Marks | None = None
        at = 0
        head = struct.calcsize(_MARKS_HEAD)
        pair = 2 * MARK_LEN
        with fh:  # a frame at a time: memory holds one, whatever the session's size
            size = os.fstat(fh.fileno()).st_size
            for line in fh:
                if not line.endswith(b"\n"):
                    break
                aad = f"marks\0{self.org}\0{self.user}\0{relpath}\0{at}".encode()
                try:
                    plain = open_token(self._keys()[1], line[:-1].decode("ascii"), aad)
                except (AuthError, UnicodeDecodeError):
                    break  # a frame torn or changed: the ones before hold
                ino, end, tail = struct.unpack_from(_MARKS_HEAD, plain)
                if marks is None:
                    marks = self._new_marks(relpath)
                marks.kept.update((plain[i:i + MARK_LEN], plain[i + MARK_LEN:i + pair])
                                  for i in range(head, len(plain) - pair + 1, pair))
                marks.ino, marks.end, marks.tail = ino, end, tail
                at += len(line)
                marks.size = at
        if marks is not None and at != size:
            marks.size = -1  # frames after a bad one: written whole next time
        return marks

    def _new_marks(self, relpath: str, **fields: Any) -> Marks:
        """Empty marks of a line file, spilled (if many) to a table in the user's folder."""
        scratch = self.layout.dir if self.layout.dir.is_dir() else None
        return Marks(relpath, MarkMap(scratch=scratch), **fields)

    def tail_records(self, relpath: str, count: int) -> tuple[list[Record], list[Location]]:
        """The last `count` records of a line file and their locations, read from its
        end (a torn tail skipped): the turns new ones are indexed next to."""
        path = self.layout.path(relpath)
        try:
            fh = _open(path, self._name(relpath))
        except FileNotFoundError:
            return [], []
        with fh:
            size = fh.seek(0, os.SEEK_END)
            step = 64 << 10
            while True:
                start = max(0, size - step)
                fh.seek(start)
                data = fh.read(size - start)
                lines = data.split(b"\n")
                # The first piece may be cut (unless the read began at the file's start).
                whole = lines if start == 0 else lines[1:]
                if start == 0 or len(whole) > count + 1:
                    break
                step *= 4
        offsets, at = [], (start if start == 0 else start + len(lines[0]) + 1)
        for raw in whole:
            offsets.append(at)
            at += len(raw) + 1
        records: list[Record] = []
        locations: list[Location] = []
        for raw, offset in list(zip(whole, offsets, strict=True))[-(count + 1):]:
            if not raw:
                continue
            try:
                record = self._open_line(relpath, raw)
            except DataError:
                continue  # torn: an interrupted append, skipped
            record.archived = relpath.startswith(ARCHIVE + "/")
            records.append(record)
            locations.append(Location.line(relpath, offset))
        return records[-count:], locations[-count:]

    def read_at(self, location: Location, memory_id: str) -> Record | None:
        """The record `memory_id` at `location`; None when it is not there (the index that
        said so is stale: the caller rebuilds it)."""
        if location.is_doc:
            return next((r for r in self.doc_records(location.file)
                         if r.memory_id == memory_id), None)
        assert location.offset is not None
        try:
            with _open(self.layout.path(location.file), self._name(location.file)) as fh:
                fh.seek(location.offset)
                raw = fh.readline()
        except OSError:
            return None
        if not raw.endswith(b"\n"):
            return None
        try:
            record = self._open_line(location.file, raw[:-1])
        except DataError:
            return None  # not a record boundary any more
        if record.memory_id != memory_id:
            return None
        record.archived = location.archived
        return record

    def _open_line(self, relpath: str, raw: bytes) -> Record:
        doc = envelope.parse_line(raw)
        kv = doc["kv"]
        assert isinstance(kv, int)
        try:
            plain = envelope.open_line(self.record_key(kv), self.org, self.user, relpath, doc)
        except envelope.AuthError:
            raise DataError("fails authentication (modified, or moved from another "
                            "file or user)") from None
        try:
            record = Record.from_stored(json.loads(plain))
        except ValueError:
            raise DataError("decrypts to malformed JSON") from None
        if record.memory_id != doc["id"]:
            raise DataError("record id does not match its envelope")
        return record

    def line_plains(self, relpath: str, wanted: Container[str]
                    ) -> list[tuple[str, str, bytes]]:
        """(id, created_at, the record's JSON as sealed) of each line whose id is wanted
        (the first two from its clear header, bound to it by the AEAD): decrypted,
        not parsed, for a sync that forwards records whole. A torn tail is skipped, as
        read_lines skips it; any other bad line is a DataError."""
        try:
            data = _read(self.layout.path(relpath), self._name(relpath))
        except FileNotFoundError:
            return []
        lines = data.split(b"\n")
        out: list[tuple[str, str, bytes]] = []
        for at, memory_id, ts, plain in envelope.open_lines(self.record_key, self.org,
                                                        self.user, relpath, lines, wanted):
            if plain is None:
                if at == len(lines) - 1:
                    continue  # torn by an interrupted append
                raise DataError(f"{self._name(relpath)} line {at + 1}: fails "
                                "authentication or is not a record line")
            # The id sealed inside is the one in the clear header (orjson writes it
            # first); anything else is parsed and checked as _open_line checks it.
            if not plain.startswith(b'{"memory_id":"' + memory_id.encode() + b'"'):
                try:
                    inner = json.loads(plain)
                except ValueError:
                    inner = None
                if not isinstance(inner, dict) or inner.get("memory_id") != memory_id:
                    raise DataError(f"{self._name(relpath)} line {at + 1}: record id "
                                    "does not match its envelope")
            out.append((memory_id, ts, plain))
        return out

    def scan_lines(self, relpath: str) -> LineScan:
        """Read every record of a line file, collecting problems instead of raising."""
        scan = LineScan()
        try:
            data = _read(self.layout.path(relpath), self._name(relpath))
        except FileNotFoundError:
            return scan
        archived = relpath.startswith(ARCHIVE + "/")
        lines = data.split(b"\n")
        complete, tail = lines[:-1], lines[-1]
        offset = 0
        for number, raw in enumerate(complete, start=1):
            start, offset = offset, offset + len(raw) + 1
            try:
                record = self._open_line(relpath, raw)
                record.archived = archived
                scan.records.append(record)
                scan.offsets.append(start)
            except DataError as exc:
                scan.problems.append(LineProblem(number, exc.message))
            scan.good_size = offset
        if tail:
            # No newline: a crash in the middle of an append. Skipped, and cut by the next
            # append. A complete record that only lost its newline is still read, and the
            # next append restores the newline instead of cutting it.
            try:
                record = self._open_line(relpath, tail)
                record.archived = archived
                scan.records.append(record)
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

    def read_scan(self, relpath: str) -> LineScan:
        """Like scan_lines, but any bad line other than a torn tail is an error."""
        scan = self.scan_lines(relpath)
        for problem in scan.problems:
            if not problem.torn_tail:
                raise DataError(f"{self._name(relpath)} line {problem.line}: {problem.problem}")
        return scan

    def read_lines(self, relpath: str) -> list[Record]:
        """Records of a line file; a torn tail is skipped, any other bad line is an error."""
        return self.read_scan(relpath).records

    def repair_tail(self, relpath: str) -> bool:
        """Drop a torn last line (caller holds the lock). True when something was cut."""
        path = self.layout.path(relpath)
        scan = self.scan_lines(relpath)
        if path.exists() and any(p.torn_tail for p in scan.problems):
            fsio.truncate_to(path, scan.good_size)
            return True
        return False

    # --- every record, one file at a time --------------------------------------------------

    def files(self, include_archive: bool = True) -> Iterator[tuple[str, list[Record],
                                                                    list[Location]]]:
        """Each content file with its records and their locations, one file at a time:
        memory stays bounded by the largest file, whatever the user's history."""
        for relpath in self.layout.content_files(include_archive):
            yield relpath, *self.file(relpath)

    def file(self, relpath: str) -> tuple[list[Record], list[Location]]:
        """One content file's records and their locations (none when it does not exist)."""
        if relpath.endswith(".jsonl"):
            scan = self.read_scan(relpath)
            return scan.records, scan.locations(relpath)
        records = self.doc_records(relpath)
        return records, [Location.doc(relpath)] * len(records)

    def records(self, include_archive: bool = True) -> Iterator[Record]:
        for _, records, _ in self.files(include_archive):
            yield from records

    # --- destroy ----------------------------------------------------------------------------

    def count_files(self) -> int:
        folder = self.layout.dir
        return sum(1 for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else 0

    def destroy_pending(self) -> dict[str, Any] | None:
        """The plan of a destroy that began and has not finished (None: none began). An
        unreadable plan is an empty one: the destroy still finishes."""
        try:
            plan = json.loads(self.layout.destroy_path.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return {}
        return plan if isinstance(plan, dict) else {}

    def begin_destroy(self, plan: dict[str, Any]) -> None:
        """Record a destroy before anything is deleted (beside the lock, outside the user's
        directory): until it is finished, the user is neither readable nor re-created."""
        fsio.ensure_dir(self.layout.destroy_path.parent)
        fsio.atomic_write(self.layout.destroy_path, json.dumps(plan).encode() + b"\n")

    def end_destroy(self) -> None:
        fsio.remove(self.layout.destroy_path)

    def destroy(self) -> int:
        """Delete the user's directory, wrapped keys first (so that an interruption still
        leaves nothing readable). Nothing is read or decrypted: a damaged user goes too,
        and a second call after an interruption finishes the job. Returns the number of
        files deleted."""
        import shutil

        files = self.count_files()
        # Every file of keys/ first: a wrapped key, and the temp file a killed create_new
        # left beside it (a copy, or a second link, of that key).
        keys = self.layout.keys_dir
        try:
            for path in sorted(keys.iterdir()) if keys.is_dir() else ():
                if path.is_file() or path.is_symlink():
                    path.unlink()
            if keys.is_dir():
                fsio.fsync_dir(keys)
        except OSError as exc:
            raise StorageError(f"cannot delete the data keys of {self.org}/{self.user}: "
                               f"{exc.strerror}", hint="destroy-again") from None
        self._deks.clear()
        self._record_keys.clear()
        try:
            # A file can appear while the tree is removed (an index merge still running, a
            # concurrent read's bookkeeping, which takes no user lock): remove it too.
            for attempt in range(5):
                try:
                    shutil.rmtree(self.layout.dir)
                    break
                except OSError as exc:
                    if exc.errno != errno.ENOTEMPTY or attempt == 4:
                        raise
            fsio.fsync_dir(self.layout.dir.parent)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StorageError(f"cannot delete {self.layout.dir}: {exc.strerror}; its keys "
                               "are already gone", hint="destroy-again") from None
        return files


def _scratch_table(scratch: Path | None) -> Any:
    """A connection to a new table of marks (k -> v) in a temporary SQLite file of its
    own, in `scratch` (else the system's temporary folder), unlinked at once: nothing is
    left behind, even by a kill. Its page cache is all it holds in memory."""
    import sqlite3
    import tempfile
    import time

    error: Exception | None = None
    for folder in [*([scratch] if scratch is not None else []), Path(tempfile.gettempdir())]:
        path = folder / f"{fsio.TMP_PREFIX}marks.{os.getpid()}.{time.monotonic_ns()}"
        try:
            db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            try:
                for pragma in ("journal_mode=OFF", "synchronous=OFF",
                               "locking_mode=EXCLUSIVE", "cache_size=-2048",
                               "temp_store=FILE"):
                    db.execute(f"PRAGMA {pragma}")
                db.execute("CREATE TABLE m (k BLOB PRIMARY KEY, v BLOB NOT NULL) "
                           "WITHOUT ROWID")
            except sqlite3.Error:
                db.close()
                raise
        except sqlite3.Error as exc:
            error = exc
            with suppress(OSError):
                path.unlink()
            continue
        with suppress(OSError):
            path.unlink()  # open: the table lives on in the open file (else: closed)
        return db
    raise StorageError(f"cannot make a temporary table of a session's marks: {error}")


# The start of a line as envelope.seal_line writes one, to its record id: a line whose id
# a caller does not want is passed over without parsing the rest of it.
_LINE_ID = re.compile(rb'\{"v":1,"kv":[0-9]+,"id":"([A-Za-z0-9:._+-]*)",')


_BLOCK = 1 << 20  # what lines_without reads at once


def _lines(block: bytes) -> Iterator[bytes]:
    """The lines of a block, each with its newline (a last one without, when it has none)."""
    start = 0
    while start < len(block):
        end = block.find(b"\n", start) + 1 or len(block)
        yield block[start:end]
        start = end


def _line_key(raw: bytes) -> bytes | None:
    """The record id of a line's clear header, encoded; None: not a record's line (a torn
    tail, or damage)."""
    found = _LINE_ID.match(raw)
    if found is not None and raw.endswith(b'"}\n'):
        return bytes(found.group(1))
    try:  # another writer's order of fields, or a last line that lost its newline
        return envelope.line_id(raw.removesuffix(b"\n")).encode()
    except DataError:
        return None


def _sealed(relpath: str, line: tuple[int, int, bytes, bytes | None]) -> SealedLine:
    """A line lines_without read (number, offset, bytes, id encoded) as a SealedLine."""
    number, at, raw, key = line
    return SealedLine(relpath, number, at, raw, None if key is None else key.decode())


def _open(path: Path, name: str) -> BinaryIO:
    """A vault file open for reading. A FIFO, a device or a folder in its place is
    refused (DataError) without blocking: a planted FIFO must not hang every reader.
    FileNotFoundError passes to the caller."""
    try:
        return fsio.open_regular(path, name)
    except IsADirectoryError:
        raise DataError(f"{name} is a folder, not a file") from None


def _byte_at(fh: BinaryIO, at: int) -> bytes:
    fh.seek(at)
    return fh.read(1)


def _line_start(fh: BinaryIO, end: int) -> int:
    """Where the line that ends at `end` (just after its newline) starts: the file read
    back from there a block at a time, to the newline before it."""
    pos, step = end - 1, 8 << 10  # from its own newline
    while pos > 0:
        low = max(0, pos - step)
        fh.seek(low)
        found = fh.read(pos - low).rfind(b"\n")
        if found >= 0:
            return low + found + 1
        pos, step = low, step * 2  # a long line: larger reads
    return 0


def _read(path: Path, name: str) -> bytes:
    with _open(path, name) as fh:
        return fh.read()


def _last_byte(path: Path) -> bytes | None:
    try:
        with _open(path, path.name) as fh:
            size = fh.seek(0, os.SEEK_END)
            if size == 0:
                return None
            fh.seek(size - 1)
            last: bytes = fh.read(1)
            return last
    except FileNotFoundError:
        return None


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
