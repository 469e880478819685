"""A sync's large sets of ids past ids.SPILL: kept in an unlinked scratch table on disk
(model/ids.py), answering as they do in memory. A pull past the threshold ends as one
below it (the same records, counts and cache), the sync after it too, and a kill leaves
no scratch file behind and nothing taken twice."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memvault.model import ids as ids_mod
from memvault.model.ids import IdList, IdMap, IdSet, Joining, Scratch
from memvault.model.records import uuid7
from memvault.ops import sync as sync_ops
from memvault.ops.remember import add
from memvault.ops.verify import verify
from memvault.storage.remote import FolderRemote
from memvault.vault.vault import Vault
from tests.test_sync import concurrent_round, contents, ids, machine
from tests.test_sync_ids import ANY_ID, owners_answer_as_a_dict
from tests.test_sync_pull import fill


def _connect(folder: Path) -> Callable[[], Any]:
    def connect() -> Any:
        path = folder / f"scratch.{len(list(folder.iterdir()))}"
        db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        for pragma in ("journal_mode=OFF", "locking_mode=EXCLUSIVE", "user_version=1"):
            db.execute(f"PRAGMA {pragma}")
        path.unlink()
        return db
    return connect


@settings(max_examples=60, deadline=None)
@given(st.lists(ANY_ID, max_size=120), st.lists(ANY_ID, max_size=60),
       st.lists(st.sampled_from(["a", "b", "c"]), min_size=1), st.integers(1, 40))
def test_past_the_threshold_the_compact_forms_answer_as_sets_and_dicts_do(
        held: list[str], others: list[str], names: list[str], spill: int) -> None:
    import tempfile

    was = ids_mod.SPILL
    ids_mod.SPILL = spill
    try:
        with tempfile.TemporaryDirectory() as folder, \
                ids_mod.spilling(_connect(Path(folder))):
            _answers_as_sets(held, others, names)
    finally:
        ids_mod.SPILL = was


def _answers_as_sets(held: list[str], others: list[str], names: list[str]) -> None:
    ids, seen = IdSet(held), set(held)
    for i in others[::2] + held[::3]:
        ids.discard(i)
        seen.discard(i)
    assert len(ids) == len(seen) and set(ids) == seen and bool(ids) == bool(seen)
    assert all((i in ids) == (i in seen) for i in held + others)
    small = IdSet(others[:3])  # in memory beside one on disk, both ways
    assert sorted(ids.minus(IdSet(others))) == sorted(seen - set(others))
    assert sorted(ids.minus(small)) == sorted(seen - set(others[:3]))
    assert sorted(small.minus(ids)) == sorted(set(others[:3]) - seen)
    assert sorted(ids.minus(set(others))) == sorted(seen - set(others))
    listed = IdList.of(held * 3)
    assert list(listed) == list(IdList.of(held * 3)) and len(listed) == 3 * len(held)
    assert sorted(listed) == sorted(held * 3)
    assert all(i in listed for i in held) and not any(
        i in listed for i in others if i not in held)
    assert IdList.from_json(listed.to_json()) == listed
    assert listed.any_in(IdSet(others)) == bool(set(held) & set(others))
    assert sorted(listed.minus(IdSet(others))) == sorted(
        i for i in held * 3 if i not in others)
    making = Joining()
    for at in range(0, len(listed.packed), 16 * 7):
        making.add(listed.packed[at:at + 16 * 7])
    assert making.done(listed.other) == listed
    grown = IdSet(others)
    grown.update(listed)
    grown.difference_update(IdList.of(others[1::2]))
    assert set(grown) == (set(others) | set(held)) - set(others[1::2])
    assert sorted(b"".join(grown.blocks())) == sorted(b"".join(grown.keys()))
    owners, owned = owners_answer_as_a_dict(held, others, names)
    assert dict(owners.missing_from(small)) == {
        i: n for i, n in owned.items() if i not in set(others[:3])}
    assert sorted(IdSet(others).minus(owners)) == sorted(set(others) - set(owned))


def test_a_table_and_a_list_past_the_threshold_hold_their_ids_on_disk(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What spilled is in the scratch, not in memory: a table's buckets are empty, a
    list holds rows; a list freed takes its rows with it."""
    import tracemalloc

    monkeypatch.setattr(ids_mod, "SPILL", 1000)
    many = [uuid7() for _ in range(20_000)]
    folder = tmp_path / "scratch"
    folder.mkdir()
    with ids_mod.spilling(_connect(folder)) as scratch:
        tracemalloc.start()
        try:
            held = IdSet(many)
            owners = IdMap()
            owners.table.reserve(len(many))
            owners.setdefault_all(IdList.of(many), "ns/o/k-1")
            lists = [IdList.of(many[at:at + 2000]) for at in range(0, len(many), 2000)]
            used = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        assert len(held) == len(owners) == sum(map(len, lists)) == len(many)
        assert used < 16 * len(many) / 4  # a quarter of the ids' own bytes, at most
        assert scratch.tables == 2 and not held.table.buckets
        rows = scratch.db.execute("SELECT count(*) FROM l").fetchone()[0]
        assert rows >= 8
        del lists  # their rows go as the next list is kept
        one = IdList.of(many)  # 5 chunks of 4096 ids
        assert scratch.db.execute("SELECT count(*) FROM l").fetchone()[0] == 5
        assert list(one) == many
    assert not list(folder.iterdir())  # unlinked from the start
    with pytest.raises((RuntimeError, sqlite3.Error)):  # closed with its block
        list(held)


@contextmanager
def _watched(scratches: list[Scratch]) -> Iterator[Callable[..., Any]]:
    real = sync_ops.spilling

    @contextmanager
    def spilling(connect: Callable[[], Any]) -> Iterator[Scratch]:
        with real(connect) as scratch:
            scratches.append(scratch)
            yield scratch
    yield spilling


