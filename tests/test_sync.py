"""`mem sync`: machines sharing one master key converge through a folder remote (and an
S3-compatible server: test_sync_s3.py); the remote holds only ciphertext."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memvault.config import resolve
from memvault.errors import Refused
from memvault.ops import forget as forget_ops
from memvault.ops import sync as sync_ops
from memvault.ops.admin import init, set_frozen
from memvault.ops.ingest import ingest_text
from memvault.ops.keys import rotate_key
from memvault.ops.remember import add
from memvault.storage.remote import FolderRemote
from memvault.vault.vault import Vault
from tests.conftest import examples
from tests.sync_oracle import MASTER, as_format_1, read_remote

CANARY = "zebracanary"


def machine(tmp: Path, name: str, key: bytes = MASTER) -> Vault:
    """A machine's vault for user alice, under the shared master key."""
    os.environ["MEM_MASTER_KEY"] = base64.b64encode(key).decode()
    settings = resolve(vault=tmp / name)
    if not (tmp / name / "vault.json").exists():
        init(settings)
    return Vault(settings)


def ids(v: Vault) -> set[str]:
    return set(sync_ops.scan_local(v))


def contents(v: Vault) -> dict[str, str]:
    return {r.memory_id: r.content for r in v.store.records()} if v.exists() else {}


@pytest.fixture
def remote(tmp_path: Path) -> FolderRemote:
    (tmp_path / "remote").mkdir()
    return FolderRemote(str(tmp_path / "remote"), tmp_path / "remote")


