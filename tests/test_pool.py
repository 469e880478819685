"""The worker pool behind `mem compact --all-users --jobs N` and `mem embed --all-users
--jobs N` (ops/pool.py): it gives back what the walk in-process gives, unpickles nothing
a worker sends, ends on a worker's error or death with one line and no worker left, and
hands a worker no MEM_* variable."""

from __future__ import annotations

import os
import pickle
import signal
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from conftest import open_as
from memvault.errors import EX_CONFIG, EX_FAILURE, ConfigError, WorkerFailed
from memvault.model.records import NewMessage
from memvault.model.results import CompactProblem, UserProblem
from memvault.ops import admin, compact, embed, ingest, pool
from memvault.vault.vault import Vault

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="reads /proc to find a worker left behind")

USERS = ("alice", "bob", "carol", "dave", "erin", "frank", "grace")


def messages(n: int, word: str) -> list[NewMessage]:
    old = datetime.now(UTC) - timedelta(days=200)
    return [NewMessage(f"message {i} about {word} number w{i}x",
                       "user" if i % 2 == 0 else "assistant", f"m{i}",
                       (old + timedelta(minutes=i)).strftime("%Y-%m-%dT%H:%M:%SZ"))
            for i in range(n)]


def seeded(vault: Vault) -> list[tuple[str, str]]:
    """Users with old sessions to compact, one of them frozen (an outcome with a
    problem), in the order the walk takes them."""
    for n, user in enumerate(USERS):
        ingest.add_messages(open_as(user), "old", messages(20 + n, user))
    admin.set_frozen(open_as("carol"), True)
    return pool.users(vault.settings.vault, None, None)


def dry_run(vault: Vault) -> compact.Job:
    return compact.Job(vault.settings, vault.master, vault.settings.compaction, True,
                       show_text=False)


def _children() -> set[int]:
    """This process's children, a zombie not yet reaped among them."""
    me, found = os.getpid(), set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[1]) == me:
                found.add(int(name))
    return found


@pytest.fixture
def children() -> Callable[[], set[int]]:
    """The children of this process that were not there when the test began: a server
    that another test started (the whole suite runs in a few processes) is not the
    pool's."""
    before = _children()
    return lambda: _children() - before


@pytest.fixture
def bounded() -> Iterator[None]:
    """A hang fails the test (in 60 s) instead of holding the suite."""
    def late(*_: Any) -> None:
        raise TimeoutError("the pool hung")

    before = signal.signal(signal.SIGALRM, late)
    signal.alarm(60)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)


# --- what the test pools run in their workers -----------------------------------------------


def _init(job: Any, parent: int, watch: tuple[int, int] | None, inherited: list[int]) -> None:
    from memvault.process import die_with_parent

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    assert watch is not None
    os.close(watch[1])
    die_with_parent(parent, watch[0])


def _environ(who: list[tuple[str, str]]) -> list[Any]:
    return [[org, user, sorted(k for k in os.environ if k.startswith("MEM_"))]
            for org, user in who]


def _echo(who: list[tuple[str, str]]) -> list[Any]:
    """Each user back, but "boom" (raises), "broken" (a known error), "victim" (the
    worker is killed) and "sleeper" (never answers)."""
    for _, user in who:
        if user == "boom":
            raise ValueError("what alice said in confidence")
        if user == "broken":
            raise ConfigError("the summariser cannot be started", field="summarizer",
                              hint="no-key")
        if user == "victim":
            time.sleep(0.2)
            os.kill(os.getpid(), signal.SIGKILL)
        if user == "sleeper":
            time.sleep(3600)
    return [[org, user] for org, user in who]


def run(who: list[str], work: Any = _echo, jobs: int = 2, **kw: Any) -> list[Any]:
    return pool.over_users([("acme", u) for u in who], jobs, None, _init, work,
                           lambda _: None, lambda doc: doc, **kw)


# --- the tests --------------------------------------------------------------------------------


def test_a_pool_gives_the_outcomes_and_done_calls_of_the_walk_in_process(
        vault: Vault, children: Callable[[], set[int]]) -> None:
    who = seeded(vault)
    job = dry_run(vault)
    alone = [compact.run_one(job, *one) for one in who]
    assert [(o.org, o.user) for o in alone] == who
    assert any(o.previews for o in alone) and any(o.problems for o in alone)
    told: list[compact.Outcome] = []
    pooled = pool.over_users(who, 3, job, compact._init_worker, compact._work_many,
                             told.append, compact.revive)
    assert pooled == alone  # the same dataclasses, tuples as tuples, in `who`'s order
    assert isinstance(pooled[USERS.index("carol")].problems[0], CompactProblem)
    # Each told once, as its chunk finished (chunks may finish in any order).
    assert sorted(told, key=lambda o: who.index((o.org, o.user))) == alone
    assert list(compact.run_many(job, who, 3)) == alone
    assert children() == set()


