"""Ingest: transcripts in, admitted and encrypted messages out (SPEC §6, §7).

Parsing is text/transcripts/'s job and admission is admission.py's; this module
decides what is stored. Only messages not stored yet are admitted (the costly scan),
and a session is appended to in one write, one fsync and one index commit.

Files are opened by storage/streams.py (plain or zstd, decompressed as read). A Codex
rollout (gigabytes) is read as a stream, line by line, and stored batch by batch, each
batch in its own write; any other transcript is read whole, at most MAX_TRANSCRIPT bytes.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter, deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, cast

from memvault.config import validate_name
from memvault.crypto.envelope import content_hash
from memvault.errors import DataError, MemError, NotFound, NotTranscript, Refused, UsageError
from memvault.index.base import file_entries
from memvault.model.location import session_file, session_name
from memvault.model.progress import NO_PROGRESS, Progress
from memvault.model.records import (
    AGENTS,
    CONTEXT_NEIGHBOURS,
    MAX_CONTENT,
    NewMessage,
    Record,
    clean_tags,
    normalise_time,
    now_iso,
    uuid7,
)
from memvault.model.results import IngestResult, Preview, Redactions, ScanError, ScanResult
from memvault.ops import remember
from memvault.ops.admission import AdmissionPolicy, Screened, ScreenKey, screen_key
from memvault.storage.streams import (
    MAX_TRANSCRIPT,
    ZSTD_SUFFIX,
    Read,
    Replay,
    decode,
    decompressed,
    open_transcript,
    read_all,
    read_file,
    read_lines,
)
from memvault.storage.userstore import LineScan, UserStore
from memvault.text.words import counted
from memvault.vault.vault import Transaction, Vault

if TYPE_CHECKING:
    import io

    from memvault.ops.readahead import Fetched
    from memvault.text.transcripts import Transcript, claude_code

SCAN_SUFFIXES = (".jsonl", ".json")
# Aider's history in each repository, and the agents' databases a scan reads whole.
AIDER_HISTORY = ".aider.chat.history.md"
STORE_SUFFIXES = (".db", ".sqlite", ".sqlite3")


def ingest_file(vault: Vault, path: Path, fmt: str = "auto", session: str | None = None,
                dry_run: bool = False, strict: bool = False,
                fallback_name: str | None = None, tags: tuple[str, ...] = (),
                progress: Progress = NO_PROGRESS) -> IngestResult:
    """Ingest one transcript file, plain or zstd-compressed (rollout-*.jsonl.zst): a Codex
    rollout is read as a stream, of any size; any other transcript whole (at most
    MAX_TRANSCRIPT bytes). `progress`: the bytes of a stream read, or the messages of a
    whole transcript screened; the messages kept as each write ends."""
    from memvault.text.transcripts import read_path

    name = Path(path.name.removesuffix(ZSTD_SUFFIX)).stem
    # An agent's store that is no single transcript file: a database, a folder.
    store = read_path(path, fmt)
    if store is not None:
        progress.start(len(store.messages), "messages")
        return ingest_batches(vault, iter([store]), path.name, session, dry_run, strict,
                              fallback_name, tags=tags, progress=progress)
    live = None if dry_run else _read_on(vault, path, fmt, session, strict, fallback_name,
                                         tags, progress)
    if live is not None:
        return _with_subagents(vault, path, live, strict, tags, session)
    lines = None if dry_run else _read_on_lines(vault, path, fmt, session, strict,
                                                fallback_name, tags, progress)
    if lines is not None:
        return _with_cursor_subagents(vault, path, lines, strict, tags) \
            if lines.format == "cursor" else lines
    parent = _cursor_parent(path)
    if parent is not None and session is None:
        fallback_name = fallback_name or parent.stem  # a subagent's: its parent's session
    try:
        size: int | None = path.stat().st_size
    except OSError:
        size = None  # open_transcript says why

    def opened() -> AbstractContextManager[Read]:
        progress.start(size, "bytes")  # again for a second reading (--strict)
        return open_transcript(path, watch=progress.advance)

    result = _ingest_source(vault, opened, str(path), name, fmt, session, dry_run, strict,
                            fallback_name, again=True, tags=tags, progress=progress,
                            channel=_channel(path) if parent is not None else None)
    if result.format == "claude-code" and not dry_run:
        result = _with_subagents(vault, path, result, strict, tags, session)
    if result.format == "cursor" and not dry_run and parent is None:
        result = _with_cursor_subagents(vault, path, result, strict, tags)
    return result


# A Claude Code transcript this large is read on from where the last ingest stopped
# (hooks ingest a live session at every compaction and at its end); a smaller one is read
# whole each time. A read on starts at most LIVE_WINDOW bytes before that point (the last
# API message, a tool call waiting for its result); at most LIVE_KEEP positions are kept.
LIVE_MIN = 256 << 10
LIVE_WINDOW = 8 << 20
LIVE_KEEP = 256
HEAD = 64 << 10  # the start of the file a position checks again
# The two records of one Codex message are written next to each other: a record waiting
# for its twin within this many last lines is read again next time (an older one is one
# whose twin never comes: older rollouts write none).
TWIN_LINES = 64


def _read_on(vault: Vault, path: Path, fmt: str, session: str | None, strict: bool,
             fallback_name: str | None, tags: tuple[str, ...], progress: Progress
             ) -> IngestResult | None:
    """A Claude Code transcript read from where the last ingest of it stopped: only the
    lines appended since (and the few before that a message may still span), when the
    file is the one read then (same file, longer, the same bytes where read); read whole
    (and its position kept) otherwise. None: not such a transcript (the caller reads it).

    The position is sealed in the user's state under a keyed mark of the path and what
    was asked (the session, the tags): the end of the last whole line read, digests of
    the file's start and of the lines read again, and what the reader needs of the lines
    before (claude_code.Resume)."""
    import stat

    from memvault.storage.fsio import open_regular
    from memvault.text.transcripts import detect

    if fmt not in ("auto", "claude-code") or path.name.endswith(ZSTD_SUFFIX):
        return None
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode) or st.st_size < LIVE_MIN:
            return None
        key = vault.path_mark(b"\0".join([b"read-to", os.fsencode(path.resolve()),
                                           (session or "").encode(),
                                           (fallback_name or "").encode(),
                                           *(t.encode() for t in tags)]))
        with open_regular(path) as fh:
            head = fh.read(HEAD)
            if fmt == "auto":
                cut = head[:head.rfind(b"\n") + 1] or head
                try:
                    if detect(cut.decode("utf-8", "replace")) != "claude-code":
                        return None
                except MemError:
                    return None
            before = _position(vault, key)
            if before is not None and not _still(before, os.fstat(fh.fileno()), head, fh):
                before = None
            identity = os.fstat(fh.fileno())
            if before is None:
                # Read whole, in two passes over blocks of lines: memory holds a block
                # and the links of the lines, never the file.
                twice = _read_twice(vault, path, fh, identity.st_size, session, strict,
                                    fallback_name, tags, progress)
                if twice is None:
                    return None
                ingested, position = twice
                end = int(position["end"])
                position["held"] = ingested.messages_skipped + ingested.messages_added
                return _kept(vault, key, ingested, position, identity, head[:end])
            start = int(before["pin"])
            fh.seek(start)
            end = int(before["end"])
            progress.start(max(0, st.st_size - start), "bytes")
            if identity.st_size - start > MAX_TRANSCRIPT:
                return None  # read whole, it is refused as too large: the caller says so
            # Read into one buffer, cut in place: the file's bytes are held once.
            whole = bytearray(max(0, identity.st_size - start))
            whole[cast("io.BufferedReader", fh).readinto(whole):] = b""
    except OSError:
        return None  # the caller opens it and says why
    progress.advance(len(whole))
    whole[whole.rfind(b"\n") + 1:] = b""  # a torn last line is read once it is whole
    if start + len(whole) <= end:
        # Nothing appended: nothing to read.
        return IngestResult(session_id=str(before["session"]), format="claude-code",
                            messages_added=0, messages_skipped=int(before.get("held", 0)),
                            lines_ignored=0, withheld=0, redactions=())
    result = _read_lines(vault, path, whole, start, before, session, strict,
                         fallback_name, tags, progress)
    if result is None:
        return _read_on(vault, path, fmt, session, strict, fallback_name, tags, progress) \
            if _drop(vault, key) else None
    ingested, position = result
    # The messages the file holds, as far as read: what an ingest that reads none skips.
    position["held"] = int(before.get("held", 0)) + ingested.messages_added
    return _kept(vault, key, ingested, position, identity, head[:start + len(whole)])


def _kept(vault: Vault, key: str, ingested: IngestResult, position: dict[str, Any],
          identity: os.stat_result, head: bytes) -> IngestResult:
    """Keep the position a read ended at (with the file's identity and start)."""
    position.update(dev=identity.st_dev, ino=identity.st_ino,
                    head=hashlib.sha256(head).hexdigest())
    if vault.exists():  # a session with nothing to keep made no user: none is made here
        _keep_position(vault, key, position)
    return ingested


def _read_twice(vault: Vault, path: Path, fh: IO[bytes], size: int, session: str | None,
                strict: bool, fallback_name: str | None, tags: tuple[str, ...],
                progress: Progress) -> tuple[IngestResult, dict[str, Any]] | None:
    """A Claude Code file read whole in bounded memory: a first pass keeps only each
    line's links and ids and chooses the conversation's branch (claude_code.choose); the
    second drafts the messages a block of lines at a time and stores each block's in its
    own write, so an interruption keeps every message stored so far, whole. The result
    and the position to keep; None when it is no such file (a subagent's, one with
    nothing of Claude Code's: the caller reads it whole)."""
    from memvault.storage.streams import freed_to_system
    from memvault.text.transcripts import claude_code

    end = _whole_end(fh, size)
    if end <= 0:
        return None
    freed_to_system()
    progress.start(2 * end, "bytes")
    line_starts: list[int] = []  # the offsets of the lines of the block read last

    def texts() -> _Texts:
        """Each block's text, with the number of the line before it."""
        return _Texts(fh, end, str(path), line_starts, progress)

    # The first pass's table of links lives on disk beside the user's files.
    scratch = vault.layout.dir if vault.layout.dir.is_dir() else vault.root
    chosen = claude_code.choose(texts(), scratch if scratch.is_dir() else None)
    if chosen is None:
        return None
    try:
        if not chosen.turned:
            return None
        ingested, at = _second_pass(vault, path, texts, line_starts, chosen, end, session,
                                    strict, fallback_name, tags, progress)
    finally:
        chosen.close()
    # The next read starts at the earliest line a later line may still change (see
    # _read_lines): the last API message, a tool call waiting for its result.
    pin_line = min((n for n in chosen.pins if n in at and end - at[n] <= LIVE_WINDOW),
                   default=None)
    pin = at[pin_line] if pin_line is not None else end
    branch = [u for n, u in chosen.branch if pin_line is not None and n >= pin_line]
    fh.seek(pin)
    return ingested, {"end": end, "pin": pin, "session": ingested.session_id,
                      "tail": hashlib.sha256(fh.read(end - pin)).hexdigest(),
                      "resume": {**chosen.resume.__dict__, "branch": branch}}


def _second_pass(vault: Vault, path: Path, texts: Callable[[], _Texts],
                 line_starts: list[int], chosen: claude_code.Chosen, end: int,
                 session: str | None, strict: bool, fallback_name: str | None,
                 tags: tuple[str, ...], progress: Progress
                 ) -> tuple[IngestResult, dict[int, int]]:
    """_read_twice's second pass: each block's messages stored in a write of its own; the
    result, and the offset of each line a later read may have to start at."""
    from memvault.storage.streams import given_back
    from memvault.text.transcripts import claude_code
    from memvault.text.transcripts.base import _scrub

    at: dict[int, int] = {}
    pins = set(chosen.pins)
    blocks = claude_code.Blocks(chosen)

    def batches() -> Iterator[Transcript]:
        # One block at a time: read, drafted and stored before the next is read (its
        # text let go before its messages are stored), so a write, and the index merges
        # its commit may start, find one block's messages in memory, not two blocks.
        offset, read = 0, texts()
        for base, text in read:
            for n, line_start in enumerate(line_starts, base + 1):
                if n in pins:
                    at[n] = offset + line_start
            offset += line_starts[-1]
            # Only the branch from the earliest line a later read may start at is kept
            # for it: a pin within LIVE_WINDOW of the end (offsets grow with the lines).
            near = [n for n in at if end - at[n] <= LIVE_WINDOW]
            blocks.since = min(near) if near else None
            batch = blocks.read(base, text, end=read.done)
            del text
            yield _scrub(batch)
            del batch
            given_back()  # the block is stored: what it held goes back, not to holes

    ingested = ingest_batches(vault, batches(), path.stem, session, False, strict,
                              fallback_name, tags=tags, progress=progress, streamed=True)
    return ingested, at


def _read_lines(vault: Vault, path: Path, whole: bytearray, start: int,
                before: dict[str, Any] | None, session: str | None, strict: bool,
                fallback_name: str | None, tags: tuple[str, ...], progress: Progress
                ) -> tuple[IngestResult, dict[str, Any]] | None:
    """Parse and store the whole lines read from `start`; the result and the position to
    keep, or None when these lines cannot be read on from before (read the file whole)."""
    from memvault.text.transcripts import claude_code
    from memvault.text.transcripts.base import _scrub

    resume = claude_code.Resume(**before["resume"]) if before is not None else None
    text = decode(whole, str(path)).removeprefix("\ufeff")
    read = claude_code.read_on(text, resume)
    del text
    if read is None:
        return None
    transcript = _scrub(read.transcript)
    if not transcript.messages and not transcript.summaries and before is None \
            and not read.resume.sub and read.resume.leaf is None and not read.branch:
        return None  # nothing of Claude Code's read: the caller says what it is
    ingested = ingest_batches(vault, iter([transcript]), path.stem, session, False, strict,
                              fallback_name, tags=tags, progress=progress)
    # The next read starts at the earliest line a later line may still change: the last
    # API message, a tool call waiting for its result (within LIVE_WINDOW), else the end.
    offsets = _line_starts(whole)
    end = start + len(whole)
    pin = min((start + offsets[n - 1] for n in read.pins
               if n - 1 < len(offsets) and end - (start + offsets[n - 1]) <= LIVE_WINDOW),
              default=end)
    branch = [u for n, u in read.branch if start + offsets[n - 1] >= pin]
    resume_doc = {**read.resume.__dict__, "branch": branch}
    return ingested, {"end": end, "pin": pin, "session": ingested.session_id,
                      "tail": hashlib.sha256(whole[pin - start:]).hexdigest(),
                      "resume": resume_doc}


def _read_on_lines(vault: Vault, path: Path, fmt: str, session: str | None, strict: bool,
                   fallback_name: str | None, tags: tuple[str, ...], progress: Progress
                   ) -> IngestResult | None:
    """A JSON-lines file another agent appends to as it goes (resume.LINE_FORMATS: Codex,
    Copilot CLI, Cursor, Qwen Code, Pi, Droid) read from where the last ingest of it
    stopped, by the rule Claude Code's follow (_read_on): a position sealed in the state
    under a keyed mark of the path and what was asked, holding the end of the last whole
    line read, the line a read on starts at and digests of the file's start and of the
    lines from there; a file no longer the one read (shorter, replaced, changed where
    read) is read whole. The reader is given the file's first line and the lines' numbers
    (its messages' ids are made of them); a linked format's read starts at its last turn,
    and a rewind to before it is read whole. None: not such a file (the caller reads it)."""
    import stat

    from memvault.storage.fsio import open_regular
    from memvault.text.transcripts import MAX_LINE, detect
    from memvault.text.transcripts.resume import LINE_FORMATS

    if (fmt != "auto" and fmt not in LINE_FORMATS) or path.name.endswith(ZSTD_SUFFIX) \
            or _cursor_parent(path) is not None:
        return None
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            return None
        with open_regular(path) as fh:
            head = fh.read(HEAD)
            known = fmt
            if fmt == "auto":
                cut = head[:head.rfind(b"\n") + 1] or head
                try:
                    known = detect(cut.decode("utf-8", "replace"))
                except MemError:
                    return None
            if known not in LINE_FORMATS or (strict and known == "codex"):
                return None  # --strict screens a rollout whole before storing: read whole
            key = vault.path_mark(b"\0".join([b"read-on", known.encode(),
                                               os.fsencode(path.resolve()),
                                               (session or "").encode(),
                                               (fallback_name or "").encode(),
                                               *(t.encode() for t in tags)]))
            identity = os.fstat(fh.fileno())
            before = _position(vault, key)
            if before is not None and (before.get("format") != known or
                                       not _still(before, identity, head, fh)):
                before = None
            end = _whole_end(fh, identity.st_size)
            if end <= 0:
                return None
            if before is not None and end <= int(before["end"]):
                return IngestResult(session_id=str(before["session"]), format=known,
                                    messages_added=0,
                                    messages_skipped=int(before.get("held", 0)),
                                    lines_ignored=0, withheld=0, redactions=())
            start = int(before["pin"]) if before is not None else 0
            line = int(before["line"]) if before is not None else 0
            fh.seek(0)
            first = fh.readline(MAX_LINE) if start else b""
            fh.seek(start)
            progress.start(end - start, "bytes")
            on = {"codex": _codex_on, "cursor": _cursor_on}.get(known, _text_on)
            read = on(vault, path, fh, known, start, end, line, first, before, session,
                      strict, fallback_name, tags, progress)
            if read is None:
                if before is not None and _drop(vault, key):
                    return _read_on_lines(vault, path, fmt, session, strict, fallback_name,
                                          tags, progress)
                return None
            ingested, position = read
            fh.seek(int(position["pin"]))
            tail = hashlib.sha256()
            left = end - int(position["pin"])
            while left > 0 and (block := fh.read(min(1 << 20, left))):
                tail.update(block)
                left -= len(block)
    except OSError:
        return None  # the caller opens it and says why
    position.update(format=known, end=end, session=ingested.session_id,
                    tail=tail.hexdigest(),
                    held=int((before or {}).get("held", 0)) + ingested.messages_added)
    return _kept(vault, key, ingested, position, identity, head[:end])


def _text_on(vault: Vault, path: Path, fh: IO[bytes], fmt: str, start: int, end: int,
             line: int, first: bytes, before: dict[str, Any] | None, session: str | None,
             strict: bool, fallback_name: str | None, tags: tuple[str, ...],
             progress: Progress) -> tuple[IngestResult, dict[str, Any]] | None:
    """The lines from `start` (line `line` + 1) to `end` of a file read whole by its
    format's reader, after the file's first line; the result and where to start next.
    None: these lines cannot be read on from (a linked format rewound: read whole)."""
    from memvault.text.transcripts.resume import goes_on, leaf, prelude

    if end - start > MAX_TRANSCRIPT:
        return None  # read whole, it is refused as too large: the caller says so
    data = fh.read(end - start)
    progress.advance(len(data))
    text = decode(data, str(path))
    if not start:
        text = text.removeprefix("\ufeff")
    if before is not None and not goes_on(text, fmt, before.get("leaf")):
        return None
    last = leaf(text, fmt)
    whole = prelude(decode(first, str(path)).removeprefix("\ufeff"), line) + text \
        if start else text
    del text
    ingested = ingest_text(vault, whole, path.stem, fmt, session, False, strict,
                           fallback_name, tags, progress)
    # A linked format starts again at its last turn (its branch is followed back to it);
    # the others where this read ended.
    if last is not None:
        offsets = _line_starts(data)
        pin, held_leaf = start + offsets[last[0] - 1], last[1]
    elif before is not None and before.get("leaf"):
        pin, held_leaf = start, before["leaf"]
    else:
        pin, held_leaf = end, None
    return ingested, {"pin": pin, "line": line + data.count(b"\n", 0, pin - start),
                      "leaf": held_leaf}


def _cursor_on(vault: Vault, path: Path, fh: IO[bytes], fmt: str, start: int, end: int,
               line: int, first: bytes, before: dict[str, Any] | None, session: str | None,
               strict: bool, fallback_name: str | None, tags: tuple[str, ...],
               progress: Progress) -> tuple[IngestResult, dict[str, Any]] | None:
    """A Cursor transcript's lines from `start` to `end`, its messages named on from what
    the last read left (cursor.Said: the user's turns so far, what was said in the last),
    kept with the position for the next read. None: a position without that state."""
    from memvault.text.transcripts.base import _scrub
    from memvault.text.transcripts.cursor import Said, parse_on

    said = Said.load((before or {}).get("said")) if start else Said()
    if said is None or end - start > MAX_TRANSCRIPT:
        return None  # read whole (one refused as too large: the caller says so)
    data = fh.read(end - start)
    progress.advance(len(data))
    text = decode(data, str(path))
    transcript = _scrub(parse_on(text.removeprefix("\ufeff") if not start else text, said))
    del text
    ingested = ingest_batches(vault, iter([transcript]), path.stem, session, False, strict,
                              fallback_name, tags=tags, progress=progress)
    return ingested, {"pin": end, "line": line + data.count(b"\n"), "leaf": None,
                      "said": said.dump()}


def _codex_on(vault: Vault, path: Path, fh: IO[bytes], fmt: str, start: int, end: int,
              line: int, first: bytes, before: dict[str, Any] | None, session: str | None,
              strict: bool, fallback_name: str | None, tags: tuple[str, ...],
              progress: Progress) -> tuple[IngestResult, dict[str, Any]] | None:
    """A Codex rollout's lines from `start` to `end` read as a stream (gigabytes), after
    its first line (the session's meta); the next read starts after the last line where
    no record waited for its twin (so the two records of one message are read together)."""
    from memvault.text.transcripts import STREAM_BATCH, CodexReader, LongLine, Transcript
    from memvault.text.transcripts.base import _nothing

    reader = CodexReader()
    if start:
        reader.feed(first.decode("utf-8", "replace"))
        reader.resume_at(line)
    left = end - start

    def bounded(n: int) -> bytes:
        nonlocal left
        data = fh.read(min(n, left))
        left -= len(data)
        progress.advance(len(data))
        return data

    # The start of each of the last TWIN_LINES lines read: a record there may still wait
    # for its twin (written next to it), and the next read starts at the first such.
    recent: deque[tuple[int, int]] = deque(maxlen=TWIN_LINES)
    counted = {"lines": line}

    def batches() -> Iterator[Transcript]:
        offset, number = start, line
        ready: list[NewMessage] = []
        for raw in read_lines(bounded):
            number += 1
            recent.append((number, offset))
            if isinstance(raw, LongLine):
                reader.skip("line too long")
                offset += raw.size
            else:
                offset += len(raw)
                try:
                    text = raw.decode("utf-8", "strict" if raw.endswith(b"\n") else "replace")
                except UnicodeDecodeError:
                    reader.skip("not utf-8")
                else:
                    reader.feed(text)
            ready += reader.take()
            if len(ready) >= STREAM_BATCH and reader.session is not None:
                yield Transcript("codex", reader.session, ready)
                ready = []
        counted["lines"] = number
        last = reader.finish()
        if reader.lines and not reader.messages and not last.summaries \
                and not reader.recognised:
            raise DataError(_nothing("codex", last))  # not a rollout, as parse_stream says
        yield Transcript("codex", last.session_id, [*ready, *last.messages], last.summaries,
                         last.ignored)

    ingested = ingest_batches(vault, batches(), path.stem, session, False, strict,
                              fallback_name, tags=tags, progress=progress, streamed=True)
    waiting = reader.waiting_since(recent[0][0]) if recent else None
    at = dict(recent)
    if waiting is None or waiting not in at:
        return ingested, {"pin": end, "line": counted["lines"]}
    return ingested, {"pin": at[waiting], "line": waiting - 1}


class _Texts:
    """A file's blocks of whole lines up to `end`, from its start, as text: each with the
    number of the line before it, its lines' starts put in `starts`. An iterator, not a
    generator: it keeps no block once handed out (a generator would hold the one it
    yielded until asked for the next)."""

    def __init__(self, fh: IO[bytes], end: int, where: str, starts: list[int],
                 progress: Progress) -> None:
        from memvault.storage import streams

        fh.seek(0)
        self.blocks = streams.line_blocks(fh, end, streams.LINE_BLOCK)
        self.where, self.starts = where, starts
        self.progress, self.lines = progress, 0

    def __iter__(self) -> _Texts:
        return self

    @property
    def done(self) -> bool:
        """Whether the block handed out last was the file's last."""
        return self.blocks.done

    def __next__(self) -> tuple[int, str]:
        raw = next(self.blocks)
        self.progress.advance(len(raw))
        self.starts[:] = _line_starts(raw)
        lines = self.lines
        self.lines += raw.count(b"\n")
        text = decode(raw, self.where)
        del raw
        return lines, text.removeprefix("\ufeff") if not lines else text


def _whole_end(fh: IO[bytes], size: int) -> int:
    """The end of the file's last whole line (0: none)."""
    at = size
    while at > 0:
        step = min(at, 1 << 20)
        fh.seek(at - step)
        cut = fh.read(step).rfind(b"\n")
        if cut >= 0:
            return at - step + cut + 1
        at -= step
    return 0


def _line_starts(data: bytes | bytearray) -> list[int]:
    """The offset of each line's start (line n starts at [n - 1])."""
    starts = [0]
    at = data.find(b"\n")
    while at >= 0:
        starts.append(at + 1)
        at = data.find(b"\n", at + 1)
    return starts


def _still(position: dict[str, Any], st: os.stat_result, head: bytes, fh: IO[bytes]) -> bool:
    """Whether the file is the one a position was taken of: the same file (device and
    inode), no shorter, and the same bytes at its start and in the lines read again."""
    end, pin = int(position["end"]), int(position["pin"])
    if (st.st_dev, st.st_ino) != (position["dev"], position["ino"]) or st.st_size < end:
        return False
    if hashlib.sha256(head[:end]).hexdigest() != position["head"]:
        return False
    fh.seek(pin)
    again = fh.read(end - pin)
    return hashlib.sha256(again).hexdigest() == str(position["tail"])


def _position_key(vault: Vault, epoch: int) -> bytes:
    from memvault.crypto.envelope import hkdf

    return hkdf(vault.store.record_key(epoch), "transcript position")


def _position(vault: Vault, key: str) -> dict[str, Any] | None:
    """The position kept for a transcript, None when there is none that opens (an epoch
    retired since: read it whole)."""
    import json

    from memvault.crypto.envelope import AuthError, open_token

    sealed = vault.state().read_to.get(key)
    if not sealed:
        return None
    epoch, _, token = sealed.partition(".")
    try:
        doc = json.loads(open_token(_position_key(vault, int(epoch)), token,
                                    f"read-to\0{key}".encode()))
    except (AuthError, ValueError, MemError):
        return None
    return doc if isinstance(doc, dict) else None


def _keep_position(vault: Vault, key: str, position: dict[str, Any]) -> None:
    import json

    from memvault.crypto.envelope import seal_token

    with vault.transaction() as tx:
        marks = tx.state.read_to
        marks.pop(key, None)  # last written last: the oldest go first
        while len(marks) >= LIVE_KEEP:
            del marks[next(iter(marks))]
        marks[key] = f"{tx.epoch}." + seal_token(
            _position_key(vault, tx.epoch), json.dumps(position).encode(),
            f"read-to\0{key}".encode())
        tx.touch()


def _drop(vault: Vault, key: str) -> bool:
    """Forget a position that no longer holds; whether there was one."""
    with vault.transaction() as tx:
        if tx.state.read_to.pop(key, None) is None:
            return False
        tx.touch()
    return True


def _cursor_parent(path: Path) -> Path | None:
    """The transcript a Cursor subagent's file belongs to: <id>/subagents/<sub>.jsonl
    beside <id>/<id>.jsonl (or the one transcript in that folder)."""
    if path.parent.name != "subagents":
        return None
    folder = path.parent.parent
    named = folder / f"{folder.name}.jsonl"
    if named.is_file():
        return named
    found = [p for p in folder.glob("*.jsonl") if p.is_file()]
    return found[0] if len(found) == 1 else None


def _channel(path: Path) -> str:
    from memvault.config import NAME_RE

    stem = Path(path.name.removesuffix(ZSTD_SUFFIX)).stem
    return f"subagent:{stem}" if NAME_RE.match(stem) else "subagent"


def _as_subagent(messages: list[NewMessage], channel: str) -> list[NewMessage]:
    """A subagent's messages, stored in its parent's session: under its channel, and
    with ids of their own there (a Cursor transcript's ids are its line numbers)."""
    return [m.evolve(channel=channel, message_id=f"{channel}:{m.message_id}"
                     if m.message_id else None) for m in messages]


def _with_cursor_subagents(vault: Vault, path: Path, result: IngestResult, strict: bool,
                           tags: tuple[str, ...] = ()) -> IngestResult:
    """Cursor keeps a transcript's subagents in subagents/ beside it: stored in its
    session, each message under channel "subagent:<its file>"."""
    added, withheld = result.messages_added, result.withheld
    for sub in sorted((path.parent / "subagents").glob("*.jsonl")):
        if _cursor_parent(sub) != path:
            continue
        try:
            done = ingest_file(vault, sub, "cursor", result.session_id, strict=strict,
                               tags=tags)
        except (NotTranscript, DataError):
            continue  # the parent is stored; a damaged subagent's file is not the session
        added += done.messages_added
        withheld += done.withheld
    return replace(result, messages_added=added, withheld=withheld)


def _with_subagents(vault: Vault, path: Path, result: IngestResult, strict: bool,
                    tags: tuple[str, ...] = (), session: str | None = None) -> IngestResult:
    """Claude Code keeps a session's subagent transcripts beside it, in
    <session>/subagents/agent-*.jsonl: their work is the session's, stored with it (each
    message names its subagent in `channel`), in the session its lines name (as a scan,
    which reads the file on its own, stores it), else `session`. The compaction agent's
    file, which only restates the session, is passed over."""
    folder = path.with_suffix("") / "subagents"
    if not folder.is_dir():
        return result
    added, withheld = result.messages_added, result.withheld
    for agent in sorted(folder.glob("agent-*.jsonl")):
        try:
            sub = ingest_text(vault, read_file(agent), agent.stem, "claude-code",
                              session, strict=strict, fallback_name=result.session_id,
                              tags=tags)
        except NotTranscript:
            continue
        added += sub.messages_added
        withheld += sub.withheld
    return replace(result, messages_added=added, withheld=withheld)


def ingest_stream(vault: Vault, stream: IO[bytes], where: str = "stdin",
                  name: str | None = None, fmt: str = "auto", session: str | None = None,
                  dry_run: bool = False, strict: bool = False,
                  tags: tuple[str, ...] = (), progress: Progress = NO_PROGRESS
                  ) -> IngestResult:
    """Ingest a transcript read from a stream (stdin), plain or zstd-compressed: a Codex
    rollout as a stream, unless `strict`, which reads it twice (so whole, at most
    MAX_TRANSCRIPT bytes, like any other transcript)."""
    def counted(n: int) -> bytes:
        data = stream.read(n)
        progress.advance(len(data))
        return data

    progress.start(None, "bytes")
    read = decompressed(counted, where)

    @contextmanager
    def source() -> Iterator[Read]:
        yield read

    return _ingest_source(vault, source, where, name, fmt, session, dry_run, strict, None,
                          again=False, tags=tags, progress=progress)


def _ingest_source(vault: Vault, open_source: Callable[[], AbstractContextManager[Read]],
                   where: str, name: str | None, fmt: str, session: str | None,
                   dry_run: bool, strict: bool, fallback_name: str | None,
                   again: bool, tags: tuple[str, ...] = (),
                   progress: Progress = NO_PROGRESS,
                   channel: str | None = None) -> IngestResult:
    """Read a Codex rollout as a stream, batch by batch; any other transcript whole.
    `open_source` opens the transcript again if `again` (a --strict first pass).
    `channel` goes on every message of a transcript read whole (a subagent's)."""
    from memvault.text.transcripts import detect_stream, parse_stream

    with open_source() as read:
        source = Replay(read)
        stream = fmt == "codex" or (fmt == "auto" and detect_stream(source.head()) == "codex")
        source.rewind()
        if not stream or (strict and not again):
            why = ("--strict reads a transcript from a stream whole" if stream else
                   "only a Codex rollout is read as a stream")
            text = decode(read_all(source.read, where, why), where)
            return ingest_text(vault, text, name, fmt, session, dry_run, strict,
                               fallback_name, tags, progress, channel)

        def prescreen(policy: AdmissionPolicy) -> None:
            # --strict refuses the transcript before anything is stored: a first reading.
            with open_source() as first:
                for batch in parse_stream(read_lines(first)):
                    policy.screen([*batch.messages, *batch.summaries], strict=True)

        return ingest_batches(vault, parse_stream(read_lines(source.read)), name, session,
                              dry_run, strict, fallback_name, prescreen if strict else None,
                              tags=tags, progress=progress, streamed=True)


def ingest_text(vault: Vault, text: str, name: str | None, fmt: str = "auto",
                session: str | None = None, dry_run: bool = False, strict: bool = False,
                fallback_name: str | None = None, tags: tuple[str, ...] = (),
                progress: Progress = NO_PROGRESS, channel: str | None = None
                ) -> IngestResult:
    """Ingest one transcript. Its session is `session`, else the transcript's own id,
    else `fallback_name` (a scan passes the path under the scanned folder), else `name`
    (the file's name). `channel`: set on every message (a subagent's file)."""
    from memvault.text.transcripts import parse

    transcript = parse(text, fmt)
    if channel:
        transcript.messages = _as_subagent(transcript.messages, channel)
    return ingest_batches(vault, iter([transcript]), name, session, dry_run, strict,
                          fallback_name, tags=tags, progress=progress)


def ingest_batches(vault: Vault, batches: Iterator[Transcript], name: str | None,
                   session: str | None = None, dry_run: bool = False, strict: bool = False,
                   fallback_name: str | None = None,
                   prescreen: Callable[[AdmissionPolicy], None] | None = None,
                   store: Store | None = None,
                   later: list[tuple[str, NewMessage, str | None]] | None = None,
                   admission: _Admission | None = None,
                   tags: tuple[str, ...] = (), progress: Progress = NO_PROGRESS,
                   streamed: bool = False) -> IngestResult:
    """Ingest a transcript given whole (one batch) or read as a stream (parse_stream's
    batches: the first names the session, the last has the summaries). Each batch is
    stored as it comes, by add_messages, which stores a message once whatever the batches
    were: a run stopped half-way and run again stores each message once. With `strict`,
    `prescreen` screens the rest of a stream before the first batch is stored. A scan
    passes `store` (into its own transaction), `later`, where the summaries wait to be
    added once that transaction is over, and the `admission` it prepared before taking
    the lock. `tags` go on every message and summary stored (the project the session
    worked in). `progress` (not with a scan's `store`) is told of the messages of each
    write once it is over, and, for a transcript given whole (not `streamed`), of each
    new message screened."""
    if tags:
        batches = (_tagged(batch, tags) for batch in batches)
    transcript = next(batches)
    if session:
        validate_name("session", session)
    chosen = session or transcript.session_id or fallback_name or name
    if not chosen:
        raise UsageError("a transcript without a session id needs a session name",
                         field="session")
    session_id = session if session else session_name(chosen)
    # Each message is stored in the session its line names, where the transcript says:
    # the last turn's session (`chosen`) can change as a live file grows (a resumed
    # session), a line's never does. `--session` puts everything in one.
    said_in = {} if session else transcript.said_in

    def session_of(message: NewMessage) -> str:
        said = said_in.get(message.message_id or "")
        return session_name(said) if said else session_id

    admission = admission or _Admission(AdmissionPolicy(vault.settings), strict,
                                        progress=None if streamed else progress)
    policy, screened = admission.policy, admission.screened
    if strict:  # refuse before anything is touched, not halfway through the write
        policy.screen([*transcript.messages, *transcript.summaries], strict=True)
        if prescreen is not None:
            prescreen(policy)
    admit, probe = admission.admit, admission.probe
    agent = agent_of(transcript.format)

    kept = 0

    def put(session: str, messages: list[NewMessage], admit: Admit, probe: Admit,
            agent: str | None = None) -> Added:
        nonlocal kept
        try:
            if not dry_run:
                admission.prepare(vault, session, messages)
                if admission.none_kept(messages):
                    # Only what admission leaves out (mem's own brief, a hook's context;
                    # private spans): nothing to keep, so no write, no user made.
                    return Added(0, 0, 0, [])
                progress.note("storing")
            done = add_messages(vault, session, messages, admit, dry_run, probe,
                                admission.seen, agent=agent)
        finally:
            admission.clear()
        if done.added or done.updated:  # its write is over: kept
            kept += done.added + done.updated
            progress.keep(done.added + done.updated)
            progress.note(f"{counted(kept, 'message', grouped=True)} stored")
        return done

    store = store or put

    def stored(messages: list[NewMessage], done: Added) -> Added:
        groups: dict[str, list[NewMessage]] = {}
        for m in messages:
            groups.setdefault(session_of(m), []).append(m)
        # A session with nothing to keep opens no write: no lock, no user made.
        for name, group in groups.items():
            step = store(name, group, admit, probe, agent=agent)
            done = Added(done.added + step.added, done.updated + step.updated,
                         done.skipped + step.skipped, done.would_add + step.would_add)
        return done

    def summarised(found: list[NewMessage]) -> list[NewMessage]:
        """Admit summaries and add them (a scan: leave them for `later`)."""
        # A summary the user forgot is not brought back by ingesting its transcript again.
        forgotten = vault.state().forgotten if found else set()
        kept = admit([s for s in found if not (
            s.message_id and vault.message_mark(session_of(s), s.message_id) in forgotten)])
        if not dry_run:
            for summary in kept:
                if later is not None:
                    later.append((session_of(summary), summary, agent))
                else:
                    _add_summary(vault, session_of(summary), summary, agent)
        return kept

    # A stream's summaries are added as each batch is stored, not gathered to its end:
    # a long session's compactions would be held all the while (megabytes a gigabyte).
    each = streamed and later is None and not dry_run
    summaries: list[NewMessage] = []
    added = 0  # summaries added as their batches were stored
    # Ids first (from what the transcript said), so that messages already stored are
    # skipped before the costly admission scan; only new messages are scanned.
    done = stored(with_ids(vault, transcript.messages), Added(0, 0, 0, []))
    # Stored: a stream's first batch is not held while the next ones are read.
    transcript = replace(transcript, messages=[])
    counts, summaries_read = Counter(transcript.ignored), list(transcript.summaries)
    if each:
        added += len(summarised(summaries_read))
        summaries_read = []
    for more in batches:  # a stream's next batches
        if not session:
            said_in.update(more.said_in)
        done = stored(with_ids(vault, more.messages), done)
        counts.update(more.ignored)
        if each:
            added += len(summarised(more.summaries))
        else:
            summaries_read += more.summaries
        if streamed and not session:
            # Its messages are stored: only its summaries' sessions are wanted later (a
            # batch says where each of its own messages was said), so memory holds no
            # entry a message of a long stream.
            for key in more.said_in.keys() - (set() if each else {
                    s.message_id for s in more.summaries}):
                said_in.pop(key, None)
        del more  # nor a batch stored while the next one is read
    transcript = replace(transcript, messages=[], summaries=summaries_read,
                         ignored=dict(counts))
    if not each:
        summaries = summarised(transcript.summaries)
    return IngestResult(
        session_id=session_id, format=transcript.format, messages_added=done.added,
        messages_updated=done.updated, messages_skipped=done.skipped,
        lines_ignored=transcript.skipped,
        withheld=screened.withheld,
        redactions=tuple(Redactions(rule, n, "withheld" if rule in screened.refusing
                                    else "redacted")
                         for rule, n in sorted(screened.counts.items())),
        ignored=tuple(sorted(transcript.ignored.items())),
        dry_run=dry_run, messages=tuple(_preview(m) for m in done.would_add),
        summaries=tuple(_preview(m) for m in summaries) if dry_run else (),
        summaries_added=0 if dry_run else added + len(summaries),
    )


def _tagged(batch: Transcript, tags: tuple[str, ...]) -> Transcript:
    def tag(messages: list[NewMessage]) -> list[NewMessage]:
        return [m.evolve(tags=[*m.tags, *(t for t in tags if t not in m.tags)])
                for m in messages]

    return replace(batch, messages=tag(batch.messages), summaries=tag(batch.summaries))


def _add_summary(vault: Vault, session_id: str, summary: NewMessage,
                 agent: str | None = None) -> None:
    # Dated when the agent wrote it, in the session's past, not at ingest.
    remember.add(vault, _fit(summary.content), "summary", session=session_id,
                 message_id=summary.message_id, created_at=summary.created_at,
                 tags=summary.tags, agent=agent)


Admit = Callable[[list[NewMessage]], list[NewMessage]]
Store = Callable[..., "Added"]  # (session, messages, admit, probe, agent=)


def agent_of(fmt: str) -> str | None:
    """The agent a transcript of this format came from: the format's name, but for
    generic JSON lines (written by anything)."""
    return fmt if fmt in AGENTS else None
Seen = Callable[[str], "LineScan | None"]


class _Admission:
    """A transcript's admission, screened before the user's lock is taken.

    The scan for secrets and personal data is the costly part of an ingest, and a
    redaction rule from the config file may be slow. Screened under the lock, it would
    keep every other write of the user (a hook, an add) waiting, and time them out (exit
    75). So `prepare` reads the session file without the lock, works out which messages
    are new, and screens them; under the lock, `admit` and `probe` take each message's
    result from there (only a message another writer changed meanwhile is screened
    then), and the file read before is used again when it has not changed."""

    def __init__(self, policy: AdmissionPolicy, strict: bool,
                 ahead: Fetched | None = None, progress: Progress | None = None) -> None:
        self.policy, self.strict = policy, strict
        self.progress = progress  # told of each message screened
        self.screened = Screened()  # what was withheld and masked, counted once
        self._results: dict[ScreenKey, Screened] = {}
        # Messages screened already, by the same policy (a scan reads ahead).
        self._clean: set[ScreenKey] = set()
        if ahead is not None:
            self._clean, self._results = ahead.screened()
        self._read: tuple[str, Path, tuple[int, int, int], LineScan] | None = None

    def prepare(self, vault: Vault, session: str, messages: list[NewMessage],
                forgotten: set[str] | None = None) -> None:
        """Screen the messages not stored yet (as far as a read without the lock can
        tell), and hold on to that read for `seen`. `forgotten`: the user's forgotten
        marks, when the caller has read them already (a scan, once for many files)."""
        relpath = session_file(session)
        try:
            validate_name("session", session)
            exists = vault.exists()
            if forgotten is None:
                forgotten = vault.state().forgotten
            # The session's marks tell what is stored; only a message that grew (rare)
            # needs the session itself.
            plan = _plan_marked(vault, session, messages, forgotten, self.probe) \
                if exists else _plan(vault, session, [], messages, forgotten)
            if plan is None:
                path = vault.layout.path(relpath)
                before = _identity(path)
                scan = vault.store.read_scan(relpath)
                if before is not None and _identity(path) == before:
                    self._read = (relpath, path, before, scan)
                plan = _plan(vault, session, scan.records, messages, forgotten)
        except MemError:
            return  # the write itself reads again under the lock and reports it
        new = [*plan.fresh, *plan.grown.values()]
        if self.progress is not None:
            self.progress.start(len(new), "messages")
        for message in new:
            self._result(message)
            if self.progress is not None:
                self.progress.advance()

    def seen(self, relpath: str) -> LineScan | None:
        """The session file as `prepare` read it, if it is unchanged (caller holds the
        lock: every writer of the file changes its size or replaces it)."""
        if self._read is None or self._read[0] != relpath:
            return None
        _, path, identity, scan = self._read
        self._read = None  # its records are the transaction's to change now
        return scan if _identity(path) == identity else None

    def clear(self) -> None:
        self._results.clear()
        self._read = None

    def _result(self, message: NewMessage) -> Screened:
        key = screen_key(message)
        result = self._results.get(key)
        if result is None:
            result = self._results[key] = (
                Screened(kept=[message]) if key in self._clean else
                self.policy.screen([message], self.strict))
        return result

    def _kept(self, batch: list[NewMessage], count: bool) -> list[NewMessage]:
        kept = []
        for message in batch:
            result = self._result(message)
            if count:
                self.screened.withheld += result.withheld
                self.screened.add_counts(result.counts, sorted(result.refusing))
            if result.kept:
                admitted = result.kept[0]
                kept.append(message.evolve(content=admitted.content, name=admitted.name))
        return kept

    def admit(self, batch: list[NewMessage]) -> list[NewMessage]:
        return self._kept(batch, count=True)

    def none_kept(self, batch: list[NewMessage]) -> bool:
        """Whether admission keeps none of `batch` and withholds none either (each left
        out whole: mem's own brief, only private spans), so there is nothing to write."""
        return all(not (r.kept or r.withheld) for r in map(self._result, batch))

    def probe(self, batch: list[NewMessage]) -> list[NewMessage]:
        return self._kept(batch, count=False)  # what admission would keep; uncounted


def _identity(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def add_messages(vault: Vault, session: str, messages: list[NewMessage],
                 admit: Admit | None = None, dry_run: bool = False,
                 probe: Admit | None = None, seen: Seen | None = None,
                 agent: str | None = None) -> Added:
    """Store a transcript's messages in a session: those not stored yet, and those whose
    id is stored with other content (a message the agent was still writing when the
    transcript was read last time: its stored line is replaced).

    A message is already stored when its message_id is (or, without an id, when the
    same role said the same thing at the same time), and never again once forgotten.
    `admit` sees only new and grown messages and may drop some; `probe` (admission
    without its report) tells a grown message from one stored in its admitted form."""
    validate_name("session", session)
    relpath = session_file(session)
    if dry_run:
        state = vault.state()
        existing = vault.store.read_lines(relpath) if vault.exists() else []
        archived = _archived(vault.store, session) if vault.exists() else []
        plan = _plan(vault, session, existing, messages, state.forgotten, archived)
        fresh = admit(plan.fresh) if admit else plan.fresh
        return Added(0, 0, plan.skipped, fresh)
    with vault.transaction() as tx:
        return store_messages(tx, session, messages, admit, probe, seen, agent)


def store_messages(tx: Transaction, session: str, messages: list[NewMessage],
                   admit: Admit | None = None, probe: Admit | None = None,
                   seen: Seen | None = None, agent: str | None = None) -> Added:
    """add_messages inside a transaction the caller holds (a scan stores many sessions
    in one: one state save and one index commit for all of them). `seen` is the session
    file as read before the lock: used when the file is still the same."""
    vault = tx.vault
    relpath = session_file(session)
    # What is stored is told by the session's marks: the new messages are appended, and
    # the session file is neither read nor sealed again (its last turns are read for
    # their context). A message that grew rewrites the file, below.
    marked = _plan_marked(vault, session, messages, tx.state.forgotten, probe or admit)
    if marked is not None:
        return _append(tx, session, marked, admit, agent)
    scan = seen(relpath) if seen else None
    if scan is None:
        scan = tx.store.read_scan(relpath)
    existing = scan.records
    plan = _plan(vault, session, existing, messages, tx.state.forgotten,
                 _archived(tx.store, session))
    fresh = admit(plan.fresh) if admit else plan.fresh
    grown = _admit_grown(existing, plan.grown, admit, probe or admit)
    new = _records(tx, session, fresh, agent)
    updated = _grow(existing, plan.grown, grown, tx.epoch)
    plan.skipped += len(plan.grown) - len(updated)
    turns = [*existing, *new]
    if updated:
        # Lines after the grown one move: the file is rewritten and indexed again.
        locations = tx.rewrite(relpath, turns)
        tx.index(file_entries(turns, locations))
    elif new:
        locations = [*scan.locations(relpath), *tx.append(relpath, new)]
        # The new turns, and the last stored ones, which gain successors as context.
        tx.index(file_entries(turns, locations,
                              range(max(0, len(existing) - CONTEXT_NEIGHBOURS),
                                    len(turns))), created=[r.memory_id for r in new])
    if new or updated:
        tx.state.count("message", len(new))
        tx.touch()
        # Synced with the transaction's end: a scan audits many sessions in one.
        tx.audit("ingest", [r.memory_id for r in [*new, *updated]],
                 [tx.hash_of(r.content_hash) for r in [*new, *updated]], durable=False,
                 session_file=relpath, skipped=plan.skipped, updated=len(updated))
    return Added(len(new), len(updated), plan.skipped, [])


def _records(tx: Transaction, session: str, fresh: list[NewMessage],
             agent: str | None) -> list[Record]:
    vault = tx.vault
    return [Record(
        memory_id=uuid7(), org_id=vault.org, user_id=vault.user, type="message",
        content=m.content, content_hash=content_hash(m.content), category="conversation",
        tags=clean_tags(m.tags), session_id=session, message_id=m.message_id,
        channel=m.channel, role=m.role, name=m.name, agent=agent,
        created_at=m.created_at or "",
        updated_at=m.created_at or "", key_version=tx.epoch,
    ) for m in fresh]


def _append(tx: Transaction, session: str, plan: _Plan, admit: Admit | None,
            agent: str | None) -> Added:
    """Store the new messages of a plan made from the session's marks: appended, with
    their marks, and indexed next to the session's last turns (which gain them as
    context), read from the file's end."""
    relpath = session_file(session)
    fresh = admit(plan.fresh) if admit else plan.fresh
    new = _records(tx, session, fresh, agent)
    if not new:
        return Added(0, 0, plan.skipped, [])
    marks = tx.store.marks(relpath)  # as the plan read them (under this lock)
    tail, tail_at = tx.store.tail_records(relpath, 2 * CONTEXT_NEIGHBOURS)
    locations = tx.append(relpath, new)
    tx.store.note_appended(marks, new, int(locations[0].offset or 0))
    turns = [*tail, *new]
    tx.index(file_entries(turns, [*tail_at, *locations],
                          range(max(0, len(tail) - CONTEXT_NEIGHBOURS), len(turns))),
             created=[r.memory_id for r in new])
    tx.state.count("message", len(new))
    tx.touch()
    tx.audit("ingest", [r.memory_id for r in new],
             [tx.hash_of(r.content_hash) for r in new], durable=False,
             session_file=relpath, skipped=plan.skipped, updated=0)
    return Added(len(new), 0, plan.skipped, [])


def _told(vault: Vault, session: str, m: NewMessage, n: int,
          forgotten: set[str]) -> tuple[str, str] | None:
    """The `n`th message's normalised time and content digest; None for one with nothing
    to keep or that the user forgot (it is skipped)."""
    if not m.content.strip() or (m.message_id and forgotten and
                                 vault.message_mark(session, m.message_id) in forgotten):
        return None
    try:
        stamp = normalise_time(m.created_at) if m.created_at else now_iso()
    except UsageError:
        raise DataError(f"message {m.message_id or n} has an invalid time "
                        f"{m.created_at!r}; nothing was stored") from None
    return stamp, content_hash(m.content)


def _plan_marked(vault: Vault, session: str, messages: list[NewMessage],
                 forgotten: set[str], probe: Admit | None) -> _Plan | None:
    """_plan from the marks of the session's messages (live and archived) instead of the
    messages: proportional to the transcript's messages, not the session's. None when a
    stored message grew (its line is rewritten: the caller reads the session)."""
    store = vault.store
    live = store.marks(session_file(session))
    archived = store.marks(session_file(session, archived=True))
    plan = _Plan()
    seen: set[bytes] = set()
    for n, m in enumerate(messages, start=1):
        if (told := _told(vault, session, m, n, forgotten)) is None:
            plan.skipped += 1
            continue
        stamp, digest = told
        mark = store.message_mark(m.message_id, m.role, digest, stamp)
        held = None if mark in seen else live.kept.get(mark)
        if held is not None and m.message_id and held != store.content_mark(digest):
            # Stored with other content: grown, unless it differs only by what
            # admission masks or cleans (a stored message is its admitted form).
            admitted = probe([m.evolve(created_at=stamp)]) if probe else [m]
            if admitted and store.content_mark(content_hash(admitted[0].content)) != held:
                return None
        if mark in seen or held is not None or mark in archived.kept:
            plan.skipped += 1
            seen.add(mark)
            continue
        seen.add(mark)
        plan.fresh.append(m.evolve(created_at=stamp))
    return plan


@dataclass
class Added:
    """What add_messages did: messages added, grown ones replaced, skipped (stored
    already, forgotten or empty), and what a dry run would add."""

    added: int
    updated: int
    skipped: int
    would_add: list[NewMessage]


@dataclass
class _Plan:
    fresh: list[NewMessage] = field(default_factory=list)
    grown: dict[int, NewMessage] = field(default_factory=dict)  # position in the file → new
    skipped: int = 0


def _archived(store: UserStore, session: str) -> list[Record]:
    """The session's messages that compaction moved to the archive: a transcript read
    again must not bring them back as new."""
    relpath = session_file(session, archived=True)
    return store.read_lines(relpath) if store.layout.path(relpath).exists() else []


def _plan(vault: Vault, session: str, existing: list[Record], messages: list[NewMessage],
          forgotten: set[str], archived: list[Record] | None = None) -> _Plan:
    """Sort a transcript's messages (with their times normalised) into new, grown (an id
    stored with other content) and skipped. An archived message is stored: it is
    skipped, and never grown (its summary was made from what it said)."""
    by_id = {r.message_id: i for i, r in enumerate(existing) if r.message_id}
    seen = {_message_key(r.message_id, r.role, r.content_hash, r.created_at)
            for r in [*existing, *(archived or [])]}
    plan = _Plan()
    for n, m in enumerate(messages, start=1):
        if (told := _told(vault, session, m, n, forgotten)) is None:
            plan.skipped += 1
            continue
        stamp, digest = told
        key = _message_key(m.message_id, m.role, digest, stamp)
        at = by_id.get(m.message_id) if m.message_id else None
        if at is not None and existing[at].content_hash != digest and at not in plan.grown:
            plan.grown[at] = m.evolve(created_at=stamp)
            continue
        if key in seen:
            plan.skipped += 1
            continue
        seen.add(key)
        plan.fresh.append(m.evolve(created_at=stamp))
    return plan


def _admit_grown(existing: list[Record], grown: dict[int, NewMessage],
                 admit: Admit | None, probe: Admit | None) -> list[NewMessage]:
    """The grown messages admitted. A stored message is its masked, cleaned form: one
    that differs from its transcript only by that is not grown, and is neither stored
    again nor counted in the report (`probe` screens without counting)."""
    candidates = list(grown.values())
    if admit is None or probe is None or not candidates:
        return candidates
    stored = {existing[at].message_id: existing[at].content_hash for at in grown}
    changed = {m.message_id for m in probe(candidates)
               if stored.get(m.message_id) != content_hash(m.content)}
    return admit([m for m in candidates if m.message_id in changed]) if changed else []


def _grow(existing: list[Record], grown: dict[int, NewMessage], admitted: list[NewMessage],
          epoch: int) -> list[Record]:
    """Give the stored messages that grew their new content (those admission kept); the
    record keeps its id and first time, so a search hit on it stays valid."""
    kept = {m.message_id: m for m in admitted}
    updated = []
    for at, message in grown.items():
        new = kept.get(message.message_id)
        if new is None:
            continue  # withheld: the stored version stays
        record = existing[at]
        digest = content_hash(new.content)
        if digest == record.content_hash:
            continue  # it differed only by what admission masks or cleans: stored as is
        record.content, record.content_hash = new.content, digest
        record.updated_at = now_iso()
        record.key_version = epoch
        updated.append(record)
    return updated


def _message_key(message_id: str | None, role: str | None, digest: str,
                 created_at: str) -> tuple[str, ...]:
    if message_id:
        return ("id", message_id)
    return ("content", role or "", digest, created_at)


def _fit(text: str) -> str:
    """An agent's compaction summary can be long; keep what fits in one record."""
    raw = text.encode()
    if len(raw) <= MAX_CONTENT:
        return text
    return raw[: MAX_CONTENT - 3].decode(errors="ignore") + "…"


def with_ids(vault: Vault, messages: list[NewMessage]) -> list[NewMessage]:
    """Give each message without an id a stable one, so that ingesting the transcript again
    (or a longer one, or another file of the same session) stores nothing twice and
    nothing less: a keyed hash of who spoke, when, and what was said (SPEC §6). Keyed
    (with the user's metadata key): the id of a redacted message must not let anyone
    without the key test a guess at what redaction removed.

    Its time is then written as mem stores it, once here rather than in each of the
    plans (before and under the lock); a time that is not one is left for the plan to
    report. What the user marked private is hidden from the hash too: the id must not
    let whoever holds the key test a guess at it (a PIN is ten thousand guesses)."""
    from memvault.ops.admission import private_tags
    from memvault.text.private import hide
    from memvault.text.transcripts.base import SAID

    settings = vault.settings
    tags = private_tags(settings.redaction.get("private_tags"), str(settings.config_path))
    out = []
    for m in messages:
        changes: dict[str, str] = {}
        if not m.message_id:
            changes["message_id"] = vault.message_digest(m.role, m.created_at,
                                                         hide(m.content, tags).text)
        elif SAID in m.message_id:
            # Named by its words and where said (the turn, the how-manyth time in it):
            # without its time, which two sources of one conversation need not agree on.
            head, _, where = m.message_id.partition(SAID)
            digest = vault.message_digest(m.role, None, hide(m.content, tags).text)
            changes["message_id"] = f"{head}{digest}#{where}"
        if m.created_at:
            with suppress(UsageError):  # not a time: the plan says so
                changes["created_at"] = normalise_time(m.created_at)
        out.append(m.evolve(**changes))
    return out


def _preview(message: NewMessage) -> Preview:
    return Preview(message.role, message.content, message.message_id, message.created_at)


def scan_dir(vault: Vault, directory: Path, fmt: str = "auto", strict: bool = False,
             progress: Progress = NO_PROGRESS) -> ScanResult:
    """Ingest every transcript under `directory` that is new or has grown since last time.

    For a periodic job: Claude Code never fires SessionEnd for a session suspended with
    Ctrl-C, and deletes old transcripts after a month. What was seen is kept in the
    user's state as keyed hashes of the paths (paths name projects; never in clear).

    Small transcripts are read, parsed and screened outside the user's lock (in a
    large scan, by a helper process, ahead: readahead.py) and stored many to a
    transaction (one state save, one index commit), so a month of sessions costs about
    what their messages cost; a large one (a Codex rollout) is read on its own, as a
    stream.

    `progress` counts the transcripts to ingest; one is kept once its scan mark is
    saved, after everything it holds (so a scan stopped anywhere and run again ingests
    what it had not kept, and stores nothing twice).
    """
    from memvault.ops.readahead import Wanted, reads
    from memvault.text.transcripts import detect_path

    if not directory.is_dir() and not (directory.is_file() and detect_path(directory)):
        raise NotFound(f"no directory at {directory}")
    files, stores = _listing(directory)
    seen = vault.state().scan_marks
    scan = _Scan(AdmissionPolicy(vault.settings), progress)
    large: list[_Parsed] = []
    small: list[_Parsed] = []
    unchanged = 0
    for path in [*stores, *files]:
        store = path in stores
        try:
            mark = _store_mark(path) if store else _file_mark(path)
        except OSError as exc:  # gone since the listing, or unreadable
            scan.passed.append(ScanError(str(path), exc.strerror or "cannot read",
                                         NotFound.exit_code))
            continue
        key = vault.path_mark(os.fsencode(path.resolve()))
        if seen.get(key) == mark:
            unchanged += 1
            continue
        # Two notes.jsonl in different folders are different sessions; a Cursor
        # subagent's file is its parent's session.
        parent = None if store else _cursor_parent(path)
        item = _Parsed(path, key, mark, _fallback(parent or path, directory),
                       new=key not in seen, channel=_channel(path) if parent else None)
        big = store or mark[0] > SCAN_BATCH_FILE or path.suffix == ZSTD_SUFFIX
        (large if big else small).append(item)
    progress.start(len(large) + len(small), "transcripts")
    for item in large:
        # A large file's own progress (bytes read, messages stored) shows beside the
        # scan's count of transcripts, which moves once the file is done.
        scan.one(vault, item, partial(ingest_file, vault, item.path, fmt, strict=strict,
                                      fallback_name=item.fallback,
                                      progress=_Within(progress, item.path.name)))
    # The small ones are read (and those not seen before screened) ahead of storing.
    batch: list[_Parsed] = []
    messages = size = 0  # the batch's
    wanted = [Wanted(i.path, i.mark[0], i.new) for i in small]
    for item, got in zip(small, reads(wanted, fmt, scan.policy), strict=True):
        item.transcript, item.error, item.read = got.transcript, got.error, got
        batch.append(item)
        messages += len(item.transcript.messages) if item.transcript else 0
        size += item.mark[0]
        if messages >= SCAN_BATCH or size >= SCAN_BATCH_BYTES:
            scan.store(vault, batch, strict)
            batch, messages, size = [], 0, 0
    scan.store(vault, batch, strict)
    return ScanResult(len(files) + len(stores), scan.ingested, scan.added, scan.withheld,
                      tuple(scan.errors), tuple(scan.passed), unchanged)


def scan_places(vault: Vault, fmt: str = "auto", strict: bool = False,
                progress: Progress = NO_PROGRESS, home: Path | None = None,
                env: Mapping[str, str] | None = None) -> tuple[ScanResult, list[Path]]:
    """`mem ingest --scan` without a folder: scan_dir over each place an agent keeps its
    sessions in on this machine (the formats' `places`; only `fmt`'s unless auto), as
    one result, and the places scanned."""
    from memvault.text.transcripts import places

    found = [place for known, place in places(home or Path.home(), env or os.environ)
             if fmt in ("auto", known.name)]
    results = [scan_dir(vault, place, fmt, strict, progress) for place in found]
    total = ScanResult(
        sum(r.files_scanned for r in results), sum(r.files_ingested for r in results),
        sum(r.messages_added for r in results), sum(r.withheld for r in results),
        tuple(e for r in results for e in r.errors), tuple(e for r in results for e in r.passed),
        sum(r.files_unchanged for r in results))
    return total, found


def _listing(root: Path) -> tuple[list[Path], list[Path]]:
    """The transcript files under `root`, and the agents' stores there that are read
    whole (a database, a folder of an agent's records: nothing in it is a file of its
    own). A mem vault under it is passed by."""
    from memvault.storage.layout import is_vault
    from memvault.text.transcripts import detect_path

    if root.is_file():
        return [], [root]
    files: list[Path] = []
    stores: list[Path] = []
    for folder, dirs, names in os.walk(root):
        here = Path(folder)
        if is_vault(here):
            dirs[:] = []  # a mem vault's files are mem's own, sealed: no transcript
            continue
        if detect_path(here):
            stores.append(here)
            dirs[:] = []
            continue
        dirs.sort()
        for name in sorted(names):
            path = here / name
            if _scanned(path) and path.is_file():
                files.append(path)
            elif name.endswith(STORE_SUFFIXES) and path.is_file() and detect_path(path):
                stores.append(path)
    return files, stores


def _file_mark(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_size, st.st_mtime_ns]


def _store_mark(path: Path) -> list[int]:
    """A store's size and last change: a database with its write-ahead log, a folder
    with every file in it."""
    if path.is_file():
        files = [path, *(p for p in (path.with_name(path.name + "-wal"),) if p.exists())]
    else:
        files = [p for p in path.rglob("*") if p.is_file()]
    stats = [p.stat() for p in files]
    return [sum(s.st_size for s in stats) + len(stats),
            max((s.st_mtime_ns for s in stats), default=0)]


def _fallback(path: Path, root: Path) -> str:
    """A file's session name when it names none: its path under the scanned folder
    (a Cursor transcript's: its agent id, as its chat store and a hook name it)."""
    from memvault.text.transcripts.cursor import session_of

    if (agent := session_of(path)) is not None:
        return agent
    relative = path.relative_to(root) if path != root else Path(root.name)
    if path.suffix == ZSTD_SUFFIX:
        relative = relative.with_suffix("")
    return str(relative.with_suffix("")) if relative.suffix else str(relative)


# A scan stores small transcripts together, up to this many messages or bytes of
# transcript a transaction (other writers wait for the lock while a batch is stored,
# and memory stays bounded whatever the messages hold); a file larger than
# SCAN_BATCH_FILE bytes is ingested on its own.
SCAN_BATCH = 20_000
SCAN_BATCH_BYTES = 32 << 20
SCAN_BATCH_FILE = 8 << 20


@dataclass
class _Parsed:
    """A transcript a scan found: where it is, its scan mark, and what it holds."""

    path: Path
    key: str
    mark: list[int]
    fallback: str  # its session name when it names none: its path under the folder
    new: bool = True  # not seen by a scan before
    channel: str | None = None  # a subagent's file: set on its messages
    transcript: Transcript | None = None
    error: MemError | None = None
    read: Fetched | None = None  # as read ahead: its messages screened perhaps


@dataclass
class _Scan:
    policy: AdmissionPolicy  # one for the whole scan: its rules are compiled once
    progress: Progress = NO_PROGRESS
    ingested: int = 0
    added: int = 0
    withheld: int = 0
    errors: list[ScanError] = field(default_factory=list)
    passed: list[ScanError] = field(default_factory=list)

    def failed(self, item: _Parsed, exc: MemError) -> bool:
        """Report a file that was not stored; whether its mark is to be kept."""
        if isinstance(exc, NotTranscript | NotFound):
            # Another program's file, or one that cannot be read: reported, passed over.
            self.passed.append(ScanError(str(item.path), exc.message, exc.exit_code))
            return isinstance(exc, NotTranscript)  # looked at again when it changes
        if isinstance(exc, DataError | Refused):
            # A transcript that is corrupt, or refused whole (strict): the scan goes on
            # with the rest and fails at the end; the file is retried when it changes.
            self.errors.append(ScanError(str(item.path), exc.message, exc.exit_code))
            return True
        raise exc

    def counted(self, result: IngestResult) -> None:
        self.ingested += 1
        self.added += result.messages_added
        self.withheld += result.withheld

    def one(self, vault: Vault, item: _Parsed, ingest: Callable[[], IngestResult]) -> None:
        try:
            self.counted(ingest())
        except MemError as exc:
            if not self.failed(item, exc):
                self._done(1)
                return
        with vault.transaction() as tx:
            tx.state.scan_marks[item.key] = item.mark
            tx.touch()
        self._done(1)

    def store(self, vault: Vault, batch: list[_Parsed], strict: bool) -> None:
        """Store parsed transcripts in one transaction; their summaries after it (a
        summary is added by its own write), and only then the marks of the transcripts
        that had some: a scan stopped before them reads those transcripts again (their
        messages and summaries are stored once whatever the runs)."""
        if not batch:
            return
        summaries: list[tuple[str, NewMessage, str | None]] = []
        waiting: list[_Parsed] = []  # stored, with summaries still to add
        # Screened before the lock (see _Admission), under one policy, with the state
        # read once for the batch (the lock checks again what changed since).
        admissions: dict[int, _Admission] = {}
        try:
            forgotten: set[str] | None = vault.state().forgotten
        except MemError:
            forgotten = None  # each prepare finds out; the write reports it
        for n, item in enumerate(batch):
            if item.transcript is not None and item.channel and \
                    item.transcript.format == "cursor":
                item.transcript.messages = _as_subagent(item.transcript.messages,
                                                        item.channel)
            if item.transcript is not None:
                admission = admissions[n] = _Admission(self.policy, strict, item.read)
                chosen = item.transcript.session_id or item.fallback or item.path.stem
                try:
                    # The session file read here is used again under the lock when
                    # unchanged: memory stays within twice the batch's transcripts.
                    # Ids and times given once: the store below finds them given.
                    item.transcript.messages = with_ids(vault, item.transcript.messages)
                    admission.prepare(vault, session_name(chosen), item.transcript.messages,
                                      forgotten)
                except MemError as exc:
                    item.error = exc
        with vault.transaction() as tx:
            for n, item in enumerate(batch):
                before = len(summaries)
                if item.transcript is not None and item.error is None:
                    try:
                        self.counted(ingest_batches(
                            vault, iter([item.transcript]), item.path.stem, None, False,
                            strict, item.fallback,
                            store=partial(store_messages, tx, seen=admissions[n].seen),
                            later=summaries, admission=admissions[n]))
                    except MemError as exc:
                        item.error = exc
                if len(summaries) > before and item.error is None:
                    waiting.append(item)
                elif item.error is None or self.failed(item, item.error):
                    tx.state.scan_marks[item.key] = item.mark
                    tx.touch()
        self._done(len(batch) - len(waiting))
        for session_id, summary, agent in summaries:
            _add_summary(vault, session_id, summary, agent)
        if waiting:
            with vault.transaction() as tx:
                for item in waiting:
                    tx.state.scan_marks[item.key] = item.mark
                tx.touch()
            self._done(len(waiting))

    def _done(self, n: int) -> None:
        self.progress.advance(n)
        self.progress.keep(n)


class _Within:
    """The progress of one large transcript within a scan's: the scan counts transcripts;
    what the file's ingest counts (bytes read, messages stored for good) is told as the
    note beside the scan's bar, so that it moves while a file of gigabytes is read."""

    def __init__(self, outer: Progress, name: str) -> None:
        self.outer, self.name = outer, name
        self.total: int | None = None
        self.unit = ""
        self.done = self.kept = 0

    def start(self, total: int | None, unit: str) -> None:
        self.total, self.unit, self.done = total, unit, 0
        self._say()

    def advance(self, n: int = 1) -> None:
        self.done += n
        self._say()

    def keep(self, n: int = 1) -> None:
        self.kept += n
        self._say()

    def note(self, label: str) -> None:
        pass  # the file's own words ("storing"): the counts say more here

    def _say(self) -> None:
        if self.unit == "bytes":
            read = (f"{min(100, self.done * 100 // self.total)}% read" if self.total
                    else f"{self.done >> 20} MiB read")
        else:
            read = f"{self.done:,} of {self.total:,} {self.unit}" if self.total is not None \
                else counted(self.done, self.unit.removesuffix("s"), grouped=True)
        stored = f", {counted(self.kept, 'message', grouped=True)} stored" if self.kept else ""
        self.outer.note(f"{self.name}: {read}{stored}")


def _scanned(path: Path) -> bool:
    """A transcript's name: *.jsonl or *.json, or either compressed (*.jsonl.zst: Codex
    recompresses idle rollouts, in sessions/ and archived_sessions/). A compressed file
    beside its plain one (Codex writes the one, then removes the other) is left out."""
    if path.name.endswith(AIDER_HISTORY):
        return True
    if path.suffix != ZSTD_SUFFIX:
        return path.suffix in SCAN_SUFFIXES
    plain = path.with_suffix("")
    return plain.suffix in SCAN_SUFFIXES and not plain.exists()



