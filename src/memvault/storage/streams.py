"""Transcripts as input streams: a file or stdin, plain or zstd-compressed (decompressed
as it is read), whole (bounded) or line by line in flat memory.

Only regular files are opened (fsio.open_regular): a FIFO or a device is refused before a
byte is read. zstandard, a C extension, is imported only for a compressed stream.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, cast

from memvault.errors import DataError, NotFound, UsageError

if TYPE_CHECKING:
    from memvault.text.transcripts import LongLine

# A transcript read whole (every format but Codex's rollouts, which are read as a stream).
MAX_TRANSCRIPT = 256 * 1024 * 1024
# Codex recompresses idle rollouts with zstd (rollout-*.jsonl.zst); any transcript may be.
ZSTD_SUFFIX = ".zst"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
READ_CHUNK = 1 << 20
# Format detection reads the first lines of a stream again: at most this much of it.
SNIFF_BYTES = 32 << 20

Read = Callable[[int], bytes]  # read(n): up to n bytes, b"" at the end


def read_file(path: Path) -> str:
    """A transcript file's text, decompressed when it is zstd (bounded in size; NotFound,
    DataError, UsageError)."""
    with open_transcript(path) as read:
        return decode(read_all(read, str(path)), str(path))


def decode(raw: bytes | bytearray, where: str) -> str:
    if len(raw) > MAX_TRANSCRIPT:
        raise DataError(f"transcript is larger than {MAX_TRANSCRIPT >> 20} MiB")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        # A file read while it is written may end inside a character: its last line is
        # torn (the parser counts it so), the rest is text. Anything else is not UTF-8.
        if exc.reason != "unexpected end of data" or exc.end != len(raw):
            raise DataError(f"{where} is not UTF-8 text") from None
        return bytes(raw[:exc.start]).decode("utf-8") + "\ufffd"


@contextmanager
def open_transcript(path: Path, watch: Callable[[int], None] | None = None
                    ) -> Iterator[Read]:
    """A transcript file open for reading, through zstd when its content is compressed
    (NotFound, UsageError for a folder; DataError for a *.zst that is not zstd).
    `watch` is told how many bytes of the file each read took (compressed ones for a
    compressed file: they are what its size counts)."""
    from memvault.storage.fsio import open_regular

    try:
        # O_NONBLOCK, then fstat: a FIFO (which would block) or a device such as /dev/zero
        # (which never ends) is refused (DataError) before a byte is read.
        fh = open_regular(path)
    except FileNotFoundError:
        raise NotFound(f"no transcript at {path}") from None
    except IsADirectoryError:
        raise UsageError(f"{path} is a directory", hint="scan") from None
    except PermissionError:
        raise NotFound(f"cannot read {path}: permission denied") from None
    def counted(n: int) -> bytes:
        data = fh.read(n)
        if watch is not None:
            watch(len(data))
        return data

    with fh:
        yield decompressed(fh.read if watch is None else counted, str(path),
                           path.name.endswith(ZSTD_SUFFIX))


def decompressed(read: Read, where: str, compressed: bool = False) -> Read:
    """The stream's bytes, decompressed as they are read when it starts with zstd's magic
    number (zstandard is imported only then); a `compressed` stream must."""
    head = b""
    while len(head) < len(ZSTD_MAGIC) and (more := read(len(ZSTD_MAGIC) - len(head))):
        head += more  # a pipe may give fewer bytes than asked
    source = _Chain(head, read)
    if head != ZSTD_MAGIC:
        if compressed:
            raise DataError(f"{where} is not zstd-compressed")
        return source.read
    import zstandard  # a C extension: loaded only for a compressed transcript

    frames = _ZstdFrames()

    def read_compressed(n: int) -> bytes:
        data = source.read(n)
        frames.feed(data)
        return data

    # Any object with read() will do (zstandard's type says a file).
    reader = zstandard.ZstdDecompressor().stream_reader(
        cast("IO[bytes]", _Chain(b"", read_compressed)), read_across_frames=True)

    def read_zstd(n: int) -> bytes:
        try:
            data = reader.read(n)
        except zstandard.ZstdError as exc:
            raise DataError(f"{where}: damaged zstd data ({exc})") from None
        if not data and not frames.whole():
            # zstandard's reader ends a cut stream quietly: what it gave was stored.
            raise DataError(f"{where}: the zstd data is cut short (a truncated file?)")
        return data

    return read_zstd


class _ZstdFrames:
    """Follows zstd's frame format (RFC 8878) over the compressed bytes as they are read
    (headers and block sizes only), to tell whether the stream ended between frames:
    zstandard's stream reader ends a truncated stream without a word."""

    def __init__(self) -> None:
        self._buf = b""  # the bytes of the field being read
        self._want = 4  # the size of that field
        self._skip = 0  # bytes to pass over (a block's content)
        self._state = "magic"
        self._checksum = False
        self._ended = False

    def feed(self, data: bytes) -> None:
        if not data:
            self._ended = True
        view = memoryview(data)
        while view:
            if self._skip:
                step = min(self._skip, len(view))
                self._skip -= step
                view = view[step:]
                continue
            step = min(self._want - len(self._buf), len(view))
            self._buf += bytes(view[:step])
            view = view[step:]
            if len(self._buf) == self._want:
                field, self._buf = self._buf, b""
                self._field(field)

    def whole(self) -> bool:
        return self._ended and self._state == "magic" and not self._buf and not self._skip

    def _field(self, field: bytes) -> None:
        if self._state == "magic":
            if field[1:] == b"\x2a\x4d\x18" and field[0] & 0xF0 == 0x50:
                self._state, self._want = "skippable", 4  # a skippable frame: its size
            else:
                self._state, self._want = "descriptor", 1
        elif self._state == "skippable":
            self._skip = int.from_bytes(field, "little")
            self._state, self._want = "magic", 4
        elif self._state == "descriptor":
            fcs, single, did = field[0] >> 6, field[0] >> 5 & 1, field[0] & 3
            self._checksum = bool(field[0] >> 2 & 1)
            self._skip = (0 if single else 1) + (0, 1, 2, 4)[did] + (
                (1 if single else 0), 2, 4, 8)[fcs]
            self._state, self._want = "block", 3
        elif self._state == "block":
            header = int.from_bytes(field, "little")
            last, kind, size = header & 1, header >> 1 & 3, header >> 3
            self._skip = 1 if kind == 1 else size  # an RLE block holds one byte
            if last:
                self._skip += 4 if self._checksum else 0
                self._state, self._want = "magic", 4