def test_an_embedding_pool_revives_its_outcomes(vault: Vault) -> None:
    who = seeded(vault)
    job = embed.Job(vault.settings, vault.master, False)
    outcomes = list(embed.run_many(job, who, 2))
    assert [(o.org, o.user) for o in outcomes] == who
    frozen = outcomes[USERS.index("carol")]
    assert frozen.embedded == 0 and isinstance(frozen.problems[0], UserProblem)
    assert frozen.problems[0].problem == "frozen"
    assert all(o.embedded > 0 for o in outcomes if o is not frozen)
    assert all(embed.pending_count(open_as(u)) == 0 for u in USERS if u != "carol")


def test_nothing_a_worker_sends_is_unpickled(vault: Vault,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import multiprocessing.reduction

    who = seeded(vault)
    job = dry_run(vault)
    alone = [compact.run_one(job, *one) for one in who]

    def refused(*_: Any, **__: Any) -> Any:
        raise AssertionError("unpickled in the parent")

    for where, name in ((pickle, "loads"), (pickle, "load"), (pickle, "Unpickler"),
                        (multiprocessing.reduction.ForkingPickler, "loads")):
        monkeypatch.setattr(where, name, refused)
    assert list(compact.run_many(job, who, 2)) == alone


def test_where_nothing_forks_the_users_are_walked_in_process(
        vault: Vault, monkeypatch: pytest.MonkeyPatch,
        children: Callable[[], set[int]]) -> None:
    who = seeded(vault)
    job = dry_run(vault)
    alone = [compact.run_one(job, *one) for one in who]
    monkeypatch.delattr(os, "fork")  # as on Windows: no pool that would pickle instead
    assert list(compact.run_many(job, who, 4)) == alone
    assert list(embed.run_many(embed.Job(vault.settings, vault.master, False), who, 4))
    assert children() == set()


def test_a_worker_that_raises_ends_the_pool_with_one_line(
        bounded: None, children: Callable[[], set[int]]) -> None:
    users = [f"u{n}" for n in range(40)]
    with pytest.raises(WorkerFailed) as raised:
        run([*users[:20], "boom", *users[20:], "sleeper"], jobs=3)
    line = raised.value.message
    assert line == ("unexpected ValueError in a worker process; run again with "
                    "MEM_DEBUG=1 for its traceback")
    assert raised.value.exit_code == EX_FAILURE
    assert children() == set()  # the others killed and reaped, the sleeper too


def test_a_known_error_in_a_worker_is_the_same_error_line(
        bounded: None, children: Callable[[], set[int]]) -> None:
    with pytest.raises(WorkerFailed) as raised:
        run(["a", "b", "broken", "c"], jobs=2)
    err = raised.value
    assert (err.message, err.exit_code, err.field, err.hint) == \
        ("the summariser cannot be started", EX_CONFIG, "summarizer", "no-key")
    assert children() == set()


def test_a_worker_killed_mid_run_is_an_error_not_a_hang(
        bounded: None, children: Callable[[], set[int]]) -> None:
    users = [f"u{n}" for n in range(30)]
    with pytest.raises(WorkerFailed) as raised:
        run([*users, "victim", "sleeper"], jobs=3)
    assert raised.value.message == \
        "a worker process ended without answering (killed by signal 9)"
    assert children() == set()


def test_a_pool_run_to_its_end_leaves_no_worker(
        bounded: None, children: Callable[[], set[int]]) -> None:
    users = [f"u{n:03}" for n in range(300)]
    assert run(users, jobs=4) == [["acme", u] for u in users]
    assert children() == set()


def test_a_worker_has_no_mem_variable(bounded: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEM_X", "1")
    monkeypatch.setenv("MEM_MASTER_KEY", "a key the worker must not see")
    monkeypatch.setenv("MEM_PROVIDER_KEY", "the embeddings key, named by key_env")
    answers = run(["a", "b", "c", "d"], _environ)
    assert [names for _, _, names in answers] == [[]] * 4
    kept = run(["a", "b"], _environ, keep=("MEM_PROVIDER_KEY",))
    assert [names for _, _, names in kept] == [["MEM_PROVIDER_KEY"]] * 2
    assert os.environ["MEM_X"] == "1"  # the parent's own is untouched


def test_a_job_holds_mem_debug_as_the_parent_read_it(monkeypatch: pytest.MonkeyPatch,
                                                     vault: Vault) -> None:
    """A worker has no MEM_DEBUG: the job it is handed says whether to raise."""
    monkeypatch.setenv("MEM_DEBUG", "1")
    assert dry_run(vault).debug and embed.Job(vault.settings, vault.master, False).debug
    monkeypatch.delenv("MEM_DEBUG")
    assert not dry_run(vault).debug
