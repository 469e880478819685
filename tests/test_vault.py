"""The vault core through the library: records, where they live, dedup, supersession, prefs."""

from __future__ import annotations

import json
import stat
import uuid
from pathlib import Path

import pytest

from memvault.cli.errors import word
from memvault.config import resolve
from memvault.errors import NotFound, UsageError
from memvault.model.records import CLAUDE_MD, PREFERENCES, Filters, Record, parse_time, uuid7
from memvault.ops import admin, prefs, recall, remember
from memvault.ops import verify as verify_op
from memvault.ops.admin import init
from memvault.vault.vault import Vault
from tests.conftest import open_as


def listed(vault: Vault, filters: Filters) -> list[Record]:
    return list(recall.list_records(vault, filters).records)


def test_init_creates_vault_and_private_key(vault_dir: Path, config_dir: Path) -> None:
    result = init(resolve())
    assert result.created is True
    meta = json.loads((vault_dir / "vault.json").read_text())
    assert meta["format"] == 1 and len(meta["key_check"]) == 32
    key_file = config_dir / "master.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(config_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE(vault_dir.stat().st_mode) == 0o700
    # No user directory until that user's first write.
    assert [p.name for p in vault_dir.iterdir()] == ["vault.json"]


def test_init_twice_keeps_the_key(vault_dir: Path, config_dir: Path) -> None:
    init(resolve())
    key = (config_dir / "master.key").read_bytes()
    again = init(resolve())
    assert again.created is False
    assert (config_dir / "master.key").read_bytes() == key


@pytest.mark.parametrize(
    ("kind", "home", "category", "behavioral"),
    [
        ("fact", CLAUDE_MD, "learned_context", False),
        ("context", CLAUDE_MD, "learned_context", False),
        ("pattern", CLAUDE_MD, "work_pattern", False),
        ("summary", CLAUDE_MD, "learned_context", False),
        ("preference", PREFERENCES, "preference", True),
        ("instruction", PREFERENCES, "preference", True),
        ("correction", PREFERENCES, "preference", True),
    ],
)
def test_each_type_is_stored_where_spec_says(
    vault: Vault, kind: str, home: str, category: str, behavioral: bool
) -> None:
    result = remember.add(vault, f"something about {kind}", kind, tags=["t1"], importance=0.7)
    stored = vault.store.doc_records(home)
    assert [r.memory_id for r in stored] == [result.record.memory_id]
    record = stored[0]
    assert record.category == category
    assert record.behavioral is behavioral
    assert record.content_hash.startswith("sha256:")
    assert record.importance == 0.7 and record.tags == ["t1"]
    assert record.org_id == "default" and record.user_id == "alice"
    assert record.key_version == 1


def test_messages_go_to_their_session_file(vault: Vault) -> None:
    first = remember.add(vault, "hello there", "message", session="s1")
    remember.add(vault, "second session", "message", session="s2")
    records = vault.store.read_lines("sessions/s1.jsonl")
    assert [r.memory_id for r in records] == [first.record.memory_id]
    assert records[0].category == "conversation" and records[0].role == "user"
    with pytest.raises(UsageError, match="needs a session") as err:
        remember.add(vault, "no session", "message")
    assert err.value.field == "session"
    assert "--session" in word(err.value)  # how the command line words it


def test_identical_content_is_stored_once(vault: Vault) -> None:
    first = remember.add(vault, "Dog is named Luna", "fact")
    second = remember.add(vault, "Dog is named Luna", "fact")
    assert second.deduplicated and second.record.memory_id == first.record.memory_id
    other_type = remember.add(vault, "Dog is named Luna", "context")
    assert not other_type.deduplicated
    assert len(vault.store.doc_records(CLAUDE_MD)) == 2


