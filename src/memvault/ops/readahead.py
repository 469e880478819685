"""Transcripts read, parsed and screened ahead of a scan, in a helper process.

A scan stores what it finds batch after batch under the user's lock, on one core:
sealing, writing, indexing. Reading a transcript, parsing it and screening its
messages for secrets and personal data need neither the lock nor a key, and cost about
a third of that again; for a large scan one helper process does that on another core,
up to a batch ahead. The helper holds no key and writes nothing: it is handed paths and
the redaction policy, and returns what `read` returns.

A small scan (or one where no helper can be started) reads in its own process, with the
same function: the result is the same either way.
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import queue
import subprocess  # noqa: S404 - this Python itself, an argv list, never a shell
import sys
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from memvault.errors import MemError
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
        with contextlib.suppress(OSError):
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
        yield from _here(wanted[done:], fmt, policy)


class _HelperGone(Exception):
    pass


# The helper's start: it ignores Ctrl-C (the scan's to handle), takes the scan's import
# path, and serves until its input ends.
_BOOT = ("import pickle, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
         "sys.path[:] = pickle.load(sys.stdin.buffer); "
         "from memvault.ops.readahead import serve; serve(sys.stdin.buffer, sys.stdout.buffer)")
_LENGTH = 8


class _Helper:
    """The helper process, spoken to in pickles: the scan's own code on both ends, over
    pipes only they hold. A thread drains its answers as they come, so the helper never
    waits on a full pipe and the scan asks ahead without blocking."""

    def __init__(self, policy: AdmissionPolicy, fmt: str) -> None:
        self.proc = subprocess.Popen(  # noqa: S603 - this Python and our own code
            [sys.executable, "-c", _BOOT], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            # Without mem's settings: MEM_MASTER_KEY, for one, is not the helper's.
            env={k: v for k, v in os.environ.items() if not k.startswith("MEM_")})
        self.answers: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        threading.Thread(target=self._drain, daemon=True).start()
        self._send(sys.path)
        self._send((policy, fmt))

    def ask(self, wanted: Wanted) -> None:
        self._send((str(wanted.path), wanted.screen))

    def answer(self) -> Fetched:
        blob = self.answers.get()
        if blob is None:
            raise _HelperGone
        got: Fetched = pickle.loads(blob)  # noqa: S301 - from our own helper, over our pipe
        return got

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.stdin.close()  # type: ignore[union-attr]
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def _send(self, obj: object) -> None:
        pipe = self.proc.stdin
        assert pipe is not None
        try:
            pickle.dump(obj, pipe, protocol=pickle.HIGHEST_PROTOCOL)
            pipe.flush()
        except (OSError, ValueError):  # its end is closed: it died
            raise _HelperGone from None

    def _drain(self) -> None:
        out = self.proc.stdout
        assert out is not None
        try:
            while len(head := out.read(_LENGTH)) == _LENGTH:
                size = int.from_bytes(head, "big")
                blob = out.read(size)
                if len(blob) != size:
                    break  # cut off: it died writing
                self.answers.put(blob)
        except (OSError, ValueError):
            pass
        self.answers.put(None)  # ended: every answer after this one is read here


def serve(stdin: BinaryIO, stdout: BinaryIO) -> None:
    """The helper's loop, on the pipes its start hands it: the policy and format, then a
    path at a time, answered with what `read` returns for it, in order."""
    gc.set_threshold(50_000, 20, 100)  # as the CLI does: a parse allocates much, briefly
    policy, fmt = pickle.load(stdin)  # noqa: S301 - from the scan that started us
    while True:
        try:
            path, screen = pickle.load(stdin)  # noqa: S301 - likewise
        except EOFError:
            return
        blob = pickle.dumps(read(Path(path), fmt, policy if screen else None),
                            protocol=pickle.HIGHEST_PROTOCOL)
        stdout.write(len(blob).to_bytes(_LENGTH, "big") + blob)
        stdout.flush()
