"""The walk over many users with worker processes: what compaction and embedding share.

Forked where the platform can (a spawned worker is a new interpreter, which imports from
the current folder, and is handed the job, key included, pickled). Each worker dies with
this process. What a worker sends back (an outcome: counts, and problems as text) is
unpickled by the pool: it comes from a process of the same program holding the same
key, so it crosses no trust boundary. Stopped (Ctrl-C, or a failure that ends the run),
the pool is ended at once, its workers killed where they are and waited for."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

Outcome = TypeVar("Outcome")
User = tuple[str, str]

REAP_WAIT = 10.0  # seconds a killed worker has to be gone (a bound, not an estimate)


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


def over_users(who: list[User], jobs: int, job: Any,
               init_worker: Callable[[Any, int, tuple[int, int] | None, list[int]], None],
               work_many: Callable[[list[User]], list[Outcome]],
               done: Callable[[Outcome], None]) -> list[Outcome]:
    """Run `work_many` over chunks of `who` in `jobs` workers (each set up once by
    `init_worker(job, parent, watch, inherited)`); `done` is told of each outcome as its
    chunk finishes (one slow user holds back no count); the outcomes in `who`'s order."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from memvault.process import open_fds

    forked = "fork" in multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if forked else None)
    inherited = open_fds() if forked else []  # before the pool's own pipes exist
    watch = os.pipe() if forked else None
    size = max(1, min(32, len(who) // (jobs * 4)))
    chunks = [who[at:at + size] for at in range(0, len(who), size)]
    results: list[list[Outcome]] = [[] for _ in chunks]
    try:
        pool = ProcessPoolExecutor(max_workers=jobs, mp_context=context,
                                   initializer=init_worker,
                                   initargs=(job, os.getpid(), watch, inherited))
        try:
            futures = {pool.submit(work_many, chunk): n for n, chunk in enumerate(chunks)}
            for future in as_completed(futures):
                results[futures[future]] = future.result()
                for out in results[futures[future]]:
                    done(out)
        except BaseException:
            stop(pool)
            raise
        pool.shutdown(wait=True)
    finally:
        for fd in watch or ():
            os.close(fd)
    return [out for outcomes in results for out in outcomes]


def stop(pool: object) -> None:
    """End a pool now: no new user is begun, its workers are killed and reaped."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    assert isinstance(pool, ProcessPoolExecutor)
    pool.shutdown(wait=False, cancel_futures=True)
    for child in multiprocessing.active_children():
        child.kill()
    for child in multiprocessing.active_children():
        child.join(REAP_WAIT)
