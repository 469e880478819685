"""Transcripts read, parsed and screened ahead of a scan, in a helper process.

A scan stores what it finds batch after batch under the user's lock, on one core:
sealing, writing, indexing. Reading a transcript, parsing it and screening its
messages for secrets and personal data need neither the lock nor a key, and cost about
a third of that again; for a large scan one helper process does that on another core,
up to a batch ahead. The helper holds no key and writes nothing: it is handed paths and
the redaction policy, and returns what `read` returns, as JSON (data only: nothing it
sends is unpickled, and each field is checked on the way in). It is started isolated,
so nothing in the folder scanned, on PYTHONPATH, or in the user's site is imported by
it; an answer that is malformed, oversize, cut off or late ends it, and the scan reads
the rest itself.

A small scan (or one where no helper can be started) reads in its own process, with the
same function: the result is the same either way.
"""

from __future__ import annotations

import contextlib
import gc
import os
import queue
import subprocess  # noqa: S404 - this Python itself, an argv list, never a shell
import sys
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, BinaryIO

from memvault.errors import (
    ConfigError,
    DataError,
    MemError,
    NotFound,
    NotTranscript,
    Refused,
    UsageError,
)
from memvault.model.records import NewMessage
from memvault.ops.admission import AdmissionPolicy, Screened, ScreenKey, screen_key

if TYPE_CHECKING:
    from memvault.text.transcripts import Transcript

# A helper is worth starting (about a quarter of a second, which the scan waits for its
# first answer) from this many files and bytes of transcripts on: below, their reading
# costs less than that. It runs at most AHEAD_FILES and AHEAD_BYTES ahead (memory stays
# bounded).
HELPER_FROM_FILES = 64
HELPER_FROM_BYTES = 8 << 20
AHEAD_FILES = 4096
AHEAD_BYTES = 16 << 20


@dataclass
class Fetched:
    """One transcript as read: parsed (or the error that stopped it), and, when it was
    screened, what screening found, by each message's position: `clean`, those admitted
    as they are (most, and sent back as their positions only); `found`, the others'
    outcomes. A message in neither (empty, or a tag screening refuses) is screened when
    stored."""

    transcript: Transcript | None = None
    error: MemError | None = None
    clean: frozenset[int] = frozenset()
    found: dict[int, Screened] = field(default_factory=dict)

    def screened(self) -> tuple[set[ScreenKey], dict[ScreenKey, Screened]]:
        """What screening found, by `screen_key`."""
        messages = self.transcript.messages if self.transcript else []
        return ({screen_key(messages[i]) for i in self.clean},
                {screen_key(messages[i]): outcome for i, outcome in self.found.items()})


@dataclass(frozen=True)
class Wanted:
    """A file to read; `screen` when its messages are all likely new (a file not seen
    before): screening a grown file's old messages again would be wasted."""

    path: Path
    size: int
    screen: bool


def read(path: Path, fmt: str, policy: AdmissionPolicy | None) -> Fetched:
    """Read and parse one transcript; with a policy, screen its messages too."""
    from memvault.storage.streams import read_file
    from memvault.text.transcripts import parse

    try:
        transcript = parse(read_file(path), fmt)
    except MemError as exc:
        return Fetched(error=exc)
    if policy is None:
        return Fetched(transcript)
    got = Fetched(transcript)
    clean = set()
    for i, message in enumerate(transcript.messages):
        if not message.content.strip():
            continue  # never stored, never screened
        try:
            outcome = policy.screen([message])
        except MemError:
            continue  # (a tag with a control character) the write screens it and says so
        if len(outcome.kept) == 1 and outcome.kept[0] is message and not (
                outcome.withheld or outcome.counts or outcome.refusing):
            clean.add(i)
        else:
            got.found[i] = outcome
    got.clean = frozenset(clean)
    return got


