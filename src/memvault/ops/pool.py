"""The walk over many users with worker processes: what compaction and embedding share.

A small pool of our own, forked where the platform can (a spawned worker would be a new
interpreter, which imports from the current folder, and would be handed the job, key
included, pickled); where it cannot, callers walk the users in-process, one after the
other. Each worker dies with this process, drops every `MEM_*` variable before any
work (the job holds the settings it needs, resolved), takes chunks of users as JSON
lines on one pipe and answers each with one JSON line on another: outcomes as plain
data, which the caller's `revive` makes its dataclasses again, or an error (its type,
message and exit code: never a traceback, never a pickled exception). Nothing a worker
sends is unpickled. Stopped (Ctrl-C, a worker's error, a worker that dies without
answering), the pool is ended at once, its workers killed where they are and reaped."""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from memvault.errors import EX_FAILURE, MemError, WorkerFailed

Outcome = TypeVar("Outcome")
User = tuple[str, str]

REAP_WAIT = 10.0  # seconds a killed worker has to be gone (a bound, not an estimate)
ASKED_NOT = "a worker process answered something it was not asked for"


def shard_of(org: str, user: str, count: int) -> int:
    """A stable shard number in 0..count-1 (the same on every host and every run)."""
    import hashlib

    digest = hashlib.sha256(f"{org}/{user}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % count


def users(vault: Path, org: str | None, shard: tuple[int, int] | None) -> list[User]:
    """Every user of the org (or of the vault), or of one stable shard of them: the same
    split for compaction and embedding, so that a host compacts and embeds the same
    users."""
    from memvault.storage.layout import users as all_users

    found = list(all_users(vault, org))
    if shard is not None:
        k, n = shard
        found = [(o, u) for o, u in found if shard_of(o, u, n) == k]
    return found


def can_fork() -> bool:
    """Whether workers can be forked here (not on Windows): where not, a caller walks
    its users in-process rather than hand a spawned worker a pickled job."""
    return hasattr(os, "fork")


@dataclass
class _Worker:
    pid: int
    tasks: int  # the write end of its task pipe (-1: closed)
    answers: int  # the read end of its answer pipe
    chunk: int | None = None  # the chunk it is working on
    unread: bytes = b""


def over_users(who: list[User], jobs: int, job: Any,
               init_worker: Callable[[Any, int, tuple[int, int] | None, list[int]], None],
               work_many: Callable[[list[User]], list[Outcome]],
               done: Callable[[Outcome], None], revive: Callable[[Any], Outcome],
               keep: Collection[str] = ()) -> list[Outcome]:
    """Run `work_many` over chunks of `who` in `jobs` forked workers (each set up once by
    `init_worker(job, parent, watch, inherited)`, with no `MEM_*` variable but those
    named in `keep`); `done` is told of each outcome as its chunk finishes (one slow
    user holds back no count); the outcomes, made again by `revive` from their JSON, in
    `who`'s order. A worker's error, or its death before it answered, is WorkerFailed."""
    import selectors

    from memvault.process import open_fds

    inherited = open_fds()  # before the pool's own pipes exist
    parent = os.getpid()
    debug = bool(os.environ.get("MEM_DEBUG"))
    size = max(1, min(32, len(who) // (jobs * 4)))
    chunks = [who[at:at + size] for at in range(0, len(who), size)]
    results: list[list[Outcome]] = [[] for _ in chunks]
    queue: Iterator[int] = iter(range(len(chunks)))
    workers: list[_Worker] = []
    watch = os.pipe()
    try:
        # Every fork before any selector or thread of the pool exists, from this thread.
        for _ in range(min(jobs, len(chunks))):
            workers.append(_fork(workers, watch, keep, debug,
                                 lambda: init_worker(job, parent, watch, inherited),
                                 work_many))
        with selectors.DefaultSelector() as selector:
            for worker in workers:
                selector.register(worker.answers, selectors.EVENT_READ, worker)
                _give(worker, queue, chunks)
            while selector.get_map():
                for key, _ in selector.select():
                    worker = key.data
                    read = os.read(worker.answers, 1 << 16)
                    if not read:  # it exited (on its tasks' end) or died
                        selector.unregister(worker.answers)
                        _ended(worker)
                        continue
                    worker.unread += read
                    while b"\n" in worker.unread:
                        line, _, worker.unread = worker.unread.partition(b"\n")
                        outcomes = _answer(line, revive)  # an error line raises
                        if worker.chunk is None:
                            raise WorkerFailed(ASKED_NOT)
                        results[worker.chunk] = outcomes
                        for out in outcomes:
                            done(out)
                        _give(worker, queue, chunks)
    except BaseException:
        stop(workers)
        raise
    finally:
        for fd in watch:
            os.close(fd)
    return [out for outcomes in results for out in outcomes]


def _fork(others: list[_Worker], watch: tuple[int, int], keep: Collection[str],
          debug: bool, init: Callable[[], None],
          work_many: Callable[[list[User]], list[Any]]) -> _Worker:
    tasks, tasks_w = os.pipe()
    answers_r, answers = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        for fd in (tasks, tasks_w, answers_r, answers):
            os.close(fd)
        raise
    if pid:
        os.close(tasks)
        os.close(answers)
        return _Worker(pid, tasks_w, answers_r)
    code = 1
    try:  # the worker: it never returns into the parent's code
        from memvault.process import forget_mem_settings

        os.close(tasks_w)
        os.close(answers_r)
        for other in others:  # no other worker's task pipe stays open through this one
            for fd in (other.tasks, other.answers):
                os.close(fd)
        forget_mem_settings(keep)
        null = os.open(os.devnull, os.O_RDONLY)  # the terminal's input is not a worker's
        os.dup2(null, 0)
        os.close(null)
        _serve(tasks, answers, init, work_many, debug)
        code = 0
    finally:
        os._exit(code)


def _serve(tasks: int, answers: int, init: Callable[[], None],
           work_many: Callable[[list[User]], list[Any]], debug: bool) -> None:
    """A worker's life: set up, then one answer line per chunk, until its tasks end."""
    import orjson

    with open(tasks, "rb") as inbox, open(answers, "wb") as outbox:
        try:
            init()
            for line in inbox:
                chunk = [(str(org), str(user)) for org, user in orjson.loads(line)]
                outbox.write(orjson.dumps(work_many(chunk)) + b"\n")
                outbox.flush()
        except Exception as exc:
            if debug:
                import traceback

                traceback.print_exc()
            outbox.write(orjson.dumps(_error(exc)) + b"\n")
            raise


def _error(exc: Exception) -> dict[str, Any]:
    """A worker's error as one line: a known error's message and exit code, another's
    type only (its text may hold what was read, and is never shown: as in-process)."""
    if not isinstance(exc, MemError):
        return {"error": type(exc).__name__}
    source = exc.details.get("source")
    return {"error": type(exc).__name__, "message": exc.message, "exit_code": exc.exit_code,
            "field": exc.field, "hint": exc.hint,
            "source": source if isinstance(source, str) else None}


def _answer(line: bytes, revive: Callable[[Any], Outcome]) -> list[Outcome]:
    """A chunk's outcomes from a worker's line, or WorkerFailed for its error line (or
    for anything else: malformed, or not the shape of an outcome)."""
    import orjson

    try:
        answer = orjson.loads(line)
        if isinstance(answer, list):
            return [revive(doc) for doc in answer]
    except (ValueError, TypeError, KeyError, AttributeError):
        raise WorkerFailed(ASKED_NOT) from None
    raise _failure(answer)


def _failure(answer: Any) -> WorkerFailed:
    """The parent's error for a worker's error line."""
    if not isinstance(answer, dict) or not isinstance(answer.get("error"), str):
        return WorkerFailed(ASKED_NOT)
    name = answer["error"] if answer["error"].isidentifier() else "error"
    message, code = answer.get("message"), answer.get("exit_code")
    if not isinstance(message, str):
        return WorkerFailed(f"unexpected {name[:64]} in a worker process; run again with "
                            "MEM_DEBUG=1 for its traceback")
    code = code if isinstance(code, int) and 0 < code < 256 else EX_FAILURE
    text = [v if isinstance(v, str) else None
            for v in (answer.get("field"), answer.get("hint"), answer.get("source"))]
    return WorkerFailed(message, code, field=text[0], hint=text[1],
                        **({"source": text[2]} if text[2] else {}))


def _give(worker: _Worker, queue: Iterator[int], chunks: list[list[User]]) -> None:
    """A worker's next chunk, or the end of its tasks (it exits 0 once it reads it)."""
    import orjson

    worker.chunk = next(queue, None)
    if worker.chunk is None:
        os.close(worker.tasks)
        worker.tasks = -1
        return
    line = memoryview(orjson.dumps(chunks[worker.chunk]) + b"\n")
    while line:  # the worker is idle and reading: a pipe's buffer never blocks this long
        line = line[os.write(worker.tasks, line):]


def _ended(worker: _Worker) -> None:
    """A worker's answers ended: reaped; if it owed one, it died (WorkerFailed)."""
    _, status = os.waitpid(worker.pid, 0)
    os.close(worker.answers)
    worker.answers = worker.pid = -1
    if worker.chunk is not None:
        how = (f"killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
               else f"exit status {os.waitstatus_to_exitcode(status)}")
        raise WorkerFailed(f"a worker process ended without answering ({how})")


def stop(workers: list[_Worker]) -> None:
    """End a pool now: no new user is begun, its workers are killed and reaped."""
    import signal
    import time

    for worker in workers:
        for fd in (worker.tasks, worker.answers):
            if fd >= 0:
                os.close(fd)
        worker.tasks = worker.answers = -1
        if worker.pid > 0:
            with _gone():
                os.kill(worker.pid, signal.SIGKILL)
    deadline = time.monotonic() + REAP_WAIT
    for worker in workers:
        while worker.pid > 0 and time.monotonic() < deadline:
            with _gone():
                if os.waitpid(worker.pid, os.WNOHANG)[0] == 0:
                    time.sleep(0.01)
                    continue
            worker.pid = -1


def _gone() -> Any:
    import contextlib

    return contextlib.suppress(ChildProcessError, ProcessLookupError)
