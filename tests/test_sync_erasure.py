"""Erasures that sync never undoes: forgets kept in the vault's own state (not the sync
cache), destroys judged by their time against each record's, one name per remote, and
a remote that went backwards (restored from a snapshot, emptied) re-filled with the
erasures it lost. Each machine is a vault under one master key, as in test_sync.py."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from memvault.ops import forget as forget_ops
from memvault.ops import sync as sync_ops
from memvault.ops.admin import destroy
from memvault.ops.ingest import ingest_text
from memvault.ops.prefs import list_ as pref_list
from memvault.ops.prefs import set_ as pref_set
from memvault.ops.remember import add
from memvault.storage.remote import FolderRemote
from memvault.vault.vault import Vault
from tests.sync_oracle import read_remote
from tests.test_sync import CANARY, contents, ids, machine, transcript


@pytest.fixture
def remote(tmp_path: Path) -> FolderRemote:
    (tmp_path / "remote").mkdir()
    return FolderRemote(str(tmp_path / "remote"), tmp_path / "remote")


def forget(v: Vault, *memory_ids: str) -> None:
    forget_ops.forget(v, forget_ops.select(v, list(memory_ids)))


def snapshot(remote: FolderRemote, to: Path) -> None:
    shutil.copytree(remote.root, to)


def restore(remote: FolderRemote, snap: Path) -> None:
    """The folder as a NAS snapshot or a synced folder's history gives it back."""
    shutil.rmtree(remote.root)
    shutil.copytree(snap, remote.root)


def empty(remote: FolderRemote) -> None:
    shutil.rmtree(remote.root)
    remote.root.mkdir()


def after_a_moment() -> None:
    """Records are timed by the millisecond their id was made: one made right after a
    destroy is later than it."""
    time.sleep(0.01)


def everywhere(remote: FolderRemote, *machines: Vault) -> None:
    """Sync each machine twice round: every change reaches every machine."""
    for _ in range(2):
        for v in machines:
            sync_ops.sync(v, remote)


def erased_nowhere(remote: FolderRemote, gone: set[str], *machines: Vault) -> None:
    """The invariant: no erased id on any machine, nor in any object the remote holds
    (read by the independent decryptor, from the format alone)."""
    for v in machines:
        assert not gone & ids(v), v.settings.vault
    assert not gone & set(read_remote(remote.root)["records"])


# --- forgets: the ledger, not the cache -------------------------------------------------


def test_a_forget_not_yet_pushed_survives_the_cache_being_removed(
        tmp_path: Path, remote: FolderRemote) -> None:
    a, b = machine(tmp_path, "a"), machine(tmp_path, "b")
    kept = add(a, "Likes tea", "fact").record.memory_id
    gone = add(a, f"Divorce lawyer {CANARY}", "fact").record.memory_id
    everywhere(remote, a, b)
    forget(a, gone)
    sync_ops.cache_path(a).unlink()  # documented as harmless
    result = sync_ops.sync(a, remote)
    assert result.pulled == 0 and result.erasures_pushed == 1
    assert gone not in ids(a)
    everywhere(remote, a, b)
    erased_nowhere(remote, {gone}, a, b)
    assert kept in ids(a) and kept in ids(b)


@pytest.mark.parametrize("spelling", ["{root}/", "file://{root}", "{root}/../remote"])
def test_another_spelling_of_the_remote_is_the_same_remote(
        tmp_path: Path, remote: FolderRemote, spelling: str) -> None:
    a = machine(tmp_path, "a")
    gone = add(a, f"Sister in Lisbon {CANARY}", "fact").record.memory_id
    sync_ops.sync(a, remote)
    forget(a, gone)
    other = sync_ops.run(a, spelling.format(root=remote.root))
    assert isinstance(other, sync_ops.SyncResult)
    assert other.pulled == 0 and other.remote == str(remote.root.resolve())
    assert gone not in ids(a)
    erased_nowhere(remote, {gone}, a)


def test_a_cache_of_another_format_brings_nothing_back(
        tmp_path: Path, remote: FolderRemote) -> None:
    a = machine(tmp_path, "a")
    gone = add(a, f"Old address {CANARY}", "fact").record.memory_id
    sync_ops.sync(a, remote)
    forget(a, gone)
    path = sync_ops.cache_path(a)
    now = b'"format":%d' % sync_ops.CACHE_FORMAT
    assert now in path.read_bytes()
    path.write_bytes(path.read_bytes().replace(now, b'"format":%d' % (sync_ops.CACHE_FORMAT + 1)))
    assert sync_ops.sync(a, remote).pulled == 0
    erased_nowhere(remote, {gone}, a)