def reads(wanted: list[Wanted], fmt: str, policy: AdmissionPolicy) -> Iterator[Fetched]:
    """What `read` returns for each file, in order: from a helper process when there is
    enough to read, else read here. A helper that cannot start, or dies, leaves the rest
    to be read here."""
    helper = None
    if len(wanted) >= HELPER_FROM_FILES and sum(w.size for w in wanted) >= HELPER_FROM_BYTES:
        # (TypeError: a redaction setting JSON cannot carry; read here then.)
        with contextlib.suppress(OSError, TypeError, _HelperGone):
            helper = _Helper(policy, fmt)
    if helper is None:
        yield from _here(wanted, fmt, policy)
        return
    try:
        yield from _ahead(helper, wanted, fmt, policy)
    finally:
        helper.close()


def _here(wanted: Iterable[Wanted], fmt: str, policy: AdmissionPolicy) -> Iterator[Fetched]:
    for w in wanted:
        yield read(w.path, fmt, policy if w.screen else None)


def _ahead(helper: _Helper, wanted: list[Wanted], fmt: str, policy: AdmissionPolicy
           ) -> Iterator[Fetched]:
    """Ask the helper for files up to AHEAD_FILES and AHEAD_BYTES ahead of the caller."""
    asked, ahead, done = 0, 0, 0
    try:
        while done < len(wanted):
            while asked < len(wanted) and asked - done < AHEAD_FILES and (
                    asked == done or ahead + wanted[asked].size <= AHEAD_BYTES):
                helper.ask(wanted[asked])
                asked, ahead = asked + 1, ahead + wanted[asked].size
            got = helper.answer()
            ahead -= wanted[done].size
            done += 1
            yield got
    except _HelperGone:
        helper.close()  # at once: it is of no more use
        yield from _here(wanted[done:], fmt, policy)


class _HelperGone(Exception):
    pass


# The helper's start: an isolated interpreter (-I: no current folder, PYTHONPATH, user
# site or PYTHON* variable on its path, so nothing in the folder being scanned is
# imported), with mem's own package folder added last; it ignores Ctrl-C (the scan's
# to handle) and serves until its input ends.
_BOOT = ("import sys; sys.path.append(sys.argv[1]); import signal; "
         "signal.signal(signal.SIGINT, signal.SIG_IGN); "
         "from memvault.ops.readahead import serve; serve(sys.stdin.buffer, sys.stdout.buffer)")
_HEAD = 4  # a frame: its length in 4 bytes, big-endian, then that much JSON
_CHUNK = 1 << 20
# Bounds: an answer is at most this many times its file's size, and this much more
# (JSON escapes, a masked copy of a message beside the original); a request is small.
_ANSWER_PER_BYTE = 8
_ANSWER_SLACK = 16 << 20
_REQUEST_MAX = 1 << 20
_SETUP_MAX = 64 << 20
# How long the scan waits for an answer before it reads the rest itself: a start, and
# time for the file's size at a rate far below any helper's (a false alarm costs only
# the helper's help).
ANSWER_WAIT = 5.0
ANSWER_RATE = 4 << 20  # bytes a second