def test_supersession_hides_the_old_entry(vault: Vault) -> None:
    old = remember.add(vault, "Uses Python 3.10", "fact").record
    new = remember.add(vault, "Uses Python 3.12 now", "correction",
                       supersedes=old.memory_id).record
    shown = listed(vault, Filters(limit=50))
    assert [r.memory_id for r in shown] == [new.memory_id]
    everything = listed(vault, Filters(include_superseded=True, limit=50))
    by_id = {r.memory_id: r for r in everything}
    assert by_id[old.memory_id].superseded_by == new.memory_id
    assert by_id[new.memory_id].supersedes == old.memory_id
    with pytest.raises(NotFound):
        remember.add(vault, "x", "fact", supersedes=str(uuid.uuid4()))


def test_list_filters_and_order(vault: Vault) -> None:
    a = remember.add(vault, "alpha", "fact", tags=["x", "y"]).record
    b = remember.add(vault, "beta", "preference", tags=["x"]).record
    c = remember.add(vault, "gamma", "message", session="s9", tags=["y"]).record

    def ids(**kw: object) -> list[str]:
        return [r.memory_id for r in listed(vault, Filters(limit=50, **kw))]  # type: ignore[arg-type]

    assert ids() == [c.memory_id, b.memory_id, a.memory_id]  # newest first
    assert ids(types=["fact"]) == [a.memory_id]
    assert ids(categories=["preference"]) == [b.memory_id]
    assert ids(tags=["x"]) == [b.memory_id, a.memory_id]
    assert ids(tags=["x", "y"]) == [a.memory_id]  # tags combine with AND
    assert ids(session="s9") == [c.memory_id]
    assert ids(after=parse_time(b.created_at)) == [c.memory_id, b.memory_id]
    assert ids(before=parse_time(b.created_at)) == [a.memory_id]
    assert [r.memory_id for r in listed(vault, Filters(limit=1))] == [c.memory_id]
    with pytest.raises(UsageError):
        Filters(types=["nonsense"])


def test_show_and_not_found(vault: Vault) -> None:
    record = remember.add(vault, "Lives in Lisbon", "fact").record
    assert recall.show(vault, record.memory_id).record.content == "Lives in Lisbon"
    with pytest.raises(NotFound):
        recall.show(vault, str(uuid.uuid4()))


def test_input_validation(vault: Vault) -> None:
    with pytest.raises(UsageError):
        remember.add(vault, "   ", "fact")
    with pytest.raises(UsageError):
        remember.add(vault, "x", "fact", importance=1.5)
    with pytest.raises(UsageError):
        remember.add(vault, "x", "opinion")
    with pytest.raises(UsageError):
        remember.add(vault, "x", "fact", tags=["has space"])
    with pytest.raises(UsageError):
        remember.add(vault, "x", "message", session="../escape")
    assert listed(vault, Filters()) == []


def test_preferences(vault: Vault) -> None:
    prefs.set_(vault, "editor", "vim")
    prefs.set_(vault, "output.format", "bullets")
    prefs.set_(vault, "editor", "helix")
    assert prefs.get(vault, "editor").value == "helix"
    assert [p.key for p in prefs.list_(vault).prefs] == ["editor", "output.format"]
    prefs.unset(vault, "editor")
    with pytest.raises(NotFound):
        prefs.get(vault, "editor")
    with pytest.raises(NotFound):
        prefs.unset(vault, "editor")
    # Preference records and settings share the file without clobbering each other.
    remember.add(vault, "Prefers tea", "preference")
    prefs.set_(vault, "lang", "en")
    assert [r.content for r in vault.store.doc_records(PREFERENCES)] == ["Prefers tea"]
    assert prefs.get(vault, "output.format").value == "bullets"


def test_users_are_isolated(vault: Vault, vault_dir: Path) -> None:
    remember.add(vault, "alice's secret plan", "fact")
    bob = open_as("bob")
    assert listed(bob, Filters()) == []
    assert not (vault_dir / "default" / "bob").exists()  # reads create nothing
    remember.add(bob, "bob's note", "fact")
    other_org = open_as("alice", org="other")
    assert listed(other_org, Filters()) == []
    assert [r.content for r in listed(vault, Filters())] == ["alice's secret plan"]
    # Each user has their own data key.
    assert (vault_dir / "default/alice/keys/1.dek").read_bytes() != \
        (vault_dir / "default/bob/keys/1.dek").read_bytes()


