"""Transcript parsers: an agent's session file in, messages out (SPEC §6, `mem ingest`).

Pure functions over the text of one file: no I/O, no vault. Each agent's file is read
the way the agent reads it back, so that what is stored is the conversation the user
saw: Claude Code's rewound branches are dropped, Codex's injected context is not taken
for the user's words, a Gemini rewind removes what it rewound. Tool calls and results
are kept as short lines, so that what the agent did stays searchable without filling
the vault with file dumps.

Agents' files are read leniently: they are written by programs whose formats change
without notice, and often while mem reads them. A line that yields no message is never
dropped silently: it is counted in `Transcript.ignored` under a short reason ("not
json", "torn last line", "abandoned branch", "harness text", "thinking", "meta", ...),
and `Transcript.skipped` is their total. The last line of a file being written may be
torn (no newline yet, not valid JSON): it is ignored as "torn last line", and read once
it is whole. Message ids come from the file itself (uuids, API message ids, record ids,
line numbers of append-only files), never from what was read so far: parsing a prefix
of a file and then the whole file gives the same message the same id (its content may
have grown, when later lines of one API message were merged in). The exception is a
conversation kept in two sources (Cursor's transcript and chat store): its messages are
named by their words and where said (the user's turn, the how-manyth time in it:
cursor.Said), and a read from the middle of a transcript is given that small state.

The generic `jsonl` format is read strictly, since a person or a script wrote it: one
bad line refuses the whole file, naming the line.

A session with nothing to keep (an agent's session opened and quit: its metadata, the
harness's own text, the context a hook added; or an empty file) is no error: it parses
to a Transcript without messages. A file that yields no message and is not recognisably
of the format asked for (a Codex rollout read as Claude Code's) is: DataError.


Each agent is read by its own module (claude_code, codex, gemini, opencode, cursor, copilot,
qwen, aider, cline, pi, droid, goose, crush, amp; generic for jsonl), each with its FORMAT: a
name, a cheap sniff, a reader and the places its sessions live. REGISTRY lists them in
probe order. stores.py is how every agent's SQLite store is read.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

from memvault.errors import DataError, NotTranscript, UsageError
from memvault.model.records import NewMessage
from memvault.text.transcripts import (
    aider,
    amp,
    claude_code,
    cline,
    codex,
    copilot,
    crush,
    cursor,
    droid,
    gemini,
    generic,
    goose,
    opencode,
    pi,
    qwen,
)
from memvault.text.transcripts.base import (
    SNIFF_LINES,
    TOOL_CALL,
    Format,
    Transcript,
    _document,
    _json,
    _lines,
    _nothing,
    _object,
    _scrub,
    _unicode,
)
from memvault.text.transcripts.codex import CodexReader
from memvault.text.transcripts.gemini import (
    _gemini,
    _gemini_document,
    _refuse_gemini_log,
)
from memvault.text.transcripts.generic import JSONL_SHAPE, _jsonl
from memvault.text.transcripts.stores import is_sqlite

__all__ = ["BY_NAME", "FORMATS", "MAX_LINE", "REGISTRY", "STREAM_BATCH", "TOOL_CALL",
           "CodexReader", "Format", "LongLine", "Transcript", "detect", "detect_path",
           "detect_stream", "parse", "parse_stream", "places", "read_path"]

# Every format, in the order detection probes them: a format whose lines another's probe
# would also take goes before it (Qwen Code's lines have Claude Code's uuid links, a Pi
# session line has the fields of an older Codex rollout's first line).
REGISTRY: tuple[Format, ...] = (
    codex.FORMAT, qwen.FORMAT, claude_code.FORMAT, gemini.FORMAT, copilot.FORMAT,
    pi.FORMAT, droid.FORMAT, cursor.FORMAT, opencode.FORMAT, goose.FORMAT, crush.FORMAT,
    amp.FORMAT, cline.FORMAT, aider.FORMAT, generic.FORMAT)
BY_NAME = {fmt.name: fmt for fmt in REGISTRY}
FORMATS = tuple(BY_NAME)
# Reading a stream: the longest line read whole (a longer one, a tool's output of tens of
# MB, is skipped and counted), and how many messages a batch holds.
MAX_LINE = 16 << 20
STREAM_BATCH = 5000


def detect(text: str) -> str:
    """The transcript's format, from its first lines (or its shape, for one JSON document)."""
    return _sniff(text.removeprefix("\ufeff"))[0]