class _Helper:
    """The helper process, spoken to in frames of JSON (data only, every length bounded:
    nothing it sends is ever unpickled or trusted in shape). A thread drains its answers
    as they come, so the helper never waits on a full pipe and the scan asks ahead
    without blocking. Anything amiss (a malformed or oversize frame, an answer cut off,
    silence past its wait) ends the helper: the rest is read here."""

    def __init__(self, policy: AdmissionPolicy, fmt: str) -> None:
        import collections

        from memvault.process import minimal_env

        setup = _encode(["mem-readahead-1", *policy.wire(), fmt])  # before anything starts
        root = str(Path(__file__).resolve().parents[2])  # the folder holding memvault
        self.proc = subprocess.Popen(  # noqa: S603 - this Python and our own code
            [sys.executable, "-I", "-c", _BOOT, root], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True,
            # It needs nothing of mem's environment: MEM_MASTER_KEY, for one, is not its.
            env=minimal_env())
        self.answers: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self.caps: collections.deque[int] = collections.deque()  # per answer awaited
        self.waits: collections.deque[float] = collections.deque()
        self.failed = False
        threading.Thread(target=self._drain, daemon=True).start()
        try:
            self._send(setup)
        except _HelperGone:
            self.close()
            raise

    def ask(self, wanted: Wanted) -> None:
        size = max(wanted.size, 0)
        self.caps.append(size * _ANSWER_PER_BYTE + _ANSWER_SLACK)
        self.waits.append(ANSWER_WAIT + size / ANSWER_RATE)
        self._send(_encode([_path_out(wanted.path), wanted.screen]))

    def answer(self) -> Fetched:
        wait = self.waits.popleft()
        try:
            blob = self.answers.get(timeout=wait)
        except queue.Empty:
            blob = None  # silent: the scan does not wait on it any longer
        if blob is None:
            self.failed = True
            raise _HelperGone
        try:
            return _fetched(_decode(blob))
        except (ValueError, TypeError, KeyError, IndexError):
            self.failed = True
            raise _HelperGone from None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.stdin.close()  # type: ignore[union-attr]
        if self.failed:
            self.proc.kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def _send(self, frame: bytes) -> None:
        pipe = self.proc.stdin
        assert pipe is not None
        try:
            pipe.write(frame)
            pipe.flush()
        except (OSError, ValueError):  # its end is closed: it died
            self.failed = True
            raise _HelperGone from None

    def _drain(self) -> None:
        out = self.proc.stdout
        assert out is not None
        try:
            while True:
                head = out.read(_HEAD)
                if not head:
                    break  # it ended
                cap = self.caps.popleft() if self.caps else 0  # an answer not asked for
                size = int.from_bytes(head, "big")
                if len(head) != _HEAD or not 0 < size <= cap:
                    break  # stray bytes, or a length out of bounds: not an answer
                blob = _read_exactly(out, size)
                if blob is None:
                    break  # cut off: it died writing
                self.answers.put(blob)
        except (OSError, ValueError):
            pass
        finally:  # whatever stopped it, the scan is told: every answer after is read here
            self.answers.put(None)


def _read_exactly(stream: IO[bytes], size: int) -> bytes | None:
    """`size` bytes, in chunks (memory grows with what arrives, not with what a length
    claims), or None when the stream ends first."""
    parts, left = [], size
    while left:
        part = stream.read(min(left, _CHUNK))
        if not part:
            return None
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def _encode(value: object) -> bytes:
    import orjson

    blob = orjson.dumps(value)
    return len(blob).to_bytes(_HEAD, "big") + blob


def _decode(blob: bytes) -> object:
    import orjson

    try:
        return orjson.loads(blob)
    except orjson.JSONDecodeError as exc:
        raise ValueError("not JSON") from exc


def _path_out(path: Path) -> str:
    """A path as JSON can carry it, whatever its bytes (latin-1 maps each to a char)."""
    return os.fsencode(path).decode("latin-1")


def _path_in(text: str) -> Path:
    return Path(os.fsdecode(text.encode("latin-1")))


# --- Fetched as plain data, and back with every field checked ----------------------------

def _plain(got: Fetched) -> list[object]:
    t = got.transcript
    transcript = None if t is None else [
        t.format, t.session_id, [_message_out(m) for m in t.messages],
        [_message_out(m) for m in t.summaries], t.ignored, t.said_in]
    error = None if got.error is None else [type(got.error).__name__, got.error.message]
    found = [[i, [[_message_out(m) for m in o.kept], o.withheld, o.counts,
                  sorted(o.refusing)]] for i, o in got.found.items()]
    return [transcript, error, sorted(got.clean), found]


def _message_out(m: NewMessage) -> list[object]:
    return [m.content, m.role, m.message_id, m.created_at, m.tags, m.channel, m.name]


