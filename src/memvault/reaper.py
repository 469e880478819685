"""The keeper of a command mem runs (the key command, an external summariser), so that
nothing the command starts outlives it.

mem starts it as `python -I -S reaper.py WATCH_FD PARENT_PID EXECUTABLE ARGV...`: an
isolated interpreter that imports only the standard library's core (no site, no
memvault, nothing from the current folder), holds no key, and is given the command's
own environment. It runs the command as its only child, in a session of its own, then:

- on Linux it is a child subreaper (PR_SET_CHILD_SUBREAPER): every process the command
  starts stays below it, even one that calls setsid and whose parent exits, so /proc
  names them all. Elsewhere the command's process group is what it can reach;
- when the command exits, whatever it left running is killed, and the keeper exits with
  the command's status (or dies of the command's signal);
- when mem closes the watch pipe (a time-out, too much output) or dies (the pipe closes
  with it; on Linux a parent-death signal too), the command and everything it started
  are killed, and the keeper exits.

It is run by path, never imported by mem.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36

_lock = threading.Lock()
_reaped = False  # the command's own pid is reaped (its group id may be reused)


def _prctl(option: int, value: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def descendants(root: int) -> list[int]:
    """Every process below `root`, from /proc (empty where there is none)."""
    children: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # gone meanwhile
        fields = stat.rpartition(b")")[2].split()
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(name))
    found, todo = [], [root]
    while todo:
        for pid in children.get(todo.pop(), ()):
            found.append(pid)
            todo.append(pid)
    return found


def _kill(pid: int, group: bool = False) -> None:
    try:
        (os.killpg if group else os.kill)(pid, signal.SIGKILL)
    except OSError:
        pass  # gone already


def _kill_all(command: int) -> None:
    """SIGKILL the command's group (while its id cannot have been reused) and every
    process below this one."""
    with _lock:
        if not _reaped:
            _kill(command, group=True)
        for pid in descendants(os.getpid()):
            _kill(pid)


def _end(command: int) -> None:
    """Kill everything below, and reap until no child is left: a process forked while
    its parent was being killed is reparented here and found on the next pass."""
    global _reaped
    while True:
        _kill_all(command)
        with _lock:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == command:
                _reaped = True
        if pid == 0:
            time.sleep(0.005)  # killed, not dead yet


def _watch(fd: int, command: int) -> None:
    """mem closes its end of the pipe to stop the command, or dies: either way, end."""
    try:
        while os.read(fd, 4096):
            pass
    except OSError:
        pass
    _kill_all(command)


def _on_parent_death(signum: int, frame: object) -> None:
    for pid in descendants(os.getpid()):  # no lock: the main thread may hold it
        _kill(pid)


def main(argv: list[str]) -> int:
    watch, parent, executable, command = int(argv[1]), int(argv[2]), argv[3], argv[4:]
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    signal.signal(signal.SIGTERM, _on_parent_death)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:
        return 1  # mem died before the parent-death signal was set: run nothing
    pid = os.fork()
    if pid == 0:
        try:
            os.close(watch)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.setsid()
            os.execv(executable, command)  # noqa: S606 - the argv mem was given, no shell
        except OSError as exc:  # not a program (no #! line), or not allowed to run
            try:
                os.write(2, f"cannot run {executable}: {exc.strerror}\n".encode())
            except OSError:
                pass
        finally:
            os._exit(127)
    threading.Thread(target=_watch, args=(watch, pid), daemon=True).start()
    while True:
        try:  # wait for its end without reaping it, so its group id stays its own
            info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
            break
        except InterruptedError:
            continue
    _end(pid)
    if info is None or info.si_code == os.CLD_EXITED:
        return info.si_status if info is not None else 1
    try:  # die of the command's signal, as it did
        signal.signal(info.si_status, signal.SIG_DFL)
    except (OSError, ValueError):
        pass  # SIGKILL, SIGSTOP: default already
    os.kill(os.getpid(), info.si_status)
    return 128 + info.si_status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
