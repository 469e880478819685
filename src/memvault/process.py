"""Running a user's own command (the key command, an external summariser): no shell,
bounded in time and in output, with only the environment it is given, and never
outliving its run.

The command runs under a small keeper (memvault/reaper.py: an isolated interpreter
that holds no key) which, on Linux, is a child subreaper: when the command exits, on a
time-out, on too much output, or when mem itself dies, the keeper kills the command
and every process it started (even one that called setsid), so none holds its stdout
open or lives on with what it was given. Elsewhere the command's process group is
killed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess  # noqa: S404 - argv lists only, never a shell
import sys
import threading
import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

# What a child that needs nothing of ours is given of the environment: where programs
# and home are, the language, time zone and temporary folder. Nothing else (no MEM_*,
# no tokens, no PYTHONPATH).
MINIMAL_ENV = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR",
               "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_RUNTIME_DIR")
_REAPER = str(Path(__file__).with_name("reaper.py"))
EXIT_ORPHAN = 70  # a worker whose parent died (EX_SOFTWARE): never reported, no one waits
_KEEPER_GRACE = 5.0  # seconds the keeper has to end the command's tree when told to


def minimal_env(extra: Iterable[str] = (), source: Mapping[str, str] | None = None
                ) -> dict[str, str]:
    """The minimal environment (MINIMAL_ENV and LC_*), plus the `extra` names asked for;
    never a MEM_* variable."""
    env = os.environ if source is None else source
    wanted = set(MINIMAL_ENV) | set(extra)
    return {k: v for k, v in env.items()
            if (k in wanted or k.startswith("LC_")) and not k.startswith("MEM_")}


def open_fds() -> list[int]:
    """This process's open file descriptors above stderr (empty where none can be
    listed)."""
    for folder in ("/proc/self/fd", "/dev/fd"):
        with contextlib.suppress(OSError):
            listed = sorted(fd for fd in map(int, os.listdir(folder)) if fd > 2)
            break
    else:
        return []
    return [fd for fd in listed if _is_open(fd)]  # not the one the listing itself used


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def die_with_parent(parent: int, watch: int | None) -> None:
    """For a worker process started by `parent`: die when it dies. On Linux the kernel
    sends SIGKILL (PR_SET_PDEATHSIG); everywhere, a thread waits on `watch`, the read
    end of a pipe whose write end only the parent holds, and ends this process when it
    closes (without one, a worker not forked, it checks its parent's id each second).
    A parent already gone by the time this runs ends it at once."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(EXIT_ORPHAN)

    def wait() -> None:
        if watch is None:
            while os.getppid() == parent:
                time.sleep(1)
        else:
            with contextlib.suppress(OSError):
                while os.read(watch, 1):
                    pass
        os._exit(EXIT_ORPHAN)

    threading.Thread(target=wait, daemon=True).start()


def forget_mem_settings(keep: Collection[str] = ()) -> None:
    """For a forked worker, at its start: every MEM_* variable (but those in `keep`)
    dropped from its own copy of the environment, so that nothing it reads or starts
    later finds mem's settings, the master key above all. The one place below the CLI
    that changes the environment, and only a forked child's own (a test holds it to
    that)."""
    for name in [k for k in os.environ if k.startswith("MEM_") and k not in keep]:
        del os.environ[name]


def without_mem(source: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment without mem's own settings (MEM_MASTER_KEY foremost)."""
    env = os.environ if source is None else source
    return {k: v for k, v in env.items() if not k.startswith("MEM_")}


Problem = Literal["timeout", "too long", "interrupted"] | None


@dataclass(frozen=True)
class Finished:
    output: bytes
    problem: Problem  # None when the command ran to its end
    returncode: int | None
    stderr: bytes = b""  # the last bytes of its stderr, when they were asked for


def run_bounded(argv: list[str], stdin: bytes | None, timeout: float, limit: int,
                env: Mapping[str, str], stderr_tail: int = 0) -> Finished:
    """Run `argv` with `stdin` as its input and `env` as its whole environment; its
    stdout up to `limit` bytes, within `timeout` seconds. OSError or ValueError when it
    cannot be started (PermissionError for a file named by its path that is not
    executable). Its stderr is dropped (it may echo what it was given), but for its last
    `stderr_tail` bytes when asked, which say why a command failed. When this returns,
    nothing the command started is left running."""
    import shutil

    executable = shutil.which(argv[0], path=env.get("PATH", os.defpath))
    if executable is None:
        if os.sep in argv[0] and os.path.isfile(argv[0]):
            raise PermissionError(errno.EACCES, "not executable", argv[0])
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), argv[0])
    watch, stop = os.pipe()  # the keeper ends everything when `stop` closes
    try:
        proc = subprocess.Popen(  # noqa: S603 - the user's own command, no shell
            [sys.executable, "-I", "-S", _REAPER, str(watch), str(os.getpid()),
             executable, *argv],
            stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE if stderr_tail > 0 else subprocess.DEVNULL,
            start_new_session=True, close_fds=True, pass_fds=(watch,), env=dict(env))
    except BaseException:
        os.close(stop)
        raise
    finally:
        os.close(watch)
    assert proc.stdout is not None
    if stdin is not None:
        assert proc.stdin is not None
        threading.Thread(target=_feed, args=(proc.stdin, stdin), daemon=True).start()
    tail = _Tail(proc.stderr, stderr_tail) if proc.stderr is not None else None
    output = b""
    problem: Problem = "interrupted"  # until _read_until says otherwise
    try:
        output, problem = _read_until(proc, proc.stdout.fileno(),
                                      time.monotonic() + timeout, limit)
    finally:
        proc.stdout.close()
        if problem is not None:
            os.close(stop)
            stop = -1
            _end_keeper(proc)
        else:
            proc.wait()
        if stop >= 0:
            os.close(stop)
    return Finished(output, problem, proc.returncode, tail.bytes() if tail else b"")