def _fetched(data: object) -> Fetched:
    """A helper's answer as a Fetched; ValueError (or TypeError, KeyError, IndexError)
    when it is anything but the shape `_plain` gives."""
    transcript, error, clean, found = _list(data, 4)
    got = Fetched()
    if transcript is not None:
        fmt, session, messages, summaries, ignored, said_in = _list(transcript, 6)
        from memvault.text.transcripts import Transcript

        got.transcript = Transcript(
            _str(fmt), _opt_str(session), [_message_in(m) for m in _list(messages)],
            [_message_in(m) for m in _list(summaries)], _counts(ignored), _names(said_in))
    if error is not None:
        kind, message = _list(error, 2)
        got.error = _ERRORS[_str(kind)](_str(message))
    count = len(got.transcript.messages) if got.transcript else 0
    got.clean = frozenset(_index(i, count) for i in _list(clean))
    for item in _list(found):
        i, outcome = _list(item, 2)
        kept, withheld, counts, refusing = _list(outcome, 4)
        got.found[_index(i, count)] = Screened(
            [_message_in(m) for m in _list(kept)], _count(withheld), _counts(counts),
            {_str(r) for r in _list(refusing)})
    return got


def _message_in(data: object) -> NewMessage:
    content, role, message_id, created_at, tags, channel, name = _list(data, 7)
    return NewMessage(_str(content), _str(role), _opt_str(message_id),
                      _opt_str(created_at), [_str(t) for t in _list(tags)],
                      _opt_str(channel), _opt_str(name))


def _list(value: object, length: int | None = None) -> list[object]:
    if type(value) is not list or (length is not None and len(value) != length):
        raise ValueError("malformed answer")
    return value


def _str(value: object) -> str:
    if type(value) is not str:
        raise ValueError("malformed answer")
    return value


def _opt_str(value: object) -> str | None:
    return None if value is None else _str(value)


def _count(value: object) -> int:
    if type(value) is not int or value < 0:
        raise ValueError("malformed answer")
    return value


def _index(value: object, count: int) -> int:
    if _count(value) >= count:
        raise ValueError("malformed answer")
    return value  # type: ignore[return-value]


def _counts(value: object) -> dict[str, int]:
    if type(value) is not dict:
        raise ValueError("malformed answer")
    return {_str(k): _count(v) for k, v in value.items()}


def _names(value: object) -> dict[str, str]:
    if type(value) is not dict:
        raise ValueError("malformed answer")
    return {_str(k): _str(v) for k, v in value.items()}


_ERRORS: dict[str, type[MemError]] = {
    cls.__name__: cls for cls in (MemError, DataError, NotTranscript, NotFound, Refused,
                                  UsageError, ConfigError)}


def serve(stdin: BinaryIO, stdout: BinaryIO) -> None:
    """The helper's loop, on the pipes its start hands it: the policy and format, then a
    path at a time, answered with what `read` returns for it, in order."""
    gc.set_threshold(50_000, 20, 100)  # as the CLI does: a parse allocates much, briefly
    setup = _request(stdin, _SETUP_MAX)
    if setup is None:
        return
    tag, doc, where, fmt = _list(setup, 4)
    if tag != "mem-readahead-1" or type(doc) is not dict:
        return
    policy = AdmissionPolicy.rebuilt(doc, _str(where))
    while (asked := _request(stdin, _REQUEST_MAX)) is not None:
        path, screen = _list(asked, 2)
        got = read(_path_in(_str(path)), _str(fmt), policy if screen is True else None)
        stdout.write(_encode(_plain(got)))
        stdout.flush()


def _request(stdin: BinaryIO, cap: int) -> object:
    """The next frame from the scan, or None when its input ends."""
    head = stdin.read(_HEAD)
    if len(head) != _HEAD:
        return None
    size = int.from_bytes(head, "big")
    blob = _read_exactly(stdin, size) if 0 < size <= cap else None
    return None if blob is None else _decode(blob)