def test_a_pulled_forget_is_kept_in_the_ledger_too(
        tmp_path: Path, remote: FolderRemote) -> None:
    """A machine that took another's forget never takes the record again, whatever the
    remote later shows: b's cache removed and the remote rolled back to before it."""
    a, b = machine(tmp_path, "a"), machine(tmp_path, "b")
    gone = add(a, f"Secret plan {CANARY}", "fact").record.memory_id
    everywhere(remote, a, b)
    snap = tmp_path / "snap"
    snapshot(remote, snap)
    forget(a, gone)
    everywhere(remote, a, b)
    assert gone not in ids(b)
    restore(remote, snap)
    sync_ops.cache_path(b).unlink()
    assert sync_ops.sync(b, remote).pulled == 0
    assert gone not in ids(b)


# --- a remote that went backwards --------------------------------------------------------


def test_a_rolled_back_remote_is_said_and_its_erasures_sent_again(
        tmp_path: Path, remote: FolderRemote) -> None:
    a, b = machine(tmp_path, "a"), machine(tmp_path, "b")
    gone = add(a, f"Therapist {CANARY}", "fact").record.memory_id
    everywhere(remote, a, b)
    snap = tmp_path / "snap"
    snapshot(remote, snap)
    forget(a, gone)
    sync_ops.sync(a, remote)
    restore(remote, snap)  # the forget is gone from the remote; the record is back
    result = sync_ops.sync(a, remote)
    assert result.pulled == 0 and result.went_back > 0 and result.erasures_pushed == 1
    everywhere(remote, a, b)
    erased_nowhere(remote, {gone}, a, b)


def test_a_machine_offline_during_the_forget_cannot_push_it_back(
        tmp_path: Path, remote: FolderRemote) -> None:
    """b held the record and was away while a forgot it; the remote is then emptied: b
    sends the record again, and a (and, after a, b) erase it."""
    a, b = machine(tmp_path, "a"), machine(tmp_path, "b")
    gone = add(a, f"Medical note {CANARY}", "fact").record.memory_id
    kept = add(b, "Uses fish shell", "fact").record.memory_id
    everywhere(remote, a, b)
    forget(a, gone)
    sync_ops.sync(a, remote)
    empty(remote)
    assert sync_ops.sync(b, remote).pushed == 2  # b re-fills it, the forgotten one too
    assert sync_ops.sync(a, remote).pulled == 0
    everywhere(remote, a, b)
    erased_nowhere(remote, {gone}, a, b)
    assert kept in ids(a) and kept in ids(b)


def test_a_remote_emptied_is_filled_again_with_records_and_erasures(
        tmp_path: Path, remote: FolderRemote) -> None:
    a = machine(tmp_path, "a")
    kept = add(a, "Prefers squash merges", "preference").record.memory_id
    gone = add(a, f"Bank pin hint {CANARY}", "fact").record.memory_id
    sync_ops.sync(a, remote)
    forget(a, gone)
    sync_ops.sync(a, remote)
    empty(remote)
    result = sync_ops.sync(a, remote)
    assert result.went_back > 0 and result.pushed == 1 and result.erasures_pushed == 1
    c = machine(tmp_path, "c")
    sync_ops.sync(c, remote)
    assert ids(c) == {kept}


# --- destroys, judged by their time ------------------------------------------------------


def test_an_old_destroy_never_wipes_a_machine_that_stored_after_it(
        tmp_path: Path, remote: FolderRemote) -> None:
    """A new laptop restored from a key backup, used for a while, then synced: the
    remote's old destroy takes nothing it stored."""
    a = machine(tmp_path, "a")
    add(a, f"Before the destroy {CANARY}", "fact")
    sync_ops.sync(a, remote)
    destroy(a, "alice")
    sync_ops.sync(a, remote)
    after_a_moment()
    laptop = machine(tmp_path, "laptop")
    mine = add(laptop, "Likes hiking", "fact").record.memory_id
    ingest_text(laptop, transcript("s1", 4), None, "jsonl", session="laptopsession")
    pref_set(laptop, "editor", "helix")
    held = ids(laptop)
    result = sync_ops.sync(laptop, remote)
    assert result.forgotten == 0 and ids(laptop) == held and mine in held
    assert [p.key for p in pref_list(laptop).prefs] == ["editor"]
    # ... and a, destroyed before, takes the laptop's records, not the old one.
    sync_ops.sync(a, remote)
    assert ids(a) == held
    assert not any("Before the destroy" in c
                   for c in read_remote(remote.root)["records"].values())