def parse(text: str, fmt: str = "auto") -> Transcript:
    """Parse one transcript; DataError (one line) when it is malformed, or yields no
    message and is not of the format `fmt`; NotTranscript when it is a file of an
    agent's that is not a conversation to store. A session with nothing to keep (and an
    empty file) is a Transcript without messages."""
    text = text.removeprefix("\ufeff")
    doc: dict[str, Any] | list[Any] | None = None
    if fmt != "auto" and fmt not in FORMATS:
        raise UsageError(f"unknown transcript format {fmt!r}: choose auto, {', '.join(FORMATS)}")
    if not text.strip():
        return Transcript(fmt, None)  # nothing written yet: nothing to keep
    if fmt == "auto":
        fmt, doc = _sniff(text)
    if fmt == "jsonl":
        return _jsonl(text)
    if fmt == "gemini":
        transcript = _gemini(text, doc if doc is not None else _document(text))
    else:
        reader = BY_NAME[fmt].parse
        if reader is None:
            raise DataError(f"{BY_NAME[fmt].label} keeps its sessions in a database or a "
                            "folder, not in one file's text: give mem ingest its path")
        transcript = reader(text)
    if not transcript.messages and not transcript.summaries and not _recognised(text, fmt):
        raise DataError(_nothing(fmt, transcript))  # not this format: say what was read
    return _scrub(transcript)


def _recognised(text: str, fmt: str) -> bool:
    """Whether a text that yielded no message is of the format `fmt` all the same (a
    session with nothing to keep), as the format's detection tells."""
    try:
        return _sniff(text)[0] == fmt
    except NotTranscript:
        return False


def detect_path(path: Path) -> Format | None:
    """The format whose store `path` is (a database, a folder of its sessions), if any:
    such a store is read by its format's `read`, not as one file's text."""
    for fmt in REGISTRY:
        if fmt.read is not None and fmt.sniff_path is not None and fmt.sniff_path(path):
            return fmt
    return None


def read_path(path: Path, fmt: str = "auto") -> Transcript | None:
    """Read a store that is no single text file (a database, a folder): its Transcript,
    or None when `path` is none (read it as a file's text: parse). The store is read,
    never written or locked."""
    if not (path.is_dir() or path.is_file()):
        return None  # a pipe or a device is never opened here (it may block): refused later
    found = detect_path(path) if fmt == "auto" else BY_NAME.get(fmt)
    if found is None or found.read is None:
        return None
    if fmt != "auto" and not (found.sniff_path and found.sniff_path(path)):
        if path.is_file() and (found.parse is None or is_sqlite(path)):
            return _scrub(found.read(path))  # its database, damaged: the reader says how
        return None  # a file of the format's, read as text
    return _scrub(found.read(path))


def places(home: Path, env: Mapping[str, str]) -> list[tuple[Format, Path]]:
    """Where each agent keeps its sessions on this machine, those that are there."""
    return [(fmt, place) for fmt in REGISTRY for place in fmt.places(home, env)
            if place.exists()]


# --- streaming (Codex rollouts reach gigabytes) ----------------------------------------------

@dataclass(frozen=True)
class LongLine:
    """A line of a stream longer than MAX_LINE bytes, which the reader skipped instead of
    holding it in memory: counted as "line too long", never parsed."""

    size: int


