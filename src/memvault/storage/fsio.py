"""Durable, private filesystem primitives: atomic replace, single-write append, the user lock.

Every vault write goes through here so that a crash or a full disk leaves either the
old state or the new one, never a mix, and no file is ever readable by others.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import os
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO, cast

from memvault.errors import Busy, DataError, Refused, StorageError

DIR_MODE = 0o700
FILE_MODE = 0o600
TMP_PREFIX = ".tmp-"


def _storage_error(path: Path, exc: OSError) -> StorageError:
    reason = os.strerror(exc.errno) if exc.errno else str(exc)
    return StorageError(f"cannot write {path}: {reason}; nothing was changed",
                        errno=exc.errno)


def exists_already(path: Path) -> Refused:
    """The refusal of an output that would replace a file already there (a key backup,
    an export) when replacing it was not asked for: nothing was written."""
    return Refused(f"{path} exists already; nothing was written", field="force")


def open_regular(path: Path, what: str | None = None) -> BinaryIO:
    """Open a file for reading only if it is a regular file, without ever blocking.

    A FIFO, a device (/dev/zero) or a socket in place of a file would block or never end:
    the file is opened with O_NONBLOCK (an open of a FIFO returns at once) and fstat'ed
    before one byte is read. DataError names anything but a regular file; a folder raises
    IsADirectoryError (as reading one would), other OSErrors (FileNotFoundError...) pass.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(mode):
            raise DataError(f"{what or path} is not a regular file (a pipe, device or "
                            "socket); it was not read")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: Path, what: str | None = None, limit: int | None = None) -> bytes:
    """All of a regular file (see open_regular); DataError past `limit` bytes."""
    with open_regular(path, what) as fh:
        data = fh.read() if limit is None else fh.read(limit + 1)
    if limit is not None and len(data) > limit:
        raise DataError(f"{what or path} is larger than {limit} bytes; it was not read")
    return data


def ensure_dir(path: Path) -> None:
    """Create `path` and any missing parents as 0700 directories (existing ones untouched)."""
    missing = []
    probe = path
    while not probe.exists():
        missing.append(probe)
        probe = probe.parent
    try:
        for directory in reversed(missing):
            try:
                directory.mkdir(mode=DIR_MODE)
            except FileExistsError:
                continue  # a concurrent writer made it first
            os.chmod(directory, DIR_MODE)  # mkdir's mode is filtered by the umask
            fsync_dir(directory.parent)
    except OSError as exc:
        raise _storage_error(path, exc) from exc


def fsync_file(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise _storage_error(path, exc) from exc


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FilesystemSync:
    """syncfs(2) of the filesystem a folder is on: one call makes every file and folder
    written there durable, data and metadata, as an fsync of each would, where a bulk
    write of many new files would pay one fsync (a journal commit) a file.

    The folder is opened here, before the writes it is to cover: since Linux 5.8 syncfs
    reports a writeback error of the filesystem that happened after the descriptor was
    opened, whoever else saw it since. `__call__` says whether the sync was made; False
    (not Linux, a kernel before 5.8, whose syncfs reported no writeback error, no syncfs
    in the C library, a folder on another filesystem, a failed call) tells the caller to
    fsync what it wrote, file by file, as before.
    """

    def __init__(self, folder: Path) -> None:
        self.fd: int | None = None
        if _syncfs() is not None:
            with contextlib.suppress(OSError):
                self.fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def __call__(self, *folders: Path) -> bool:
        """Sync the filesystem; False when that was not done, or does not cover all of
        `folders` (one of them on another filesystem: a link to another disk)."""
        call = _syncfs()
        if self.fd is None or call is None:
            return False
        try:
            here = os.fstat(self.fd).st_dev
            if any(os.stat(folder).st_dev != here for folder in folders):
                return False
        except OSError:
            return False
        return call(self.fd) == 0

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


@functools.cache
def _syncfs() -> Callable[[int], int] | None:
    """The C library's syncfs where it reports writeback errors (Linux 5.8 on), once."""
    system = os.uname()
    release = system.release.split(".")
    if system.sysname != "Linux" or not all(p.isdigit() for p in release[:2]) or \
            (int(release[0]), int(release[1])) < (5, 8):
        return None
    import ctypes

    try:  # the C library is among the interpreter's own symbols
        call = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    call.argtypes, call.restype = [ctypes.c_int], ctypes.c_int
    return cast("Callable[[int], int]", call)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _temp_beside(path: Path) -> Path:
    return path.with_name(f"{TMP_PREFIX}{path.name}.{os.getpid()}.{time.monotonic_ns()}")


def _write_private(tmp: Path, data: bytes | Iterable[bytes]) -> None:
    """A new 0600 file holding `data` (or its parts, one after the other), fsynced."""
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    try:
        for part in (data,) if isinstance(data, bytes) else data:
            _write_all(fd, part)
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes | Iterable[bytes]) -> None:
    """Replace `path` with `data`: 0600 temp file beside it, fsync, rename, fsync the dir.
    Given as parts, they are written as they come (never joined in memory)."""
    tmp = _temp_beside(path)
    try:
        _write_private(tmp, data)
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise _storage_error(path, exc) from exc


