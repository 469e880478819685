"""Running a user's own command (the key command, an external summariser): no shell, its
own process group, bounded in time and in output.

On a time-out (or too much output) the whole group is killed: helpers a command
started must not outlive the run, nor hold its stdout open, which would make a plain
wait hang past the time-out.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess  # noqa: S404 - argv lists only, never a shell
import threading
import time
from dataclasses import dataclass
from typing import Literal

Problem = Literal["timeout", "too long", "interrupted"] | None


@dataclass(frozen=True)
class Finished:
    output: bytes
    problem: Problem  # None when the command ran to its end
    returncode: int | None


def run_bounded(argv: list[str], stdin: bytes | None, timeout: float, limit: int
                ) -> Finished:
    """Run `argv` with `stdin` as its input; its stdout up to `limit` bytes, within
    `timeout` seconds. OSError or ValueError when it cannot be started. Its stderr is
    dropped (it may echo what it was given)."""
    proc = subprocess.Popen(  # noqa: S603 - the user's own command, no shell
        argv, stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True,
        close_fds=True,
    )
    assert proc.stdout is not None
    if stdin is not None:
        assert proc.stdin is not None
        threading.Thread(target=_feed, args=(proc.stdin, stdin), daemon=True).start()
    output = b""
    problem: Problem = "interrupted"  # until _read_until says otherwise
    try:
        output, problem = _read_until(proc, proc.stdout.fileno(),
                                      time.monotonic() + timeout, limit)
    finally:
        proc.stdout.close()
        if problem is not None:  # not reaped yet, so its group id cannot have been reused
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)  # the command and its children
        proc.wait()
    return Finished(output, problem, proc.returncode)


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