def test_stats_counts(vault: Vault) -> None:
    remember.add(vault, "a", "fact")
    remember.add(vault, "b", "preference")
    remember.add(vault, "c", "message", session="s1")
    prefs.set_(vault, "k", "v")
    stats = admin.stats(vault).to_dict()
    assert stats["records"] == 3 and stats["sessions"] == 1 and stats["pref_keys"] == 1
    assert stats["by_category"] == {"conversation": 1, "learned_context": 1, "preference": 1}
    assert stats["key_version"] == 1 and stats["audit_entries"] >= 5


def test_uuid7_is_time_ordered_and_versioned() -> None:
    ids = [uuid7() for _ in range(200)]
    parsed = [uuid.UUID(i) for i in ids]
    assert all(u.version == 7 and u.variant == uuid.RFC_4122 for u in parsed)
    assert len(set(ids)) == 200
    stamps = [u.int >> 80 for u in parsed]
    assert stamps == sorted(stamps)


def test_verify_clean_vault(vault: Vault) -> None:
    remember.add(vault, "a", "fact")
    remember.add(vault, "b", "message", session="s1")
    prefs.set_(vault, "k", "v")
    report = verify_op.verify(vault).to_dict()
    assert report["ok"] and report["problems"] == []
    assert report["records_checked"] == 2


def test_a_record_that_only_lost_its_newline_is_kept(vault: Vault, vault_dir: Path) -> None:
    for text in ("one", "two"):
        remember.add(vault, text, "message", session="s1")
    path = vault_dir / "default/alice/sessions/s1.jsonl"
    path.write_bytes(path.read_bytes()[:-1])  # the last record loses only its newline
    assert [r.content for r in vault.store.read_lines("sessions/s1.jsonl")] == ["one", "two"]
    remember.add(vault, "three", "message", session="s1")
    assert path.read_bytes().count(b"\n") == 3
    assert [r.content for r in vault.store.read_lines("sessions/s1.jsonl")] == \
        ["one", "two", "three"]
    assert verify_op.verify(vault).to_dict()["ok"]


def test_cutting_the_audit_log_tail_is_detected(vault: Vault, vault_dir: Path) -> None:
    remember.add(vault, "first", "fact")
    remember.add(vault, "second", "fact")
    audit = vault_dir / "default/alice/audit.jsonl"
    lines = audit.read_bytes().splitlines(keepends=True)
    audit.write_bytes(b"".join(lines[:-1]))  # drop the newest entry: the chain alone is fine
    report = verify_op.verify(vault).to_dict()
    assert not report["ok"]
    assert any("cut from its end" in p["problem"] for p in report["problems"])
    audit.unlink()  # deleting the whole log is detected too
    assert not verify_op.verify(open_as("alice")).to_dict()["ok"]


def test_a_cut_audit_log_stays_detected_after_later_writes(vault: Vault,
                                                          vault_dir: Path) -> None:
    remember.add(vault, "first", "fact")
    remember.add(vault, "second", "fact")
    audit = vault_dir / "default/alice/audit.jsonl"
    lines = audit.read_bytes().splitlines(keepends=True)
    audit.write_bytes(b"".join(lines[:-1]))
    remember.add(open_as("alice"), "third", "fact")  # a write anchors the log again...
    remember.add(open_as("alice"), "fourth", "fact")
    # ...but the cut it found is kept as evidence
    report = verify_op.verify(open_as("alice")).to_dict()
    assert not report["ok"]
    assert any("were cut" in p["problem"] for p in report["problems"])


def test_a_document_from_a_newer_format_is_refused(vault: Vault) -> None:
    from memvault.errors import DataError

    remember.add(vault, "a fact", "fact")
    vault.store.write_doc(CLAUDE_MD, {"format": 2, "records": []}, 1)
    with pytest.raises(DataError, match="format"):
        listed(vault, Filters())