def detect_stream(lines: Iterable[str]) -> str | None:
    """"codex" when the first lines of a file show a Codex rollout (the format read as a
    stream: see parse_stream), else None: the whole text is needed (detect, parse).

    Takes the lines lazily, up to the first that tells (at most SNIFF_LINES non-blank
    ones), and agrees with detect(): a file whose first line opens a JSON document spread
    over several lines is left to detect()."""
    seen = 0
    for line in lines:
        text = line.removeprefix("\ufeff").strip() if not seen else line.strip()
        if not text:
            continue
        seen += 1
        obj = _object(text)
        if obj is None:
            if seen == 1 and text.startswith(("{", "[")) and _json(text) is None:
                return None  # one JSON document over several lines (Gemini's session file)
        elif (fmt := _sniff_line(obj)) is not None:
            return "codex" if fmt == "codex" and not _gemini_document(obj) else None
        if seen >= SNIFF_LINES:
            return None
    return None


def parse_stream(lines: Iterable[bytes | LongLine],
                 batch: int | None = None) -> Iterator[Transcript]:
    """A Codex rollout parsed as it is read, in Transcripts of at most `batch` (default
    STREAM_BATCH) messages in file order; the last one (perhaps without messages) has the
    summaries and the counts of the lines ignored, the others none. Every message has its
    final id: none is yielded before the session's id is known (in the first lines).

    `lines` are the lines of the file as read (UTF-8 bytes, each with its newline but
    perhaps the last), a LongLine for one the reader skipped. Memory holds one line and one
    batch, whatever the size of the file. A line that is not UTF-8 is ignored as "not
    utf-8" (the stream has been read and stored from already: the file is not refused).
    DataError at the end when the file held no message and no line of a rollout, like
    parse(); a rollout with nothing to keep (or no line) ends in a Transcript without
    messages."""
    batch = batch or STREAM_BATCH
    reader = CodexReader()
    ready: list[NewMessage] = []
    for raw in lines:
        if isinstance(raw, LongLine):
            reader.skip("line too long")
            continue
        try:
            # A torn last line may end inside a character: it is torn, not foreign.
            line = raw.decode("utf-8", "strict" if raw.endswith(b"\n") else "replace")
        except UnicodeDecodeError:
            reader.skip("not utf-8")
            continue
        del raw  # a long line is held once, not twice
        reader.feed(line)
        del line
        ready += reader.take()
        while len(ready) >= batch:
            session = _unicode(reader.session) if reader.session is not None else None
            yield Transcript("codex", session, ready[:batch])
            ready = ready[batch:]
    last = reader.finish()
    if reader.lines and not reader.messages and not last.summaries and not reader.recognised:
        raise DataError(_nothing("codex", last))
    yield Transcript("codex", last.session_id, [*ready, *last.messages], last.summaries,
                     last.ignored)


# --- detection -----------------------------------------------------------------------------

def _sniff(text: str) -> tuple[str, dict[str, Any] | list[Any] | None]:
    if not text.strip():
        raise DataError("the transcript is empty")
    doc = _document(text)
    if doc is not None:
        _refuse_gemini_log(doc)
        if _gemini_document(doc):
            return "gemini", doc
    for known in REGISTRY:  # the formats that are not JSON lines, by their start or shape
        if known.sniff_text is not None and known.sniff_text(text):
            return known.name, None
    first: dict[str, Any] | None = None
    for _, line in islice(_lines(text), SNIFF_LINES):
        obj = _object(line)
        if obj is None:
            continue
        first = obj if first is None else first
        fmt = _sniff_line(obj)
        if fmt:
            return fmt, None
    if first is not None and first.keys() & JSONL_SHAPE:
        return "jsonl", None  # meant as generic JSON lines: the format says what is wrong
    # Another program's JSON (settings, a prompt history): a scan passes over it.
    raise NotTranscript("not a transcript mem can read: expected an agent's session file "
                        "or generic JSON lines", hint="ingest-formats")


def _sniff_line(obj: dict[str, Any]) -> str | None:
    """The format one JSON line is of, probing the registry in order (the least
    particular probe, the bare first line of an older Codex rollout, last)."""
    for fmt in REGISTRY:
        if fmt.sniff_line is not None and fmt.sniff_line(obj):
            return fmt.name
    return "codex" if codex.sniff_bare(obj) else None