@contextlib.contextmanager
def output_writer(path: Path, replace: bool = True) -> Iterator[BinaryIO]:
    """Stream a file the user asked for (an export, in plaintext) to what `path` names.

    What the path is decides, never its spelling (`/dev/stdout` is a link, and so is
    `/proc/self/fd/1`):
    - the file this process's stdout or stderr already writes to (`/dev/stdout`,
      `/dev/fd/1`, or that file by its own name) is written through that descriptor, so
      that `> file` and `>> file` do what the shell says;
    - anything else that is not a regular file (a pipe, a terminal, a device, a socket),
      named directly or through links, is written into as it is, never replaced;
    - a directory is refused;
    - a new name, or a regular file, gets the output as a new 0600 file, written
      unnamed (O_TMPFILE) and linked into place only once complete and fsynced: a kill
      at any instant leaves no partial plaintext under any name. A symbolic link is
      followed: the file it names is replaced, and the link stays a link. Without
      `replace`, a file there is refused (exists_already) before anything is written,
      and so is one made meanwhile (the new file is linked, never renamed, into place).
      A file the shell opened for the command (stdout, `/dev/fd/3 3>file`) is not
      replaced but written through, as the shell's redirection says.
    """
    st, own = _output_target(path, replace)
    if own is not None:
        with os.fdopen(os.dup(own), "wb") as fh:
            yield fh
        return
    target = Path(os.path.realpath(path))
    if st is not None and not (stat.S_ISREG(st.st_mode) and _same_file(target, st)
                               and replace):
        # Not a file, or a file that only a descriptor names (/proc/self/fd/N of a file
        # since deleted), or one the shell opened for the command and not to be
        # replaced: written into; there is no name to put a new file under.
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NOCTTY
                         | (os.O_TRUNC if stat.S_ISREG(st.st_mode) else 0))
        except OSError as exc:
            raise _storage_error(path, exc) from exc
        with os.fdopen(fd, "wb") as fh:
            yield fh
        return
    with _file_writer(target, replace) as fh:
        yield fh


def check_output(path: Path, replace: bool = True) -> None:
    """Refuse at once what output_writer would refuse (a directory; a file there, unless
    `replace`), before the caller does any work."""
    _output_target(path, replace)


def _output_target(path: Path, replace: bool) -> tuple[os.stat_result | None, int | None]:
    """What `path` is (None: nothing yet), and the descriptor of ours (stdout, stderr)
    that already writes to it, if any; StorageError for a directory, exists_already for
    a file not to be replaced."""
    try:
        st: os.stat_result | None = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise _storage_error(path, exc) from exc
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise StorageError(f"cannot write {path}: it is a directory; nothing was changed")
    own = next((fd for fd in (1, 2) if st is not None and _same_file(fd, st)), None)
    if own is None and st is not None and stat.S_ISREG(st.st_mode) and not replace and \
            not _through_descriptor(path):
        raise exists_already(path)
    return st, own


