"""The core's contracts: a vault from the previous release opens, reads decrypt only what
they return, one write reads the state once, and the core never words a surface."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from memvault.config import resolve
from memvault.errors import DataError
from memvault.model.records import Filters, NewMessage
from memvault.ops import admin, brief, forget, ingest, recall, remember
from memvault.ops import verify as verify_op
from memvault.storage.userstore import UserStore
from memvault.vault.vault import Vault

SRC = Path(__file__).resolve().parent.parent / "src" / "memvault"
PREVIOUS = Path(__file__).resolve().parent / "fixtures" / "previous-release"
PREVIOUS_KEY = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="


# --- a vault written by the previous release ----------------------------------------------


@pytest.fixture
def previous(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "old-vault"
    shutil.copytree(PREVIOUS / "vault", root)
    monkeypatch.setenv("MEM_VAULT", str(root))
    monkeypatch.setenv("MEM_MASTER_KEY", PREVIOUS_KEY)
    return root


def test_a_vault_from_the_previous_release_opens_and_is_upgraded(previous: Path) -> None:
    assert "migrations" not in json.loads((previous / "vault.json").read_text())
    vault = Vault(resolve())
    meta = json.loads((previous / "vault.json").read_text())
    assert meta["migrations"] == ["user-state-2"]
    for user in ("alice", "bob"):  # every user, not only the one opened
        state = json.loads((previous / "default" / user / "state.json").read_text())
        assert state["state"]["format"] == 2
    stats = admin.stats(vault)
    assert (stats.records, stats.active, stats.superseded) == (7, 6, 1)
    assert stats.by_type == {"fact": 2, "instruction": 1, "message": 3, "preference": 1}
    assert verify_op.verify(vault).ok


def test_the_previous_release_s_memory_reads_and_writes_as_before(previous: Path) -> None:
    vault = Vault(resolve())
    text = brief.build(vault, 50, 8000).brief
    assert "payments team" in text and "billing team" not in text  # superseded stays out
    assert "editor: helix" in text
    hits = recall.search(vault, "staging database password", Filters()).results
    assert hits and hits[0].session_id == "s-2026-03-01"
    # The forgotten message stays forgotten when its transcript comes again.
    messages = [NewMessage("remind me about the Friday deploy freeze", "user", "m3")]
    done = ingest.add_messages(vault, "s-2026-03-01", messages)
    assert (done.added, done.skipped) == (0, 1)
    added = remember.add(vault, "Moved to Lisbon", "fact")
    assert recall.show(vault, added.record.memory_id).record.content == "Moved to Lisbon"
    assert admin.stats(vault).records == 8
    assert verify_op.verify(vault).ok


# --- reads proportional to what they return ----------------------------------------------


@pytest.fixture
def busy_user(vault: Vault) -> dict[str, Any]:
    """A user with facts, preferences, a supersession and a few sessions."""
    fact = remember.add(vault, "Works on the billing service", "fact").record
    newer = remember.add(vault, "Works on the payments service", "fact",
                         supersedes=fact.memory_id).record
    remember.add(vault, "Prefers short answers", "preference")
    for s in range(3):
        ingest.add_messages(vault, f"s{s}", [
            NewMessage(f"session {s} turn {i} about the invoice test", "user", f"m{i}")
            for i in range(20)])
    message = recall.list_records(vault, Filters(types=["message"], limit=1)).records[0]
    return {"fact": fact, "newer": newer, "message": message}


def _no_session_scans(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: UserStore, relpath: str) -> Any:
        raise AssertionError(f"read the whole of {relpath}")

    monkeypatch.setattr(UserStore, "scan_lines", refuse)


def test_brief_stats_show_and_list_never_read_a_whole_session(
        vault: Vault, busy_user: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    _no_session_scans(monkeypatch)
    fresh = Vault(resolve())
    assert "payments" in brief.build(fresh, 50, 8000).brief
    stats = admin.stats(fresh)
    assert (stats.records, stats.active, stats.superseded) == (63, 62, 1)
    message = busy_user["message"]
    assert recall.show(fresh, message.memory_id).record.content == message.content
    old = recall.show(fresh, busy_user["fact"].memory_id).record
    assert old.superseded_by == busy_user["newer"].memory_id
    listed = recall.list_records(fresh, Filters(limit=5)).records
    assert len(listed) == 5
    assert [r.created_at for r in listed] == sorted((r.created_at for r in listed),
                                                    reverse=True)


def test_show_decrypts_one_line(vault: Vault, busy_user: dict[str, Any],
                                monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[str] = []
    real = UserStore._open_line

    def counting(self: UserStore, relpath: str, raw: bytes) -> Any:
        opened.append(relpath)
        return real(self, relpath, raw)

    monkeypatch.setattr(UserStore, "_open_line", counting)
    recall.show(Vault(resolve()), busy_user["message"].memory_id)
    assert len(opened) == 1


def test_forget_session_reads_only_that_session(vault: Vault, busy_user: dict[str, Any],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    fresh = Vault(resolve())
    read: list[str] = []
    real = UserStore.scan_lines

    def recording(self: UserStore, relpath: str) -> Any:
        read.append(relpath)
        return real(self, relpath)

    monkeypatch.setattr(UserStore, "scan_lines", recording)
    plan = forget.select(fresh, [], "s1")
    assert len(plan.targets) == 20 and read == []  # selected through the index
    read.clear()
    forget.forget(fresh, plan)  # the index too: other sessions are carried over from it
    assert set(read) == {"sessions/s1.jsonl"}
    assert len(recall.search(fresh, "invoice test", Filters(limit=100)).results) == 40


def test_a_damaged_session_does_not_stop_the_brief(vault: Vault,
                                                   busy_user: dict[str, Any]) -> None:
    path = vault.layout.path("sessions/s2.jsonl")
    path.write_bytes(path.read_bytes().replace(b'"ct":"', b'"ct":"AAAA', 1))
    fresh = Vault(resolve())
    assert "Prefers short answers" in brief.build(fresh, 50, 8000).brief
    assert admin.stats(fresh).records == 63
    with pytest.raises(DataError):
        list(fresh.store.records())  # the damage is real: a whole read finds it


def test_stats_counters_follow_every_write(vault: Vault) -> None:
    first = remember.add(vault, "Lives in Porto", "fact").record
    remember.add(vault, "Lives in Porto", "fact")  # deduplicated: counted once
    remember.add(vault, "Use tabs", "instruction")
    ingest.add_messages(vault, "a", [NewMessage(f"hello {i}", "user", f"m{i}")
                                     for i in range(4)])
    forget.forget(vault, forget.select(vault, [first.memory_id]))
    stats = admin.stats(vault)
    assert stats.by_type == {"instruction": 1, "message": 4}
    assert stats.by_category == {"conversation": 4, "preference": 1}
    assert stats.records == 5
    assert verify_op.verify(vault).ok  # verify recounts and agrees


def test_a_counter_that_drifted_is_reported_and_repaired(vault: Vault) -> None:
    remember.add(vault, "Lives in Porto", "fact")
    with vault.transaction() as tx:
        tx.state.count("fact", 5)
        tx.touch()
    result = verify_op.verify(vault)
    assert result.ok  # a warning: derived data
    assert any("counters" in p.problem and p.repairable for p in result.problems)
    verify_op.repair(vault)
    assert admin.stats(vault).by_type == {"fact": 1}
    assert not verify_op.verify(vault).problems


# --- one transaction -------------------------------------------------------------------


def test_a_write_reads_the_state_once(vault: Vault, monkeypatch: pytest.MonkeyPatch) -> None:
    remember.add(vault, "first", "fact")  # the user exists
    loads: list[int] = []
    real = UserStore.load_state

    def counting(self: UserStore) -> Any:
        loads.append(1)
        return real(self)

    monkeypatch.setattr(UserStore, "load_state", counting)
    remember.add(vault, "second", "fact")
    ingest.add_messages(vault, "s", [NewMessage("hi", "user", "m1")])
    assert len(loads) == 2


# --- the core never words a surface ------------------------------------------------------


def _core_sources() -> list[Path]:
    return [p for p in SRC.rglob("*.py") if "cli" not in p.relative_to(SRC).parts]


def test_core_messages_name_no_flag_and_no_command() -> None:
    offenders = []
    for path in _core_sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and node.exc is not None:
                for part in ast.walk(node.exc):
                    if isinstance(part, ast.Constant) and isinstance(part.value, str) and (
                            " --" in f" {part.value}" or "`mem " in part.value):
                        offenders.append(f"{path.name}:{node.lineno}: {part.value!r}")
    assert offenders == []


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return node.id if isinstance(node, ast.Name) else ""


def test_nothing_below_the_cli_reads_stdin_prompts_or_writes_the_environment() -> None:
    offenders = []
    for path in _core_sources():
        tree = ast.parse(path.read_text())
        # A forked worker drops mem's settings from its own copy of the environment,
        # there and nowhere else (process.forget_mem_settings).
        exempt = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
                  and path.name == "process.py" and f.name == "forget_mem_settings"
                  for n in ast.walk(f)}
        for node in ast.walk(tree):
            name = ""
            if id(node) in exempt:
                continue
            if isinstance(node, ast.Attribute) and _dotted(node) in ("sys.stdin",
                                                                     "getpass.getpass"):
                name = _dotted(node)
            elif isinstance(node, ast.Call) and _dotted(node.func) in (
                    "os.environ.setdefault", "os.environ.update", "os.environ.pop",
                    "os.putenv", "input", "getpass"):
                name = _dotted(node.func)
            elif isinstance(node, ast.Assign | ast.AugAssign | ast.Delete):
                targets = node.targets if isinstance(node, ast.Assign | ast.Delete) \
                    else [node.target]
                if any(isinstance(t, ast.Subscript) and _dotted(t.value) == "os.environ"
                       for t in targets):
                    name = "os.environ[...] ="
            if name:
                offenders.append(f"{path.name}:{node.lineno}: {name}")
    assert offenders == []


def test_every_result_serialises_to_json(vault: Vault, busy_user: dict[str, Any]) -> None:
    results = [
        admin.stats(vault), admin.audit_log(vault), brief.build(vault, 50, 8000),
        recall.search(vault, "invoice", Filters()), recall.list_records(vault, Filters()),
        recall.show(vault, busy_user["fact"].memory_id), verify_op.verify(vault),
        forget.select(vault, [], "s0"),
    ]
    for result in results:
        json.dumps(result.to_dict())


# --- keys are never overwritten ----------------------------------------------------------


def test_a_wrapped_data_key_is_never_overwritten(vault: Vault) -> None:
    from memvault.errors import StorageError

    remember.add(vault, "first", "fact")
    path = vault.layout.dek_path(1)
    before = path.read_bytes()
    with pytest.raises(StorageError, match="never overwritten"):
        Vault(resolve()).store.new_epoch(1)
    assert path.read_bytes() == before
    assert recall.list_records(Vault(resolve()), Filters()).records[0].content == "first"


def test_rotation_after_a_rolled_back_state_starts_past_every_key_on_disk(
        vault: Vault) -> None:
    from memvault.ops import keys

    remember.add(vault, "sealed under the first key", "fact")
    old_state = vault.layout.state_path.read_bytes()
    keys.rotate_key(vault)  # epoch 2
    remember.add(Vault(resolve()), "sealed under the second key", "fact")
    vault.layout.state_path.write_bytes(old_state)  # a restored older state says epoch 1
    result = keys.rotate_key(Vault(resolve()), now=True)
    assert result.key_version == 3  # not 2: that key is on disk, and data needs it
    fresh = Vault(resolve())
    assert sorted(r.content for r in recall.list_records(fresh, Filters()).records) == \
        ["sealed under the first key", "sealed under the second key"]


def test_verify_finds_an_id_stored_twice_across_spilled_runs(tmp_path: Path) -> None:
    """verify's duplicate-id check keeps a bounded run in memory and spills the rest to
    an unnamed file: a repeat far apart (in different runs) is still found, and nothing
    named is left behind."""
    from memvault.ops.verify import _Digests

    where = tmp_path / "user"
    where.mkdir()
    digests = _Digests(where)
    digests.RUN = 100  # many runs for a few records
    for n in range(1_000):
        digests.add(n * 7919 % 1_000_003)
    digests.add(5 * 7919)  # the sixth one, again, long after its run was spilled
    digests.add(999 * 7919 % 1_000_003)
    assert len(digests.runs) == 10
    assert digests.repeated() == {5 * 7919, 999 * 7919 % 1_000_003}
    assert list(where.iterdir()) == []