def _scratch_files(v: Vault) -> list[Path]:
    return sorted(v.layout.org_dir.glob(".sync/.tmp-*"))


def _cache(v: Vault) -> tuple[Any, ...]:
    c = sync_ops.load_cache(sync_ops.cache_path(v), sync_ops.Session(v, None).kek)  # type: ignore[arg-type]
    objects = {n: (i["kind"], sorted(i.get("ids", ())), sorted(i.get("archived", ())))
               for n, i in c.objects.items()}
    files = {r: sorted(known[2]) for r, known in c.files.items()}
    return objects, files, sorted(c.local)


def _filled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Vault, FolderRemote]:
    """Machine a, its records synced to a folder remote, in pages and batches small
    enough that a few dozen records take many of each."""
    (tmp_path / "remote").mkdir()
    remote = FolderRemote(str(tmp_path / "remote"), tmp_path / "remote")
    monkeypatch.setattr(sync_ops, "PAGE", 7)
    monkeypatch.setattr(sync_ops, "BATCH", 10)
    a = machine(tmp_path, "a")
    fill(a)
    sync_ops.sync(a, remote)
    return a, remote


def test_a_pull_and_the_sync_after_it_past_the_threshold_end_as_below_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, remote = _filled(tmp_path, monkeypatch)
    below = sync_ops.sync(machine(tmp_path, "below"), remote)

    monkeypatch.setattr(ids_mod, "SPILL", 4)
    scratches: list[Scratch] = []
    with _watched(scratches) as watching:
        monkeypatch.setattr(sync_ops, "spilling", watching)
        past = sync_ops.sync(machine(tmp_path, "past"), remote)
    assert scratches and scratches[-1].tables >= 2  # the listing's map and the scan, on disk
    b, c = Vault(machine(tmp_path, "below").settings), Vault(machine(tmp_path, "past").settings)
    assert (past.pulled, past.pushed) == (below.pulled, below.pushed) == (41, 0)
    assert contents(c) == contents(b) == contents(a)
    assert (verify(c).ok, verify(c).records_checked, verify(c).files_checked) == \
        (True, verify(b).records_checked, verify(b).files_checked)
    assert _cache(c) == _cache(b)
    assert not _scratch_files(c)

    # The sync after it, past the threshold again: nothing moves, then one new record.
    again = sync_ops.sync(c, remote)
    assert (again.pulled, again.pushed) == (0, 0)
    new = add(a, "one more fact", "fact").record.memory_id
    sync_ops.sync(a, remote)
    took = sync_ops.sync(c, remote)
    assert (took.pulled, took.pushed) == (1, 0) and new in contents(c)
    mine = add(c, "a fact of the machine past it", "fact").record.memory_id
    assert sync_ops.sync(c, remote).pushed == 1
    assert sync_ops.sync(a, remote).pulled == 1 and mine in contents(a)
    assert contents(c) == contents(a) and verify(c).ok
    assert not _scratch_files(c)


def test_two_syncs_at_once_in_one_process_past_the_threshold_each_keep_their_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each sync's scratch is its thread's: one ending does not close the other's."""
    from tests.test_sync import read_remote

    (tmp_path / "remote").mkdir()
    monkeypatch.setattr(ids_mod, "SPILL", 4)
    concurrent_round(tmp_path, lambda: FolderRemote(str(tmp_path / "remote"),
                                                    tmp_path / "remote"))
    assert set(read_remote(tmp_path / "remote")["records"]) == ids(machine(tmp_path, "a"))


KILLER = """
import os, signal, sys
from pathlib import Path
from memvault.model import ids
from memvault.ops import sync as sync_ops
from memvault.storage.remote import FolderRemote
from tests.test_sync import machine

ids.SPILL, sync_ops.PAGE, sync_ops.BATCH = 4, 7, 10
point = sys.argv[1]
if point == "batch":  # after the first batch, in the second, on a spilled pull
    stored, calls = sync_ops._add_records, [0]
    def killed(*args):
        calls[0] += 1
        if calls[0] == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        return stored(*args)
    sync_ops._add_records = killed
else:  # the scratch made, not yet unlinked
    real = Path.unlink
    def unlink(self, *args, **kwargs):
        if self.name.startswith(".tmp-ids."):
            os.kill(os.getpid(), signal.SIGKILL)
        return real(self, *args, **kwargs)
    Path.unlink = unlink
root = Path(sys.argv[2])
sync_ops.sync(machine(root, "b"), FolderRemote(str(root / "remote"), root / "remote"))
"""


@pytest.mark.parametrize("point", ["batch", "unlink"])
def test_a_spilled_pull_killed_leaves_no_scratch_and_takes_nothing_twice(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: str) -> None:
    a, remote = _filled(tmp_path, monkeypatch)
    machine(tmp_path, "b")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-c", KILLER, point, str(tmp_path)], env=env,
                          cwd=Path(__file__).parents[1], capture_output=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    b = Vault(machine(tmp_path, "b").settings)
    held = len(contents(b))
    if point == "batch":  # the scratch was unlinked as it was opened: nothing there
        assert not _scratch_files(b) and 10 <= held < 41
    else:  # killed before its unlink: the next sync of this user removes it
        assert len(_scratch_files(b)) == 1 and held == 0
    monkeypatch.setattr(ids_mod, "SPILL", 4)
    result = sync_ops.sync(b, remote)
    assert result.pulled == 41 - held  # nothing taken twice
    assert contents(b) == contents(a)
    checked = verify(b)
    assert checked.ok and checked.records_checked == len(contents(a))
    assert not _scratch_files(b)