def test_a_destroy_erases_what_a_machine_away_stored_before_it_and_keeps_what_after(
        tmp_path: Path, remote: FolderRemote) -> None:
    a, b = machine(tmp_path, "a"), machine(tmp_path, "b")
    old_a = add(a, f"Old fact {CANARY}", "fact").record.memory_id
    old_b = add(b, f"Old note {CANARY}", "fact").record.memory_id
    pref_set(b, "theme", "dark")
    everywhere(remote, a, b)
    destroy(a, "alice")
    sync_ops.sync(a, remote)
    after_a_moment()
    new_b = add(b, "Made after the destroy, away from it", "fact").record.memory_id
    result = sync_ops.sync(b, remote)
    assert result.forgotten == 2
    assert ids(b) == {new_b}
    assert pref_list(b).prefs == ()
    sync_ops.sync(a, remote)
    assert ids(a) == {new_b}
    erased_nowhere(remote, {old_a, old_b}, a, b)


def test_a_destroy_and_recreate_then_a_rolled_back_remote(
        tmp_path: Path, remote: FolderRemote) -> None:
    """The destroy is sent again by the machine that made it once the remote lost it:
    the user made again afterwards keeps its new records on every machine, and the old
    ones come back nowhere, whether the cache is there or not."""
    a, b = machine(tmp_path, "a"), machine(tmp_path, "b")
    old = {add(a, f"Old {i} {CANARY}", "fact").record.memory_id for i in range(3)}
    everywhere(remote, a, b)
    snap = tmp_path / "snap"
    snapshot(remote, snap)
    destroy(a, "alice")
    sync_ops.sync(a, remote)
    after_a_moment()
    new = add(a, "After the destroy", "fact").record.memory_id
    sync_ops.sync(a, remote)
    restore(remote, snap)
    sync_ops.cache_path(a).unlink()
    result = sync_ops.sync(a, remote)
    assert result.destroy_pushed and result.pulled == 0
    assert ids(a) == {new}
    everywhere(remote, a, b)
    assert ids(a) == ids(b) == {new}
    erased_nowhere(remote, old, a, b)


def test_a_destroy_on_a_new_machine_with_nothing_is_recorded_once(
        tmp_path: Path, remote: FolderRemote) -> None:
    a = machine(tmp_path, "a")
    add(a, f"Gone {CANARY}", "fact")
    sync_ops.sync(a, remote)
    destroy(a, "alice")
    sync_ops.sync(a, remote)
    c = machine(tmp_path, "c")
    first = sync_ops.sync(c, remote)
    second = sync_ops.sync(c, remote)
    assert (first.pulled, second.pulled, second.forgotten) == (0, 0, 0)
    assert not c.exists()


# --- the command line ---------------------------------------------------------------------


def test_sync_says_the_erasures_it_sent(tmp_path: Path, remote: FolderRemote,
                                        script_runner: Any) -> None:
    from tests.conftest import mem

    a = machine(tmp_path, "a")
    made = [add(a, f"fact {i}", "fact").record.memory_id for i in range(5)]
    env = {"MEM_VAULT": str(tmp_path / "a")}
    assert mem(script_runner, "sync", "--remote", str(remote.root), **env).returncode == 0
    forget(a, *made[:3])
    shown = mem(script_runner, "sync", **env)
    assert shown.returncode == 0
    assert re.search(r"^erasures sent +3$", shown.stdout, re.M), shown.stdout


@pytest.mark.parametrize("given", ["~nosuchuser9/x", "file://", "", "file://otherhost/x"])
def test_a_remote_that_names_no_folder_is_refused_and_not_saved(
        tmp_path: Path, script_runner: Any, given: str) -> None:
    from tests.conftest import mem

    a = machine(tmp_path, "a")
    add(a, "fact", "fact")
    work = tmp_path / "work"
    work.mkdir()
    shown = mem(script_runner, "sync", "--remote", given, cwd=work,
                MEM_VAULT=str(tmp_path / "a"), MEM_CONFIG_DIR=str(tmp_path / "config"))
    assert shown.returncode in (2, 78), shown.stderr
    assert len(shown.stderr.strip().splitlines()) == 1 and "Traceback" not in shown.stderr
    assert list(work.iterdir()) == []  # nothing written where it ran
    assert not (tmp_path / "config" / "config.yaml").exists()


def test_doctor_names_the_remote_a_plain_sync_uses(
        tmp_path: Path, remote: FolderRemote, script_runner: Any) -> None:
    from tests.conftest import mem

    a = machine(tmp_path, "a")
    add(a, "fact", "fact")
    other = tmp_path / "other"
    other.mkdir()
    sync_ops.run(a, str(other))
    shown = mem(script_runner, "doctor", MEM_VAULT=str(tmp_path / "a"),
                MEM_SYNC_REMOTE=str(remote.root))
    assert f"never synced with {remote.root}" in shown.stdout
    assert contents(a)
