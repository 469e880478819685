"""Integrity under damage and interruption: a lost state.json, a destroy that was cut short
or meets a damaged user, names that would take a vault file's path, imports that `add`
would refuse, commands that must not create a mistyped user, and temp files a killed
writer left anywhere in a user's folders. Each check is paired with a control that sees
the same thing working, so that it cannot pass by seeing nothing."""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from pytest_console_scripts import ScriptRunner

from memvault.config import resolve, validate_name
from memvault.errors import DataError, NotFound, UsageError
from memvault.model.records import NewMessage
from memvault.ops import admin, forget, ingest, keys, portability, remember
from memvault.ops import verify as verify_ops
from memvault.storage import fsio
from memvault.storage.audit import AuditLog
from memvault.storage.userstore import UserStore
from memvault.vault.vault import Transaction, Vault
from tests.conftest import mem, one_error_line, open_as

# --- helpers ------------------------------------------------------------------------------


def mem_json(script_runner: ScriptRunner, *args: str, code: int = 0) -> Any:
    result = mem(script_runner, *args, "--json")
    assert result.returncode == code, result.stderr
    return json.loads(result.stdout)


def user_dir(vault_dir: Path, user: str = "alice", org: str = "default") -> Path:
    return vault_dir / org / user


def files_of(directory: Path) -> dict[str, bytes]:
    return {p.relative_to(directory).as_posix(): p.read_bytes()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def fresh(user: str = "alice") -> Vault:
    """A new Vault object (nothing cached), like a new `mem` process."""
    return open_as(user)


def populate(v: Vault) -> dict[str, str]:
    """Something in every kind of file, a supersede link, a forgotten message."""
    old = remember.add(v, "Works at Initech as a tester", "fact").record.memory_id
    new = remember.add(v, "Works at Globex as an engineer", "fact",
                       supersedes=old).record.memory_id
    remember.add(v, "Prefers green tea over coffee", "preference", tags=["drink"])
    ingest.add_messages(v, "s1", [NewMessage(f"ferry message {i}", "user", f"m{i}")
                                  for i in range(4)])
    gone = remember.add(v, "a message to forget", "message", session="s1",
                        message_id="m9").record.memory_id
    forget.forget(v, forget.select(v, [gone]))
    return {"old": old, "new": new}


def org_records(vault_dir: Path) -> list[dict[str, Any]]:
    path = vault_dir / "default" / "audit.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


# --- 6. a deleted state.json is a damaged user, not a new one ------------------------------


def test_a_deleted_state_is_refused_reported_and_rebuilt(
        script_runner: ScriptRunner, vault: Vault, vault_dir: Path) -> None:
    ids = populate(vault)
    keys.rotate_key(fresh())  # key version 2: a re-created state would name key 1
    admin.set_frozen(fresh(), True)
    before = admin.stats(fresh())
    assert (before.key_version, before.frozen, before.superseded) == (2, True, 1)
    state_path = user_dir(vault_dir) / "state.json"
    state_path.unlink()
    files = files_of(user_dir(vault_dir))

    # Reads and writes refuse, with one line that names the problem and the way out.
    for args in (["list"], ["stats"], ["brief"], ["search", "ferry"], ["show", ids["new"]],
                 ["export"], ["add", "a new fact"], ["pref", "set", "editor", "vim"],
                 ["pref", "get", "editor"], ["pref", "list"],
                 ["rotate-key"], ["forget", ids["old"]], ["reindex"]):
        result = mem(script_runner, *args)
        assert result.returncode == 65, (args, result.returncode, result.stderr)
        line = one_error_line(result.stderr)
        assert "default/alice/state.json is missing" in line, (args, line)
        assert "damaged" in line and "mem verify --repair" in line, (args, line)
        assert "Globex" not in result.stdout
    assert not state_path.exists()  # no write re-created it
    assert files_of(user_dir(vault_dir)) == files

    # verify names it, as a problem repair sets right.
    report = mem_json(script_runner, "verify", code=65)
    assert report["ok"] is False
    (problem,) = [p for p in report["problems"] if p["file"] == "default/alice/state.json"]
    assert problem["severity"] == "error" and problem["repairable"] is True
    assert "missing" in problem["problem"]

    # repair rebuilds it from the files, and says plainly what could not come back.
    doc = mem_json(script_runner, "verify", "--repair")
    assert doc["ok"] is True and doc["problems"] == [], doc
    repaired = " | ".join(doc["repaired"])
    assert "rebuilt the missing state.json" in repaired and "key version 2" in repaired
    assert "frozen flag was lost" in repaired and "forgotten messages were lost" in repaired
    after = admin.stats(fresh())
    assert (after.records, after.active, after.superseded, after.by_type) == \
        (before.records, before.active, before.superseded, before.by_type)
    assert after.key_version == 2 and after.frozen is False
    entries = mem_json(script_runner, "audit")
    assert entries["chain_ok"] is True
    repair_entry = [e for e in entries["entries"] if e["op"] == "repair"][0]
    assert repair_entry["detail"]["state"] == "rebuilt"
    state = fresh().state()
    assert state.audit_head is not None and state.audit_head["seq"] >= repair_entry["seq"]
    # The superseded record stays superseded, and writes under key 2 work again.
    assert [r["memory_id"] for r in mem_json(script_runner, "list")["records"]
            if r["content"].startswith("Works at")] == [ids["new"]]
    assert mem(script_runner, "add", "Written after the repair").returncode == 0
    assert mem_json(script_runner, "verify")["ok"] is True


def test_a_user_with_only_what_an_interrupted_first_write_leaves_is_new(
        script_runner: ScriptRunner, vault: Vault, vault_dir: Path) -> None:
    """The control: folders and keys/1.dek without a state are a first write that was cut
    short (create() writes the key before the state), so the user is new, not damaged."""
    store = UserStore(vault.layout, vault.master)
    for folder in ("sessions", "archive", "keys"):
        fsio.ensure_dir(user_dir(vault_dir) / folder)
    store.new_epoch(1)
    assert not fresh().exists()
    new = mem(script_runner, "list")  # no memory yet, nothing damaged
    assert new.returncode == 66 and "user alice has no memory yet" in new.stderr
    assert mem(script_runner, "add", "The first fact").returncode == 0
    assert mem_json(script_runner, "stats")["records"] == 1
    assert mem_json(script_runner, "verify")["ok"] is True


def test_a_lost_state_with_unreadable_files_is_still_rebuilt(vault: Vault,
                                                            vault_dir: Path) -> None:
    remember.add(vault, "Lives in Porto", "fact")
    ingest.add_messages(fresh(), "s1", [NewMessage(f"line {i}", "user", f"m{i}")
                                        for i in range(3)])
    session = user_dir(vault_dir) / "sessions" / "s1.jsonl"
    lines = session.read_bytes().split(b"\n")
    lines[0] = lines[0][:-8] + b"AAAAAAA\""  # a bad line that is not the torn tail
    session.write_bytes(b"\n".join(lines))
    (user_dir(vault_dir) / "state.json").unlink()
    with pytest.raises(DataError, match="state.json is missing"):
        remember.add(fresh(), "refused", "fact")
    actions = verify_ops.repair(fresh()).repaired
    assert any("rebuilt the missing state.json" in a for a in actions)
    assert any("could not count the records" in a for a in actions)
    assert (user_dir(vault_dir) / "state.json").exists()
    report = verify_ops.verify(fresh())  # the bad line is still reported, by its file
    assert any(p.file.endswith("sessions/s1.jsonl") and p.line == 1 for p in report.problems)
    assert not any(p.file.endswith("state.json") for p in report.problems)


# --- 7. destroy finishes, on a damaged user and after an interruption ----------------------


def _damage(kind: str, vault_dir: Path) -> None:
    root = user_dir(vault_dir)
    if kind == "state":
        (root / "state.json").unlink()
    elif kind == "key":
        (root / "keys" / "1.dek").write_bytes(b"not a wrapped key")
    elif kind == "line":
        session = root / "sessions" / "s1.jsonl"
        data = bytearray(session.read_bytes())
        data[40] ^= 0x01
        session.write_bytes(bytes(data))
    elif kind == "state-and-key":
        (root / "state.json").unlink()
        shutil.rmtree(root / "keys")


@pytest.mark.parametrize("kind", ["state", "key", "line", "state-and-key"])
def test_destroy_finishes_on_a_damaged_user(script_runner: ScriptRunner, vault: Vault,
                                            vault_dir: Path, kind: str) -> None:
    populate(vault)
    remember.add(open_as("bob"), "Bob plays the cello", "fact")
    bob = files_of(user_dir(vault_dir, "bob"))
    _damage(kind, vault_dir)
    files = len(files_of(user_dir(vault_dir)))
    doc = mem_json(script_runner, "destroy", "--confirm", "alice")
    assert doc["destroyed"] == "default/alice" and doc["files_deleted"] == files
    assert not user_dir(vault_dir).exists()
    assert not (vault_dir / "default" / ".locks" / "alice.destroy").exists()
    (entry,) = org_records(vault_dir)
    assert entry["op"] == "user.destroy" and entry["audit_id"] == doc["audit_id"]
    assert entry["detail"]["user"] == "alice"
    assert files_of(user_dir(vault_dir, "bob")) == bob


def test_destroy_finishes_when_a_file_appears_while_the_tree_is_removed(
        vault: Vault, monkeypatch: pytest.MonkeyPatch) -> None:
    """An index merge still running, or a concurrent read's bookkeeping (which takes no
    user lock), may add a file while the user's tree is removed: destroy removes it too."""
    populate(vault)
    user_dir = vault.layout.dir
    real = shutil.rmtree
    calls: list[Path] = []

    def racing(path: Any, *args: Any, **kwargs: Any) -> None:
        calls.append(Path(path))
        if len(calls) == 1:  # what rmtree meets when a writer slips a file in meanwhile
            (user_dir / "reads.json").write_text("{}")
            raise OSError(errno.ENOTEMPTY, os.strerror(errno.ENOTEMPTY), str(path))
        real(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", racing)
    admin.destroy(fresh(), "alice")
    assert not user_dir.exists() and len(calls) == 2


@pytest.mark.parametrize("state", ["counted", "format-1"])
def test_destroy_counts_without_decrypting_a_record(
        vault: Vault, vault_dir: Path, monkeypatch: pytest.MonkeyPatch, state: str) -> None:
    """From the state's counters; a state without them (format 1, left by a user the
    migration could not reach) is not upgraded first (that decrypts everything): the
    session lines are counted from their clear headers, and a document that does not
    open is no reason to stop."""
    populate(vault)
    assert admin.stats(fresh()).records == 7  # two facts, a preference, four messages
    expected = 7
    if state == "format-1":
        store = fresh().store
        old = store.load_state()
        old.format = 1
        store.save_state(old)
        expected = 4

    def no(*_: Any, **__: Any) -> Any:
        raise AssertionError("destroy decrypted a record")

    def unreadable(*_: Any, **__: Any) -> Any:
        raise DataError("does not open")

    monkeypatch.setattr(UserStore, "_open_line", no)
    monkeypatch.setattr(UserStore, "read_doc", no if state == "counted" else unreadable)
    result = admin.destroy(fresh(), "alice")
    assert result.records_deleted == expected
    assert not user_dir(vault_dir).exists()
    (entry,) = org_records(vault_dir)
    assert entry["detail"]["records"] == expected


class Killed(BaseException):
    """A process killed at this point (nothing after it runs, no handler catches it)."""


def _kill_at(point: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def die(*_: Any, **__: Any) -> Any:
        raise Killed(point)

    if point == "after-plan":
        monkeypatch.setattr(UserStore, "destroy", die)
    elif point == "after-keys":
        monkeypatch.setattr(shutil, "rmtree", die)
    elif point == "after-rmtree":
        monkeypatch.setattr(AuditLog, "append", die)
    elif point == "after-org-record":
        monkeypatch.setattr(UserStore, "end_destroy", die)


@pytest.mark.parametrize("point", ["after-plan", "after-keys", "after-rmtree",
                                   "after-org-record"])
def test_a_destroy_killed_at_any_point_is_finished_by_the_next_run(
        script_runner: ScriptRunner, vault: Vault, vault_dir: Path,
        monkeypatch: pytest.MonkeyPatch, point: str) -> None:
    populate(vault)
    root = user_dir(vault_dir)
    # A killed create_new leaves a temp file beside a key: a copy of the wrapped key.
    shutil.copyfile(root / "keys" / "1.dek", root / "keys" / f"{fsio.TMP_PREFIX}1.dek.1.2")
    records = admin.stats(fresh()).records
    files = len(files_of(root))
    with monkeypatch.context() as patch:
        _kill_at(point, patch)
        with pytest.raises(Killed):
            admin.destroy(fresh(), "alice")
    if point == "after-keys":  # keys go first: what is left reads nothing
        assert root.exists() and not any((root / "keys").iterdir())
    # Until it finishes, nothing reads or re-creates the user.
    result = mem(script_runner, "add", "a fact written meanwhile")
    assert result.returncode == 65 and "destroy" in one_error_line(result.stderr)
    assert mem(script_runner, "list").returncode == 65
    assert root.exists() == (point in ("after-plan", "after-keys"))

    doc = mem_json(script_runner, "destroy", "--confirm", "alice")
    assert doc["records_deleted"] == records and doc["files_deleted"] == files
    assert not root.exists()
    assert not (vault_dir / "default" / ".locks" / "alice.destroy").exists()
    (entry,) = org_records(vault_dir)  # exactly one org record, whenever the kill came
    assert entry["audit_id"] == doc["audit_id"] and entry["detail"]["user"] == "alice"
    assert admin.org_audit(fresh()).check().ok
    # Done: a third run finds nothing, and the name is free for a new user.
    assert mem(script_runner, "destroy", "--confirm", "alice").returncode == 66
    assert mem(script_runner, "add", "A new alice").returncode == 0


# --- 15a. names that would take a vault file's path ----------------------------------------


@pytest.mark.parametrize("name", ["audit.jsonl", "vault.json", ".locks", ".hidden",
                                  "Audit.JSONL", "VAULT.json"])
@pytest.mark.parametrize("flag", ["--user", "--org"])
def test_a_name_that_is_a_vault_file_is_refused(script_runner: ScriptRunner, vault: Vault,
                                                vault_dir: Path, name: str,
                                                flag: str) -> None:
    before = files_of(vault_dir)
    result = mem(script_runner, "add", "a fact", flag, name)
    assert result.returncode == 2, result.stderr
    assert "invalid" in one_error_line(result.stderr)
    assert files_of(vault_dir) == before
    with pytest.raises(UsageError):
        resolve(**{flag.removeprefix("--"): name})


def test_the_org_audit_log_keeps_its_path(script_runner: ScriptRunner, vault: Vault,
                                          vault_dir: Path) -> None:
    remember.add(vault, "Alice fact", "fact")
    admin.destroy(fresh(), "alice")
    org_log = vault_dir / "default" / "audit.jsonl"
    assert org_log.is_file()
    result = mem(script_runner, "add", "takes the log's path", "--user", "audit.jsonl",
                 MEM_USER="audit.jsonl")
    assert result.returncode == 2
    assert org_log.is_file() and len(org_records(vault_dir)) == 1
    # Control: the names are refused for orgs and users only; a session may use one.
    assert validate_name("session", "audit.jsonl") == "audit.jsonl"
    assert validate_name("user", "audit-jsonl") == "audit-jsonl"


# --- 15b. import admits only what add would ------------------------------------------------


def _export(v: Vault) -> dict[str, Any]:
    import io

    buf = io.StringIO()
    portability.export(v, buf, "json")
    doc: dict[str, Any] = json.loads(buf.getvalue())
    return doc


def _facts(doc: dict[str, Any]) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = doc["categories"]["learned_context"]["records"]
    return records


def _edit_id(doc: dict[str, Any], value: str) -> None:
    _facts(doc)[0]["memory_id"] = value


def _edit_tag(doc: dict[str, Any], value: str) -> None:
    _facts(doc)[0]["tags"] = [value]


def _edit_cycle(doc: dict[str, Any], _: str) -> None:
    a, b = _facts(doc)[:2]
    a["supersedes"], b["supersedes"] = b["memory_id"], a["memory_id"]


def _edit_self(doc: dict[str, Any], _: str) -> None:
    a = _facts(doc)[0]
    a["supersedes"] = a["memory_id"]


def _edit_supersedes(doc: dict[str, Any], value: str) -> None:
    _facts(doc)[0]["supersedes"] = value


@pytest.mark.parametrize(("edit", "value"), [
    (_edit_id, "x" * 70_000),
    (_edit_id, ""),
    (_edit_id, "0190a0a0-0000-7000-8000-000000000001\nforged"),
    (_edit_id, "0190A0A0-0000-7000-8000-000000000001"),  # not as mem writes it
    (_edit_tag, "t" * 70_000),
    (_edit_tag, ""),
    (_edit_tag, "two\nlines"),
    (_edit_cycle, ""),
    (_edit_self, ""),
    (_edit_supersedes, "not an id"),
], ids=["long-id", "empty-id", "newline-id", "uppercase-id", "long-tag", "empty-tag",
        "newline-tag", "cycle", "self", "bad-supersedes"])
def test_import_refuses_what_add_refuses_and_writes_nothing(
        script_runner: ScriptRunner, vault: Vault, vault_dir: Path, tmp_path: Path,
        edit: Any, value: str) -> None:
    bob = open_as("bob")
    remember.add(bob, "Bob plays the cello", "fact", tags=["music"])
    remember.add(bob, "Bob lives in Oslo", "fact")
    doc = _export(bob)
    # Control: the file as exported imports, and a second user can take it.
    good = tmp_path / "good.json"
    good.write_text(json.dumps(doc))
    edit(doc, value)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    before = files_of(vault_dir)
    result = mem(script_runner, "import", str(bad), "--user", "carol")
    assert result.returncode == 65, result.stderr
    assert len(one_error_line(result.stderr)) < 400
    assert files_of(vault_dir) == before and not user_dir(vault_dir, "carol").exists()
    assert mem_json(script_runner, "import", str(good), "--user", "carol")["imported"] == 2


def test_import_keeps_a_chain_that_points_at_a_missing_record(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path) -> None:
    """An export of a user who forgot a superseded record names a record that is gone:
    it imports, and the record that superseded it stays current."""
    bob = open_as("bob")
    old = remember.add(bob, "Bob lives in Oslo", "fact").record.memory_id
    new = remember.add(bob, "Bob lives in Bergen", "fact", supersedes=old).record.memory_id
    forget.forget(bob, forget.select(bob, [old]))
    path = tmp_path / "bob.json"
    path.write_text(json.dumps(_export(open_as("bob"))))
    assert mem_json(script_runner, "import", str(path))["imported"] == 1
    listed = [r["memory_id"] for r in mem_json(script_runner, "list")["records"]]
    assert listed == [new]
    assert mem_json(script_runner, "verify")["ok"] is True


def test_import_of_a_cycle_with_the_vault_is_refused(vault: Vault) -> None:
    """A loop made of imported records is refused even when some of them are already
    stored (import skips those, but the file is malformed all the same)."""
    remember.add(vault, "Alice fact one", "fact")
    remember.add(vault, "Alice fact two", "fact")
    doc = _export(fresh())
    _edit_cycle(doc, "")
    with pytest.raises(DataError, match="loop"):
        portability.import_text(fresh(), json.dumps(doc))


# --- 15c. no command creates a mistyped user ----------------------------------------------


@pytest.mark.parametrize("args", [["freeze"], ["unfreeze"], ["verify", "--repair"]])
def test_a_command_on_a_user_that_does_not_exist_refuses_and_creates_nothing(
        script_runner: ScriptRunner, vault: Vault, vault_dir: Path, args: list[str]) -> None:
    remember.add(vault, "Alice fact", "fact")
    before = files_of(vault_dir)
    result = mem(script_runner, *args, "--user", "alcie")
    assert result.returncode == 66, result.stderr
    assert "alcie" in one_error_line(result.stderr)
    assert not user_dir(vault_dir, "alcie").exists()
    assert files_of(vault_dir) == before
    with pytest.raises(NotFound):
        admin.set_frozen(open_as("alcie"), True)
    # Control: on the user who exists, the same command works.
    assert mem(script_runner, *args).returncode == 0


# --- 15d. temp files a killed writer left, wherever it left them ---------------------------


def test_temp_files_in_every_folder_are_reported_and_repaired(
        script_runner: ScriptRunner, vault: Vault, vault_dir: Path) -> None:
    populate(vault)
    keys.rotate_key(fresh())  # an archive folder is not needed: it is made on first write
    root = user_dir(vault_dir)
    temps = [f"{fsio.TMP_PREFIX}state.json.1.2", f"sessions/{fsio.TMP_PREFIX}s1.jsonl.1.2",
             f"archive/{fsio.TMP_PREFIX}s0.jsonl.1.2", f"keys/{fsio.TMP_PREFIX}3.dek.1.2",
             f"index/{fsio.TMP_PREFIX}mem-index.json.1.2"]
    for rel in temps:
        (root / rel).write_bytes(b"left by a killed writer")
    report = mem_json(script_runner, "verify")
    assert report["ok"] is True  # warnings: nothing is lost
    found = {p["file"].removeprefix("default/alice/"): p for p in report["problems"]}
    for rel in temps:
        assert rel in found, (rel, found)
        assert found[rel]["severity"] == "warning" and found[rel]["repairable"] is True
    doc = mem_json(script_runner, "verify", "--repair")
    assert doc["problems"] == [], doc
    assert sum("temporary file" in a for a in doc["repaired"]) == len(temps)
    assert not any((root / rel).exists() for rel in temps)
    assert not list(root.rglob(fsio.TMP_PREFIX + "*"))


def test_a_write_sweeps_temp_files_from_every_folder(vault: Vault, vault_dir: Path) -> None:
    remember.add(vault, "first", "fact")
    root = user_dir(vault_dir)
    (root / "keys" / f"{fsio.TMP_PREFIX}2.dek.1.2").write_bytes(b"x")
    (root / "sessions" / f"{fsio.TMP_PREFIX}s.jsonl.1.2").write_bytes(b"x")
    remember.add(fresh(), "second", "fact")
    assert not list(root.rglob(fsio.TMP_PREFIX + "*"))
    # Control: only temp files go; a file whose name merely contains the prefix stays.
    keep = root / f"x{fsio.TMP_PREFIX}y"
    keep.write_bytes(b"")
    remember.add(fresh(), "third", "fact")
    assert keep.exists()
    os.unlink(keep)


# --- 4. an interrupted `forget --now` still retires the old key ---------------------------


def _ids(v: Vault) -> set[str]:
    doc = _export(v)
    return {r["memory_id"] for c in doc["categories"].values() for r in c["records"]}


def _kill_forget_now_at(point: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def die(*_: Any, **__: Any) -> Any:
        raise Killed(point)

    if point == "before-rekey":  # the record is gone from the files, the key not changed
        monkeypatch.setattr(keys, "reencrypt", die)
    elif point == "mid-reseal":  # a new key, some files still under the old one
        original, calls = UserStore.rewrite_lines, [0]

        def rewrite(self: UserStore, rel: str, records: list[Any]) -> Any:
            calls[0] += 1
            if calls[0] == 3:  # forget's own rewrite, one re-encrypted file, then the kill
                die()
            return original(self, rel, records)

        monkeypatch.setattr(UserStore, "rewrite_lines", rewrite)
    elif point == "before-retire":  # everything re-encrypted, the old key still there
        monkeypatch.setattr(Transaction, "retire_unused_keys", die)


@pytest.mark.parametrize(("point", "finisher"), [
    ("before-rekey", "forget-again"), ("mid-reseal", "forget-again"),
    ("before-retire", "add")])
def test_an_interrupted_forget_now_retires_the_old_key_on_the_next_run(
        script_runner: ScriptRunner, vault: Vault, vault_dir: Path,
        monkeypatch: pytest.MonkeyPatch, point: str, finisher: str) -> None:
    populate(vault)
    for session in ("s2", "s3"):
        ingest.add_messages(fresh(), session, [NewMessage(f"{session} note", "user", "m1")])
    target = remember.add(fresh(), "the locker code is 4471", "message",
                          session="s1").record.memory_id
    root = user_dir(vault_dir)
    before = _ids(fresh())
    backup = files_of(root)  # a backup taken before the forget
    old_epochs = {int(Path(rel).stem) for rel in backup if rel.startswith("keys/")}
    with monkeypatch.context() as patch:
        _kill_forget_now_at(point, patch)
        with pytest.raises(Killed):
            forget.forget(fresh(), forget.select(fresh(), [target]), now=True)
    assert old_epochs & set(fresh().store.deks_on_disk())  # the kill left an old key
    report = mem_json(script_runner, "verify")
    assert any("interrupted forget --now" in p["problem"] for p in report["problems"])

    if finisher == "forget-again":  # what it named is gone: nothing matches, exit 66
        assert mem(script_runner, "forget", target, "--now").returncode == 66
    else:
        assert mem(script_runner, "add", "a fact written after the kill").returncode == 0
    v = fresh()
    epoch = v.state().key_version
    # No key a pre-forget backup was sealed under is left, and nothing needs one.
    assert old_epochs.isdisjoint(v.store.deks_on_disk())
    assert v.store.keys_in_use(epoch) == {epoch} and v.state().retire_through is None
    after = _ids(v)
    assert target not in after and before - {target} <= after
    assert len(after) == len(before) - 1 + (finisher == "add")
    doc = mem_json(script_runner, "verify")
    assert doc["ok"] is True and doc["problems"] == [], doc


def test_index_folders_a_killed_rebuild_left_are_reported_repaired_and_swept(
        script_runner: ScriptRunner, vault: Vault, vault_dir: Path) -> None:
    """A rebuild killed between its renames leaves `index.new-PID` or `index.old-PID`: the
    old one holds the terms of what a forget just removed."""
    populate(vault)
    root = user_dir(vault_dir)
    leftovers = ["index.old-4242", "index.new-4243"]
    for name in leftovers:
        shutil.copytree(root / "index", root / name)
    report = mem_json(script_runner, "verify")
    found = {p["file"].removeprefix("default/alice/"): p for p in report["problems"]}
    assert report["ok"] is True and all(
        found[name]["severity"] == "warning" and found[name]["repairable"] for name in leftovers)
    doc = mem_json(script_runner, "verify", "--repair")
    assert doc["problems"] == [] and not any((root / n).exists() for n in leftovers), doc
    # Every write sweeps them too, under the lock every rebuild holds; the index stays.
    shutil.copytree(root / "index", root / leftovers[0])
    remember.add(fresh(), "a fact after the leftovers", "fact")
    assert not (root / leftovers[0]).exists() and (root / "index").is_dir()


def test_a_reader_that_finds_the_user_destroyed_once_it_has_the_lock_says_not_found(
        vault: Vault, vault_dir: Path) -> None:
    """A search that must rebuild the index waits for the lock a destroy holds; once it
    has the lock there is no user: exit 66, not a crash (FileNotFoundError, exit 1)."""
    remember.add(vault, "A fact about otters", "fact")
    reader = fresh()
    state = reader.state()
    reader.search_index(state.key_version)  # opened before the destroy, like a reader
    (user_dir(vault_dir) / "index" / "stamp").unlink()  # so it rebuilds, under the lock
    admin.destroy(fresh(), "alice")
    with pytest.raises(NotFound, match="destroyed meanwhile"):
        reader.ready_index(state)
    # Control: the same reader on a user that is still there rebuilds and reads.
    remember.add(fresh(), "A fact about otters", "fact")
    again = fresh()
    (user_dir(vault_dir) / "index" / "stamp").unlink()
    assert again.ready_index().is_current()