def read_all(read: Read, where: str, why: str = "only a Codex rollout is read as a stream"
             ) -> bytearray:
    """All of a stream, at most MAX_TRANSCRIPT bytes (DataError past that)."""
    buf = bytearray()
    while chunk := read(8 * READ_CHUNK):
        buf += chunk
        if len(buf) > MAX_TRANSCRIPT:
            raise DataError(f"{where} is larger than {MAX_TRANSCRIPT >> 20} MiB ({why})")
    return buf


def read_lines(read: Read, limit: int | None = None) -> Iterator[bytes | LongLine]:
    """The lines of a stream, each with its newline (but perhaps the last). A line longer
    than `limit` bytes (MAX_LINE) is not kept but read through to its end, and stands as
    a LongLine: memory holds one line and one chunk, whatever the size of the stream."""
    from memvault.text.transcripts import MAX_LINE, LongLine

    limit = MAX_LINE if limit is None else limit
    parts: list[bytes] = []
    size = 0
    while chunk := read(READ_CHUNK):
        start = 0
        while start < len(chunk):
            end = chunk.find(b"\n", start) + 1  # 0: the line goes on in the next chunk
            stop = end or len(chunk)
            size += stop - start
            if size <= limit:
                parts.append(chunk[start:stop])
            elif parts:
                parts.clear()  # too long: what was kept of it goes
            start = stop
            if end:
                if size > limit:
                    yield LongLine(size)
                else:
                    if len(parts) > 1:
                        parts[:] = [b"".join(parts)]
                    yield parts.pop()  # held by the reader only, not here as well
                size = 0
    if size:
        yield LongLine(size) if size > limit else b"".join(parts)


class _Chain:
    """Bytes already read, then the rest of the stream."""

    def __init__(self, head: bytes, read: Read) -> None:
        self._head, self._read = head, read

    def read(self, n: int = -1) -> bytes:
        if not self._head:
            return self._read(n)
        if n < 0 or n >= len(self._head):
            out, self._head = self._head, b""
        else:
            out, self._head = self._head[:n], self._head[n:]
        return out