def transcript(session: str, n: int, start: int = 0) -> str:
    return "\n".join(json.dumps({"id": f"m{i}", "role": "user" if i % 2 else "assistant",
                                 "content": f"{CANARY} message {i} about topic{i}",
                                 "timestamp": f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z"})
                     for i in range(start, n))


def assert_nothing_plain(root: Path, *needles: str) -> None:
    """No object's name or bytes on a folder remote hold any of these in clear."""
    for path in root.rglob("*"):
        text = str(path.relative_to(root)).encode()
        data = path.read_bytes() if path.is_file() else b""
        for needle in needles:
            assert needle.encode() not in data + text, (path, needle)


def test_two_machines_union_and_nothing_plain_on_the_remote(
        tmp_path: Path, remote: FolderRemote) -> None:
    a, b = machine(tmp_path, "a"), machine(tmp_path, "b")
    add(a, f"Prefers green tea {CANARY}", "preference", tags=["secrettag"])
    ingest_text(b, transcript("s1", 6), None, "jsonl", session="projectsession")
    ra = sync_ops.sync(a, FolderRemote(remote.url, remote.root))
    rb = sync_ops.sync(b, remote)
    ra2 = sync_ops.sync(a, remote)
    assert (ra.pushed, rb.pushed, rb.pulled, ra2.pulled) == (1, 6, 1, 6)
    assert contents(a) == contents(b) and len(contents(a)) == 7
    # A second round moves nothing: converged.
    assert (sync_ops.sync(b, remote).pushed, sync_ops.sync(a, remote).pulled) == (0, 0)
    # Nothing on the remote names or holds what the memory says.
    assert_nothing_plain(remote.root, CANARY, "secrettag", "projectsession", "alice",
                         "green tea")
    assert set(read_remote(remote.root)["records"]) == ids(a)


def test_forget_reaches_every_machine_and_leaves_the_remote(
        tmp_path: Path, remote: FolderRemote) -> None:
    a, b = machine(tmp_path, "a"), machine(tmp_path, "b")
    gone = add(a, "Lives at 12 Canary Lane", "fact").record.memory_id
    kept = add(a, "Likes hiking", "fact").record.memory_id
    ingest_text(a, transcript("s1", 4), None, "jsonl", session="s1")
    sync_ops.sync(a, remote)
    sync_ops.sync(b, remote)
    message = next(r for r in b.store.records() if r.message_id == "m1").memory_id
    forget_ops.forget(b, forget_ops.select(b, [gone, message]))
    assert sync_ops.sync(b, remote).erasures_pushed == 2
    assert sync_ops.sync(a, remote).forgotten == 2
    assert gone not in ids(a) and message not in ids(a) and kept in ids(a)
    seen = read_remote(remote.root)
    assert gone not in seen["records"] and message not in seen["records"]
    assert "Canary Lane" not in json.dumps(seen["records"])
    # A re-ingest of the transcript on the other machine does not bring it back.
    ingest_text(a, transcript("s1", 4), None, "jsonl", session="s1")
    sync_ops.sync(a, remote)
    sync_ops.sync(b, remote)
    assert not any(r.message_id == "m1" for r in a.store.records())
    assert ids(a) == ids(b)


def test_another_vaults_remote_is_refused_before_anything_changes(
        tmp_path: Path, remote: FolderRemote) -> None:
    a = machine(tmp_path, "a")
    add(a, "Likes hiking", "fact")
    sync_ops.sync(a, remote)
    before = sorted(p.name for p in remote.root.rglob("*"))
    stranger = machine(tmp_path, "s", key=bytes(32))
    add(stranger, "Something else", "fact")
    # The stranger's namespace differs; pointing it at a's keys is the attack.
    ns_a = next(p.name for p in remote.root.iterdir() if p.name != "u")
    fake = Vault(stranger.settings, master=stranger.master)
    session = sync_ops.Session(fake, remote)
    session.ns = ns_a
    with pytest.raises(Refused):
        session.check_keys(session.listing()[0])
    # Its own sync is refused too: the directory of users holds an entry of a's key.
    with pytest.raises(Refused):
        sync_ops.sync(stranger, remote)
    assert sorted(p.name for p in remote.root.rglob("*")) == before


def test_damaged_duplicated_and_emptied_remote_objects(
        tmp_path: Path, remote: FolderRemote) -> None:
    a, b = machine(tmp_path, "a"), machine(tmp_path, "b")
    for i in range(3):
        add(a, f"fact number {i}", "fact")
    sync_ops.sync(a, remote)
    obj = next(remote.root.rglob("o/*"))
    (obj.parent / (obj.name[:-1] + ("0" if obj.name[-1] != "0" else "1"))).write_bytes(
        obj.read_bytes())  # a copy under another name does not open (its name is AAD)
    result = sync_ops.sync(b, remote)
    assert result.pulled == 3 and result.damaged == 1
    # A remote rolled back to empty is filled again by a machine that holds the records.
    for path in sorted(remote.root.rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    assert sync_ops.sync(b, remote).pushed == 3
    assert len(read_remote(remote.root)["records"]) == 3


def test_objects_of_the_first_format_are_read_and_a_changed_format_byte_is_not(
        tmp_path: Path, remote: FolderRemote) -> None:
    """A remote written by an earlier mem (zlib, format 1) still syncs; the format byte is
    bound by the AAD, so an object whose byte was changed is damaged, not misread."""
    a, b = machine(tmp_path, "a"), machine(tmp_path, "b")
    for i in range(3):
        add(a, f"fact number {i}", "fact")
    sync_ops.sync(a, remote)
    (obj,) = remote.root.rglob("o/*")
    assert obj.read_bytes()[4] == 2
    as_format_1(remote.root, obj)
    result = sync_ops.sync(b, remote)
    assert (result.pulled, result.damaged) == (3, 0)
    assert sorted(contents(b).values()) == sorted(contents(a).values())
    c = machine(tmp_path, "c")
    blob = obj.read_bytes()
    obj.write_bytes(blob[:4] + b"\x02" + blob[5:])
    result = sync_ops.sync(c, remote)
    assert (result.pulled, result.damaged) == (0, 1) and not contents(c)


def test_freeze_and_rotation_travel(tmp_path: Path, remote: FolderRemote) -> None:
    a, b = machine(tmp_path, "a"), machine(tmp_path, "b")
    add(a, "Likes hiking", "fact")
    sync_ops.sync(a, remote)
    sync_ops.sync(b, remote)
    set_frozen(a, True)
    add(b, "Stored on b before the freeze reached it", "fact")
    # A freeze refuses this machine's writes, not the merge: b's record, acknowledged
    # there, reaches the frozen a, which stays frozen; the freeze reaches b.
    sync_ops.sync(a, remote)
    sync_ops.sync(b, remote)
    assert sync_ops.sync(a, remote).pulled == 1 and a.state().frozen
    assert contents(a) == contents(b)
    assert b.state().frozen
    set_frozen(b, False)
    sync_ops.sync(b, remote)
    sync_ops.sync(a, remote)
    assert not a.state().frozen
    old_keys = {p.name for p in remote.root.rglob("k/*")}
    epoch_b = b.state().key_version
    rotate_key(a, now=True)
    sync_ops.sync(a, remote)
    assert not old_keys & {p.name for p in remote.root.rglob("k/*")}  # old key deleted
    sync_ops.sync(b, remote)
    assert b.state().key_version > epoch_b  # b re-encrypted under a new epoch of its own
    assert contents(a) == contents(b)


def test_destroy_reaches_every_machine(tmp_path: Path, remote: FolderRemote) -> None:
    from memvault.ops.admin import destroy

    a, b = machine(tmp_path, "a"), machine(tmp_path, "b")
    add(a, f"Likes {CANARY}", "fact")
    sync_ops.sync(a, remote)
    sync_ops.sync(b, remote)
    destroy(a, "alice")
    sync_ops.sync(a, remote)
    sync_ops.sync(b, remote)
    assert not b.exists()
    assert read_remote(remote.root)["records"] == {}


OPS = st.lists(st.tuples(st.sampled_from(["add", "ingest", "supersede", "forget", "sync",
                                          "compact", "rotate"]),
                         st.integers(0, 2), st.integers(0, 5)), min_size=1, max_size=14)


@settings(max_examples=examples(12), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(OPS)
def test_three_machines_converge(tmp_path_factory: pytest.TempPathFactory,
                                 steps: list[tuple[str, int, int]]) -> None:
    from memvault.ops.compact import compact_user

    tmp = tmp_path_factory.mktemp("three")
    (tmp / "remote").mkdir()
    remote = FolderRemote(str(tmp / "remote"), tmp / "remote")
    machines = [machine(tmp, n) for n in "abc"]
    forgotten: set[str] = set()
    for step, (op, m, n) in enumerate(steps):
        v = machines[m]
        if op == "add":
            add(v, f"fact {step} {n}", "fact")
        elif op == "ingest":
            ingest_text(v, transcript("s", 3 + n), None, "jsonl", session=f"s{n % 2}")
        elif op == "supersede" and ids(v):
            old = sorted(r.memory_id for r in v.store.records() if r.type == "fact")
            if old:
                add(v, f"fact {step} replaces", "fact", supersedes=old[n % len(old)])
        elif op == "forget" and ids(v):
            target = sorted(ids(v))[n % len(ids(v))]
            plan = forget_ops.select(v, [target])
            forgotten |= {r.memory_id for r in plan.targets}
            forget_ops.forget(v, plan, now=bool(n % 2))
        elif op == "compact" and v.exists():
            cfg = v.settings.compaction
            compact_user(v, cfg, sessions=[s for s in ("s0", "s1")
                                           if v.layout.path(f"sessions/{s}.jsonl").exists()])
        elif op == "rotate" and v.exists():
            rotate_key(v, now=True)
        elif op == "sync":
            sync_ops.sync(v, remote)
    for _ in range(2):
        for v in machines:
            sync_ops.sync(v, remote)
    held = [ids(v) for v in machines]
    assert held[0] == held[1] == held[2]
    assert not forgotten & held[0]
    seen = read_remote(remote.root) if any(held) else {"records": {}}
    assert not forgotten & set(seen["records"])
    assert set(seen["records"]) == held[0]


def test_a_remote_given_once_is_saved_and_another_one_syncs_without_replacing_it(
        tmp_path: Path, remote: FolderRemote, script_runner: Any) -> None:
    """`--remote` is saved in config.yaml for later runs; a different one given later
    still syncs (exit 0, its result printed) and says, in one line, why it was not
    saved, leaving the file as it was."""
    from tests.conftest import mem

    a = machine(tmp_path, "a")
    add(a, "Likes hiking", "fact")
    env = {"MEM_VAULT": str(tmp_path / "a")}
    first = mem(script_runner, "sync", "--remote", str(remote.root), "--json", **env)
    assert first.returncode == 0 and json.loads(first.stdout)["pushed"] == 1
    config = tmp_path / "config" / "config.yaml"
    saved = config.read_text()
    assert str(remote.root) in saved
    assert mem(script_runner, "sync", "--json", **env).returncode == 0  # no flag needed
    other = tmp_path / "other"
    other.mkdir()
    again = mem(script_runner, "sync", "--remote", str(other), "--json", **env)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["pushed"] == 1  # the other remote got the record
    [line] = again.stderr.strip().splitlines()
    assert "not saved" in line and repr(str(remote.root)) in line
    assert config.read_text() == saved


def test_a_folder_given_relative_to_here_is_saved_whole_and_a_file_is_no_folder(
        tmp_path: Path, remote: FolderRemote, script_runner: Any) -> None:
    """`--remote ../remote` means the folder as seen from where the command runs: it is
    saved as its absolute path, so a later sync (cron, another folder) finds it."""
    from tests.conftest import mem

    add(machine(tmp_path, "a"), "Likes hiking", "fact")
    env = {"MEM_VAULT": str(tmp_path / "a")}
    here = tmp_path / "work"
    here.mkdir()
    first = mem(script_runner, "sync", "--remote", "../remote", "--json", cwd=here, **env)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["remote"] == str(remote.root)
    assert str(remote.root) in (tmp_path / "config" / "config.yaml").read_text()
    elsewhere = mem(script_runner, "sync", "--json", cwd=tmp_path / "a", **env)
    assert elsewhere.returncode == 0, elsewhere.stderr
    assert json.loads(elsewhere.stdout)["remote"] == str(remote.root)
    # Another spelling of the same folder is the same remote: nothing to save or warn of.
    for spelling in (f"file://{remote.root}", f"{remote.root}/../remote"):
        same = mem(script_runner, "sync", "--remote", spelling, **env)
        assert same.returncode == 0 and "not saved" not in same.stderr, spelling
    (tmp_path / "afile").write_text("")
    refused = mem(script_runner, "sync", "--remote", str(tmp_path / "afile"), **env)
    assert refused.returncode == 66 and "is not a folder" in refused.stderr


def test_a_user_with_no_memory_anywhere_is_told_which_users_the_remote_holds(
        tmp_path: Path, remote: FolderRemote, script_runner: Any) -> None:
    """A new machine whose login name differs syncs a user the remote does not hold:
    the sync says which users it does hold, and how to take them."""
    from tests.conftest import mem

    a = machine(tmp_path, "a")
    add(a, "Likes hiking", "fact")
    assert sync_ops.sync(a, remote).others == ()  # a user with memory: nothing said
    machine(tmp_path, "b")
    anna = Vault(resolve(vault=tmp_path / "b", user="anna"))
    result = sync_ops.sync(anna, remote)
    assert (result.pulled, result.others) == (0, ("default/alice",))
    # Again, with the directory's entries cached by the first: the same users.
    assert sync_ops.sync(anna, remote).others == ("default/alice",)
    shown = mem(script_runner, "sync", "--remote", str(remote.root), "--user", "anna",
                MEM_VAULT=str(tmp_path / "b"))
    # A user that is nowhere (a typo, another login name) is not a sync that worked,
    # and its remote is not saved as the default.
    assert shown.returncode == 66
    assert "the remote is saved" not in shown.stderr
    assert "default/anna has no memory here or at the remote, which holds " \
           "default/alice: `mem sync --all-users`" in shown.stderr
    assert sync_ops.sync(Vault(resolve(vault=tmp_path / "b")), remote).pulled == 1


def test_doctor_shows_the_last_sync_and_what_waits(
        tmp_path: Path, remote: FolderRemote, script_runner: Any) -> None:
    from tests.conftest import mem

    a = machine(tmp_path, "a")
    add(a, "Likes hiking", "fact")
    env = {"MEM_VAULT": str(tmp_path / "a"), "MEM_SYNC_REMOTE": str(remote.root)}

    def finding() -> str:
        done = mem(script_runner, "doctor", "--json", **env)
        return next(f["what"] for f in json.loads(done.stdout)["findings"]
                    if f["what"].startswith("sync:"))

    assert finding().startswith("sync: never synced")
    sync_ops.sync(a, remote)
    assert "0 records waiting" in finding()
    add(a, "Likes climbing", "fact")
    assert "1 record waiting" in finding()
    # A session's line file that did not exist at the last sync: its messages wait too.
    ingest_text(a, transcript("trip", 3), None, "jsonl", session="trip")
    assert "4 records waiting" in finding()
    sync_ops.sync(a, remote)
    assert "0 records waiting" in finding()
    # A folder that is not there (a disk not mounted) is said, and `mem sync` is not
    # offered as the fix while it is away.
    add(a, "Likes rowing", "fact")
    remote.root.rename(tmp_path / "unmounted")
    found = json.loads(mem(script_runner, "doctor", "--json", **env).stdout)["findings"]
    said = [f for f in found if f["what"].startswith("sync:")]
    assert f"sync folder {remote.root} is not there" in said[0]["what"]
    assert "1 record waiting" in said[1]["what"] and not said[1]["fix"]


def test_all_users_leaves_a_busy_user_for_the_next_run_says_so_and_exits_75(
        tmp_path: Path, remote: FolderRemote, script_runner: Any) -> None:
    from dataclasses import replace

    from memvault.errors import EX_TEMPFAIL
    from memvault.storage import fsio
    from tests.conftest import mem

    a = machine(tmp_path, "a")
    bob = Vault(replace(a.settings, values={**a.settings.values, "user": "bob"}),
                master=a.master)
    add(a, "alice likes tea", "fact")
    add(bob, "bob likes coffee", "fact")
    env = {"MEM_VAULT": str(a.root), "MEM_SYNC_REMOTE": str(remote.root),
           "MEM_LOCK_TIMEOUT": "0.2"}
    with fsio.locked(sync_ops.cache_path(bob).with_suffix(".lock"), 1, "bob's sync"):
        done = mem(script_runner, "sync", "--all-users", "--json", **env)
        told = mem(script_runner, "sync", "--all-users", **env)
    assert done.returncode == EX_TEMPFAIL, done.stderr
    doc = json.loads(done.stdout)
    assert (doc["users"], doc["failed"]) == (["default/alice"], ["default/bob"])
    assert [(p["user"], p["problem"]) for p in doc["problems"]] == [("bob", "busy")]
    assert told.returncode == EX_TEMPFAIL
    assert "default/bob: the user's lock is held" in told.stdout + told.stderr
    again = mem(script_runner, "sync", "--all-users", "--json", **env)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["failed"] == [] and json.loads(again.stdout)["pushed"] == 1


class Gated:
    """A remote whose first listing waits until every machine at the gate has listed:
    both syncs then push without having seen the other's objects."""

    def __init__(self, remote: Any, gate: Any) -> None:
        self.remote, self.gate, self.waited = remote, gate, False
        self.url, self.workers = remote.url, remote.workers

    def list(self, prefix: str) -> Any:
        names = list(self.remote.list(prefix))
        if not self.waited:
            self.waited = True
            self.gate.wait(timeout=60)
        return iter(names)

    def get(self, name: str) -> bytes:
        return bytes(self.remote.get(name))

    def put(self, name: str, data: bytes) -> None:
        self.remote.put(name, data)

    def delete(self, name: str) -> None:
        self.remote.delete(name)


def at_once(pairs: list[tuple[Vault, Any]]) -> None:
    """Sync several machines at the same moment, each on its own thread."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    gate = threading.Barrier(len(pairs))
    with ThreadPoolExecutor(len(pairs)) as pool:
        for done in [pool.submit(sync_ops.sync, v, Gated(r, gate)) for v, r in pairs]:
            done.result()


def concurrent_round(tmp: Path, open_one: Any) -> None:
    """Two machines with their own records and the same session sync at once, twice
    (the second time after a rotation on one): nothing is lost, one more round
    converges, and a round after that moves nothing."""
    a, b = machine(tmp, "a"), machine(tmp, "b")
    for i in range(3):
        add(a, f"a fact {i}", "fact")
        add(b, f"b fact {i}", "fact")
    ingest_text(a, transcript("s", 4), None, "jsonl", session="shared")
    ingest_text(b, transcript("s", 6), None, "jsonl", session="shared")
    at_once([(a, open_one()), (b, open_one())])
    facts = {r.content for v in (a, b) for r in v.store.records() if r.type == "fact"}
    assert len(facts) == 6
    add(a, "a fact after", "fact")
    rotate_key(b, now=True)
    add(b, "b fact after", "fact")
    at_once([(a, open_one()), (b, open_one())])
    for v in (a, b):
        sync_ops.sync(v, open_one())
    assert contents(a) == contents(b)
    assert {r.content for r in a.store.records() if r.type == "fact"} == facts | {
        "a fact after", "b fact after"}
    assert sorted(r.message_id for r in a.store.records() if r.type == "message") == [
        f"m{i}" for i in range(6)]
    again = [sync_ops.sync(v, open_one()) for v in (a, b)]
    assert all((r.pushed, r.pulled, r.damaged) == (0, 0, 0) for r in again)


def test_two_machines_syncing_at_the_same_moment(tmp_path: Path,
                                                 remote: FolderRemote) -> None:
    concurrent_round(tmp_path, lambda: FolderRemote(remote.url, remote.root))
    assert set(read_remote(remote.root)["records"]) == ids(machine(tmp_path, "a"))


def test_preferences_merge_per_key_by_the_latest_change(
        tmp_path: Path, remote: FolderRemote, monkeypatch: pytest.MonkeyPatch) -> None:
    from memvault.ops import prefs

    a, b = machine(tmp_path, "a"), machine(tmp_path, "b")

    def settings(v: Vault) -> dict[str, str]:
        return {k: e["value"] for k, e in prefs.read(v).items()}

    prefs.set_(a, "editor", "vim")
    prefs.set_(a, "theme", f"dark{CANARY}")
    assert sync_ops.sync(a, remote).prefs_pushed == 2
    assert sync_ops.sync(b, remote).prefs_pulled == 2
    assert settings(b) == {"editor": "vim", "theme": f"dark{CANARY}"}
    # b changes one key, a unsets another and sets a third: each key's latest wins, and
    # an unset travels as one.
    prefs.set_(b, "editor", "emacs")
    prefs.unset(a, "theme")
    prefs.set_(a, "lang", "en")
    for v in (a, b, a):
        sync_ops.sync(v, remote)
    assert settings(a) == settings(b) == {"editor": "emacs", "lang": "en"}
    # Both set one key before syncing: the later change wins whichever syncs first.
    prefs.set_(b, "lang", "fr")
    prefs.set_(a, "lang", "de")
    for v in (a, b, a):
        sync_ops.sync(v, remote)
    assert settings(a)["lang"] == settings(b)["lang"] == "de"
    # A machine whose clock runs behind: its change, made after it saw the other's,
    # still wins (it is stamped just after the change it replaces).
    monkeypatch.setattr(prefs, "now_iso", lambda: "2001-01-01T00:00:00.000000Z")
    prefs.unset(b, "lang")
    monkeypatch.undo()
    for v in (b, a):
        sync_ops.sync(v, remote)
    assert settings(a) == settings(b) == {"editor": "emacs"}
    assert [sync_ops.sync(v, remote).prefs_pushed for v in (a, b)] == [0, 0]
    # Keys and values leave the machine sealed; the cache names keys only by a tag.
    for path in [*remote.root.rglob("*"), *tmp_path.glob("*/*/.sync/*")]:
        data = path.read_bytes() if path.is_file() else b""
        for needle in (b"editor", b"emacs", CANARY.encode()):
            assert needle not in data, (path, needle)


def test_a_key_retired_while_another_machine_writes_under_it(
        tmp_path: Path, remote: FolderRemote) -> None:
    """b re-keys and retires the old remote key while a, which listed before, is about
    to write under it: a puts the key back, and b opens what a wrote."""
    import threading

    a, b = machine(tmp_path, "a"), machine(tmp_path, "b")
    add(a, "first fact", "fact")
    sync_ops.sync(a, remote)
    sync_ops.sync(b, remote)
    add(a, "written under the old key", "fact")
    rotate_key(b, now=True)
    at_put, b_done = threading.Event(), threading.Event()

    class Held(FolderRemote):
        def put(self, name: str, data: bytes) -> None:
            if "/o/" in name:
                at_put.set()
                assert b_done.wait(60)
            super().put(name, data)

    worker = threading.Thread(target=sync_ops.sync, args=(a, Held(remote.url, remote.root)))
    worker.start()
    assert at_put.wait(60)
    sync_ops.sync(b, remote)  # the old key has no object yet: b deletes it
    b_done.set()
    worker.join(60)
    result = sync_ops.sync(b, remote)
    assert (result.pulled, result.damaged) == (1, 0)
    assert contents(a) == contents(b)


def test_a_message_that_grows_after_its_first_sync_reaches_the_others(
        tmp_path: Path, remote: FolderRemote) -> None:
    from memvault.model.records import NewMessage
    from memvault.ops.ingest import add_messages

    a, b = machine(tmp_path, "a"), machine(tmp_path, "b")

    def say(v: Vault, last: str) -> Any:
        return add_messages(v, "live", [NewMessage("the first turn", "user", "t1"),
                                        NewMessage(last, "assistant", "t2")])

    say(a, "a reply cut")
    sync_ops.sync(a, remote)
    sync_ops.sync(b, remote)
    assert say(a, "a reply cut short by the hook, now whole").updated == 1
    result = sync_ops.sync(a, remote)
    assert (result.pushed, result.updates_pushed) == (0, 1)
    assert sync_ops.sync(b, remote).updates_pulled == 1
    assert contents(b) == contents(a)
    assert "a reply cut short by the hook, now whole" in contents(b).values()
    # Found by search, not only by id: the index was rebuilt with the new words.
    from memvault.model.records import Filters
    from memvault.ops.recall import search

    assert search(b, "whole", Filters(limit=5)).results
    # A third machine's first sync takes the latest version, and a re-key keeps it.
    c = machine(tmp_path, "c")
    rotate_key(c, now=True)
    sync_ops.sync(c, remote)
    assert contents(c) == contents(a)
    rotate_key(a, now=True)
    for v in (a, b, c):
        sync_ops.sync(v, remote)
    assert contents(b) == contents(c) == contents(a)
    assert [sync_ops.sync(v, remote).updates_pushed for v in (a, b, c)] == [0, 0, 0]


def test_all_users_syncs_every_user_held_or_synced_before(
        tmp_path: Path, remote: FolderRemote, script_runner: Any) -> None:
    from dataclasses import replace

    from memvault.ops.admin import destroy
    from tests.conftest import mem

    def as_user(v: Vault, user: str) -> Vault:
        return Vault(replace(v.settings, values={**v.settings.values, "user": user}),
                     master=v.master)

    a, b = machine(tmp_path, "a"), machine(tmp_path, "b")
    for v, who in ((a, "alice"), (a, "bob"), (b, "bob"), (b, "carol")):
        add(as_user(v, who), f"{who} likes tea on {v.root.name}", "fact")
    env = {"MEM_VAULT": str(a.root), "MEM_SYNC_REMOTE": str(remote.root)}
    done = mem(script_runner, "sync", "--all-users", "--json", **env)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert (doc["users"], doc["pushed"]) == (["default/alice", "default/bob"], 2)
    # b holds bob and carol: bob's record from a arrives, and alice, whom b never
    # held, is found in the remote's directory of users.
    result = sync_ops.run(b, str(remote.root), all_users=True)
    assert result.users == ("default/alice", "default/bob", "default/carol")
    assert result.pulled == 2 and result.damaged == 0
    assert len(contents(as_user(b, "bob"))) == 2 and len(contents(as_user(b, "alice"))) == 1
    # A user destroyed here is still synced (from the sync's record of it): the destroy
    # reaches the other machine.
    destroy(as_user(a, "bob"), "bob")
    assert "default/bob" in sync_ops.run(a, str(remote.root), all_users=True).users
    sync_ops.run(b, str(remote.root), all_users=True)
    assert not as_user(b, "bob").exists() and as_user(b, "carol").exists()


def test_an_upload_that_fails_among_parallel_ones_loses_nothing(
        tmp_path: Path, remote: FolderRemote, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pages go up on several threads while the next ones are read: one that fails
    fails the sync (the cache is not saved), and the next sync pushes what the remote
    lacks, once."""
    import threading

    from memvault.errors import StorageError
    from memvault.model.records import NewMessage
    from memvault.ops.ingest import add_messages

    monkeypatch.setattr(sync_ops, "PAGE", 3)  # 20 messages in 7 pages
    a, b = machine(tmp_path, "a"), machine(tmp_path, "b")
    add_messages(a, "long", [NewMessage(content=f"message {i}", role="user",
                                        message_id=f"m{i}") for i in range(20)])
    lock, puts = threading.Lock(), [0]

    class Failing(FolderRemote):
        workers = 4

        def put(self, name: str, data: bytes) -> None:
            if "/o/" in name:
                with lock:
                    puts[0] += 1
                    if puts[0] == 3:
                        raise StorageError("the connection dropped")
            super().put(name, data)

    with pytest.raises(StorageError):
        sync_ops.sync(a, Failing(remote.url, remote.root))
    landed = len(read_remote(remote.root)["records"])
    assert landed < 20
    assert sync_ops.sync(a, remote).pushed == 20 - landed  # what the listing lacks
    assert len(read_remote(remote.root)["records"]) == 20
    assert sync_ops.sync(b, remote).pulled == 20 and contents(a) == contents(b)
    again = [sync_ops.sync(v, remote) for v in (a, b)]
    assert all((r.pushed, r.pulled, r.damaged) == (0, 0, 0) for r in again)


def test_all_users_finds_users_made_elsewhere_and_forgets_destroyed_ones(
        tmp_path: Path, remote: FolderRemote, script_runner: Any) -> None:
    """The remote's directory of users: a fresh machine (the same master key, no users)
    gets every user through `--all-users`, with its records; a destroyed user leaves the
    directory and no machine brings it back; no name is in clear; a damaged entry is
    skipped and counted, one of another master key refused."""
    from dataclasses import replace

    from memvault.ops.admin import destroy
    from memvault.storage.layout import users
    from tests.conftest import mem

    def as_user(v: Vault, org: str, user: str) -> Vault:
        return Vault(replace(v.settings, values={**v.settings.values, "org": org,
                                                 "user": user}), master=v.master)

    a = machine(tmp_path, "a")
    add(as_user(a, "zebraorg", "walrususer"), f"{CANARY} walrus fact", "fact")
    add(as_user(a, "default", "alice"), f"{CANARY} alice fact", "fact")
    sync_ops.run(a, str(remote.root), all_users=True)
    entries = sorted((remote.root / "u").iterdir())
    assert len(entries) == 2 and {p.stat().st_size for p in entries} == {4096}

    b = machine(tmp_path, "b")
    assert not list(users(b.root))
    env = {"MEM_VAULT": str(b.root), "MEM_SYNC_REMOTE": str(remote.root)}
    done = mem(script_runner, "sync", "--all-users", "--json", **env)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert (doc["users"], doc["pulled"], doc["damaged"]) == (
        ["default/alice", "zebraorg/walrususer"], 2, 0)
    assert list(contents(as_user(b, "zebraorg", "walrususer")).values()) == [
        f"{CANARY} walrus fact"]
    assert len(list((remote.root / "u").iterdir())) == 2  # b found them: wrote none
    assert_nothing_plain(remote.root, CANARY, "zebraorg", "walrususer", "alice")

    # Destroyed on a: its entry goes with the destroy; b pulls the destroy and does not
    # write the entry again; a third machine never sees the user.
    destroy(as_user(a, "zebraorg", "walrususer"), "walrususer")
    sync_ops.run(a, str(remote.root), all_users=True)
    assert len(list((remote.root / "u").iterdir())) == 1
    sync_ops.run(b, str(remote.root), all_users=True)
    assert not as_user(b, "zebraorg", "walrususer").exists()
    assert len(list((remote.root / "u").iterdir())) == 1
    c = machine(tmp_path, "c")
    assert sync_ops.run(c, str(remote.root), all_users=True).users == ("default/alice",)
    assert list(users(c.root)) == [("default", "alice")]

    # An entry copied under another name does not open: skipped and counted.
    survivor = next((remote.root / "u").iterdir())
    (remote.root / "u" / ("0" * 32)).write_bytes(survivor.read_bytes())
    result = sync_ops.run(c, str(remote.root), all_users=True)
    assert result.users == ("default/alice",) and result.damaged == 1
    # An entry sealed under another master key: another vault's remote, refused.
    from memvault.crypto import syncseal

    other = syncseal.dir_key(os.urandom(32))
    (remote.root / "u" / ("1" * 32)).write_bytes(
        syncseal.seal_entry(other, "1" * 32, "default", "mallory"))
    with pytest.raises(Refused):
        sync_ops.run(c, str(remote.root), all_users=True)