class _Tail:
    """The last `size` bytes of a stream, read by a thread of its own until its end (the
    keeper ends every process that could hold it open)."""

    def __init__(self, stream: IO[bytes], size: int) -> None:
        self.stream, self.size, self.data = stream, size, bytearray()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            while chunk := os.read(self.stream.fileno(), 65536):
                self.data += chunk
                del self.data[:-self.size]
        with contextlib.suppress(OSError):
            self.stream.close()

    def bytes(self) -> bytes:
        self.thread.join(_KEEPER_GRACE)
        return bytes(self.data)


def _end_keeper(proc: subprocess.Popen[bytes]) -> None:
    """The keeper was told to stop (its pipe closed): it kills the command's tree and
    exits. Should it not, its group is killed (not reaped yet: the id is still its own)."""
    try:
        proc.wait(_KEEPER_GRACE)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _feed(pipe: object, data: bytes) -> None:
    """Write the input and close it; a command that stops reading early is its choice."""
    with contextlib.suppress(OSError, ValueError):
        pipe.write(data)  # type: ignore[attr-defined]
    with contextlib.suppress(OSError, ValueError):
        pipe.close()  # type: ignore[attr-defined]


def _read_until(proc: subprocess.Popen[bytes], fd: int, deadline: float, limit: int
                ) -> tuple[bytes, Problem]:
    """The command's stdout up to its end (or a problem: "timeout", "too long"), and its
    exit; never past `deadline`."""
    import selectors

    output = bytearray()
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return bytes(output), "timeout"
            if not selector.select(left):
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            output += chunk
            if len(output) > limit:
                return bytes(output), "too long"
    try:
        proc.wait(max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return bytes(output), "timeout"
    return bytes(output), None


def detach(argv: list[str], env: Mapping[str, str], stdin: bytes, log: Path,
           cwd: str = "/") -> None:
    """Start `argv` on its own, outliving this process: a session of its own (no signal
    of this terminal reaches it), `stdin` as its input through a pipe (handed over here
    in full: at most a pipe's buffer, so that this never waits for the child), its
    stdout dropped and its stderr appended to `log`, in `cwd`, with `env` as its whole
    environment. It is never waited for: when this process ends, init reaps it."""
    if len(stdin) > DETACH_INPUT:
        raise ValueError("a detached child's input must fit a pipe's buffer")
    read, write = os.pipe()
    try:
        with open(log, "ab") as errors:
            subprocess.Popen(  # noqa: S603 - mem itself, argv list, no shell
                argv, stdin=read, stdout=subprocess.DEVNULL, stderr=errors, env=dict(env),
                cwd=cwd, start_new_session=True, close_fds=True)
        os.close(read)
        read = -1
        os.write(write, stdin)
    finally:
        if read >= 0:
            os.close(read)
        os.close(write)


DETACH_INPUT = 60_000  # bytes: under the smallest pipe buffer of the platforms mem runs on