class Replay:
    """A stream whose first bytes (read to detect the format) are read again after
    rewind(): `size` is how many were kept so far."""

    def __init__(self, read: Read) -> None:
        self._read = read
        self._kept: list[bytes] | None = []
        self._again: list[bytes] = []
        self.size = 0

    def read(self, n: int) -> bytes:
        if self._again:
            chunk = self._again.pop()
            if len(chunk) > n:
                chunk, rest = chunk[:n], chunk[n:]
                self._again.append(rest)
            return chunk
        chunk = self._read(n)
        if self._kept is not None:
            self._kept.append(chunk)
            self.size += len(chunk)
        return chunk

    def rewind(self) -> None:
        self._again, self._kept = (self._kept or [])[::-1], None

    def head(self) -> Iterator[str]:
        """The first lines (as far as SNIFF_BYTES), decoded for format detection."""
        for line in read_lines(self.read):
            if not isinstance(line, bytes) or self.size > SNIFF_BYTES:
                return
            yield line.decode("utf-8", "replace")


# A file read twice (a first pass for its links, a second that stores) is read in blocks
# of whole lines of about this size: what memory holds of it at a time.
LINE_BLOCK = 8 << 20
# The heaps (glibc's arenas) the threads of a long read in blocks share.
ARENAS = 2


def freed_to_system() -> None:
    """Have large buffers go back to the system when freed, for a long read in blocks.
    glibc raises its mmap threshold to the largest buffer freed (up to 32 MiB), and
    serves the next ones from a heap that never shrinks: a file read a block at a time
    (the block, its text, its parsed lines) would keep the largest of each. Fixing the
    threshold keeps memory at what is in use. The threads that index (each write's own)
    share two heaps (arenas), not one each of up to 16: a heap keeps the free chunks
    between its blocks in use, and more heaps kept more of them as the file went on (a
    2 GB session's own memory peaked 10 MB higher). Elsewhere (another libc), nothing."""
    mallopt = _glibc("mallopt")
    if mallopt is not None:
        mallopt(-3, 128 << 10)  # M_MMAP_THRESHOLD, glibc's default, no longer raised
        mallopt(-8, ARENAS)  # M_ARENA_MAX: for the heaps made from now on


def one_heap() -> None:
    """Have every thread allocate from one malloc heap (M_ARENA_MAX 1) from now on.
    glibc gives a new thread a heap of its own, and what one thread makes and another
    frees (a pull's next records, made on a thread while a batch commits, stored and
    freed on the main one; Tantivy's indexing thread's buffers) stays counted in each
    heap it passed through: a second machine's pull peaked 30 MB higher. Elsewhere
    (another libc), nothing."""
    mallopt = _glibc("mallopt")
    if mallopt is not None:
        mallopt(-8, 1)  # M_ARENA_MAX


def given_back() -> None:
    """Give the free pages inside malloc's heaps back to the system (malloc_trim), after
    a block of a long read is done with: the block's parsed lines are freed in the heaps
    of the threads that used them (each write's index writer is a thread of its own),
    where they would stay counted in memory, a little more with each block. Elsewhere
    (another libc), nothing."""
    trim = _glibc("malloc_trim")
    if trim is not None:
        trim(0)


@functools.cache
def _glibc(name: str) -> Any:
    """glibc's function `name` (looked up once), or None where the C library is another."""
    import sys

    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        return getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None


def line_blocks(fh: IO[bytes], end: int, size: int = LINE_BLOCK) -> LineBlocks:
    """The bytes of `fh` from where it is to `end` (the end of a whole line), in blocks
    of whole lines of about `size` bytes (a longer line is a block of its own)."""
    return LineBlocks(fh, end, size)


class LineBlocks:
    """line_blocks' iterator. Not a generator: it keeps no block once handed out (a
    generator holds what it yielded until asked for the next), only the start of a line
    a block cut."""

    def __init__(self, fh: IO[bytes], end: int, size: int) -> None:
        self.fh, self.size, self.left, self.carry = fh, size, end - fh.tell(), b""

    def __iter__(self) -> LineBlocks:
        return self

    @property
    def done(self) -> bool:
        """Whether the block handed out last was the last one."""
        return self.left <= 0 and not self.carry

    def __next__(self) -> bytes:
        data, self.carry = self.carry, b""
        while self.left > 0:
            more = self.fh.read(min(self.size, self.left))
            if not more:
                self.left = 0  # the file shrank under us: what was read is all there is
                break
            self.left -= len(more)
            data += more
            del more
            cut = data.rfind(b"\n") + 1
            if cut:
                self.carry = data[cut:]
                return data[:cut]
        if data:
            return data
        raise StopIteration