def _through_descriptor(path: Path) -> bool:
    """Whether `path` names a file by one of this process's descriptors (`/dev/fd/3`,
    `/proc/self/fd/3`, or a link to one): a file the shell opened for the command."""
    fds = os.path.realpath(f"/proc/{os.getpid()}/fd")
    name = os.path.abspath(path)
    for _ in range(40):  # the kernel's own limit on links followed
        if os.path.realpath(os.path.dirname(name)) == fds:
            return True
        try:
            name = os.path.join(os.path.dirname(name), os.readlink(name))
        except OSError:  # not a link (or gone): the chain ends here
            return False
    return False


def _same_file(where: int | Path, st: os.stat_result) -> bool:
    """Whether a descriptor or a path is the file `st` describes."""
    try:
        return os.path.samestat(os.fstat(where) if isinstance(where, int) else os.stat(where),
                                st)
    except OSError:
        return False


def _put(tmp: Path, path: Path, replace: bool) -> None:
    """A complete temp file put in place: renamed over `path`, or (not `replace`) linked,
    which never replaces a file (exists_already)."""
    try:
        if replace:
            os.replace(tmp, path)
            return
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise exists_already(path) from None
        tmp.unlink()
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


@contextlib.contextmanager
def _file_writer(path: Path, replace: bool = True) -> Iterator[BinaryIO]:
    """A new 0600 file at `path` (replacing a file there if `replace`), in place once
    complete."""
    try:
        fd = os.open(path.parent, os.O_TMPFILE | os.O_WRONLY, FILE_MODE)
    except (AttributeError, OSError):  # not Linux, or a filesystem without it
        with _named_writer(path, replace) as fh:
            yield fh
        return
    try:
        with os.fdopen(fd, "wb", closefd=False) as fh:
            yield fh
            fh.flush()
            os.fsync(fd)
        tmp = _temp_beside(path)
        # linkat(AT_SYMLINK_FOLLOW) of /proc/self/fd/N, as open(2) says; a directory fd
        # makes Python call linkat rather than link, which would not follow the link.
        root = os.open("/", os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.link(f"proc/self/fd/{fd}", tmp, src_dir_fd=root, follow_symlinks=True)
        finally:
            os.close(root)
        _put(tmp, path, replace)
        fsync_dir(path.parent)
    except OSError as exc:
        raise _storage_error(path, exc) from exc
    finally:
        os.close(fd)


@contextlib.contextmanager
def _named_writer(path: Path, replace: bool = True) -> Iterator[BinaryIO]:
    tmp = _temp_beside(path)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except OSError as exc:
        raise _storage_error(path, exc) from exc
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        _put(tmp, path, replace)
        fsync_dir(path.parent)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(exc, OSError):
            raise _storage_error(path, exc) from exc
        raise


def create_new(path: Path, data: bytes) -> None:
    """Write a file that must not exist yet, durably and atomically: the data goes to a
    0600 temp file, which is then hard-linked into place (link never replaces a file,
    unlike rename). StorageError when the file exists: nothing is overwritten."""
    tmp = _temp_beside(path)
    try:
        _write_private(tmp, data)
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise StorageError(f"{path.name} exists already; it is never overwritten") from None
        fsync_dir(path.parent)
    except OSError as exc:
        raise _storage_error(path, exc) from exc
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def append_line(path: Path, line: bytes, sync: bool = True, keep_tail: bool = False) -> int:
    """Append record lines with one write, fsynced (unless `sync` is off) before returning.

    A short or failed write (full disk) is truncated away so the file keeps its old
    content; only a kill in the middle can leave a torn last line, which readers skip.
    Returns the offset the data was written at (callers hold the lock that makes it so).
    """
    assert line.endswith(b"\n")
    new = not path.exists()
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, FILE_MODE)
    except OSError as exc:
        raise _storage_error(path, exc) from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # a FIFO would block the write once it is full
            raise StorageError(f"cannot write {path}: not a regular file; nothing was "
                               "changed")
        size = st.st_size
        if size and not keep_tail and os.pread(fd, 1, size - 1) != b"\n":
            size = _drop_torn_tail(fd, size)
        try:
            _write_all(fd, line)
            if sync:
                os.fsync(fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
                os.fsync(fd)
            raise _storage_error(path, exc) from exc
    finally:
        os.close(fd)
    if new and sync:
        fsync_dir(path.parent)
    return size


def _drop_torn_tail(fd: int, size: int) -> int:
    """Cut an interrupted append's partial line so the next line starts clean."""
    end = size
    while end > 0:
        start = max(0, end - (1 << 16))
        block = os.pread(fd, end - start, start)
        newline = block.rfind(b"\n")
        if newline >= 0:
            cut = start + newline + 1
            break
        end = start
    else:
        cut = 0  # the whole file is one torn line
    os.ftruncate(fd, cut)
    return cut


def drop_torn_tail(path: Path) -> bool:
    """Cut a partial last line left by an interrupted append. True when one was cut."""
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise _storage_error(path, exc) from exc
    try:
        size = os.fstat(fd).st_size
        if not size or os.pread(fd, 1, size - 1) == b"\n":
            return False
        _drop_torn_tail(fd, size)
        os.fsync(fd)
        return True
    except OSError as exc:
        raise _storage_error(path, exc) from exc
    finally:
        os.close(fd)


def truncate_to(path: Path, size: int) -> None:
    """Cut a file back to `size` bytes (used to drop a torn tail under the lock)."""
    try:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.ftruncate(fd, size)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise _storage_error(path, exc) from exc


def remove(path: Path) -> None:
    """Delete a file, then try to make that durable (a missing file is fine).

    A failing directory fsync is left for the write that follows to report: it names
    the file the user was writing, not this one."""
    try:
        path.unlink()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise _storage_error(path, exc) from exc
    with contextlib.suppress(OSError):
        fsync_dir(path.parent)


def stale_temps(*directories: Path) -> list[Path]:
    """The temp files in these folders (not below them): what a writer killed before its
    rename (or, for create_new, before its unlink) left behind."""
    found: list[Path] = []
    for directory in directories:
        with contextlib.suppress(OSError):
            found += sorted(entry for entry in directory.iterdir()
                            if entry.name.startswith(TMP_PREFIX) and entry.is_file())
    return found


def remove_stale_temps(*directories: Path) -> list[Path]:
    """Remove temp files left by writers that were killed before their rename (the caller
    holds the lock every writer of these folders takes). Returns what was removed."""
    removed: list[Path] = []
    for entry in stale_temps(*directories):
        with contextlib.suppress(OSError):
            entry.unlink()
            removed.append(entry)
    for directory in {entry.parent for entry in removed}:
        with contextlib.suppress(OSError):
            fsync_dir(directory)
    return removed


@contextlib.contextmanager
def locked(lock_path: Path, timeout: float, what: str) -> Iterator[None]:
    """Hold an exclusive flock on `lock_path`, waiting up to `timeout` seconds (then Busy)."""
    if not lock_path.parent.is_dir():
        ensure_dir(lock_path.parent)
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, FILE_MODE)
    except OSError as exc:
        raise _storage_error(lock_path, exc) from exc
    try:
        deadline = time.monotonic() + timeout
        delay = 0.005
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() >= deadline:
                    raise Busy(
                        f"{what} is locked by another mem process; "
                        f"gave up after {timeout:g}s, retry later"
                    ) from None
                time.sleep(delay)
                delay = min(delay * 2, 0.1)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
