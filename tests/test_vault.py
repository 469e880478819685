"""The vault core through the library: records, where they live, dedup, supersession, prefs."""

from __future__ import annotations

import json
import stat
import uuid
from pathlib import Path

import pytest

from mem.config import resolve
from mem.errors import NotFound, UsageError
from mem.records import CLAUDE_MD, PREFERENCES, Filters, parse_time, uuid7
from mem.vault import Vault, init
from tests.conftest import open_as


def test_init_creates_vault_and_private_key(vault_dir: Path, config_dir: Path) -> None:
    result = init(resolve())
    assert result["created"] is True
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
    assert again["created"] is False
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
    result = vault.add(f"something about {kind}", kind, tags=["t1"], importance=0.7)
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
    first = vault.add("hello there", "message", session="s1")
    vault.add("second session", "message", session="s2")
    records = vault.store.read_lines("sessions/s1.jsonl")
    assert [r.memory_id for r in records] == [first.record.memory_id]
    assert records[0].category == "conversation" and records[0].role == "user"
    with pytest.raises(UsageError, match="--session"):
        vault.add("no session", "message")


def test_identical_content_is_stored_once(vault: Vault) -> None:
    first = vault.add("Dog is named Luna", "fact")
    second = vault.add("Dog is named Luna", "fact")
    assert second.deduplicated and second.record.memory_id == first.record.memory_id
    other_type = vault.add("Dog is named Luna", "context")
    assert not other_type.deduplicated
    assert len(vault.store.doc_records(CLAUDE_MD)) == 2


def test_supersession_hides_the_old_entry(vault: Vault) -> None:
    old = vault.add("Uses Python 3.10", "fact").record
    new = vault.add("Uses Python 3.12 now", "correction", supersedes=old.memory_id).record
    listed = vault.list_records(Filters(limit=50))
    assert [r.memory_id for r in listed] == [new.memory_id]
    everything = vault.list_records(Filters(include_superseded=True, limit=50))
    by_id = {r.memory_id: r for r in everything}
    assert by_id[old.memory_id].superseded_by == new.memory_id
    assert by_id[new.memory_id].supersedes == old.memory_id
    with pytest.raises(NotFound):
        vault.add("x", "fact", supersedes=str(uuid.uuid4()))


def test_list_filters_and_order(vault: Vault) -> None:
    a = vault.add("alpha", "fact", tags=["x", "y"]).record
    b = vault.add("beta", "preference", tags=["x"]).record
    c = vault.add("gamma", "message", session="s9", tags=["y"]).record

    def ids(**kw: object) -> list[str]:
        return [r.memory_id for r in vault.list_records(Filters(limit=50, **kw))]  # type: ignore[arg-type]

    assert ids() == [c.memory_id, b.memory_id, a.memory_id]  # newest first
    assert ids(types=["fact"]) == [a.memory_id]
    assert ids(categories=["preference"]) == [b.memory_id]
    assert ids(tags=["x"]) == [b.memory_id, a.memory_id]
    assert ids(tags=["x", "y"]) == [a.memory_id]  # tags combine with AND
    assert ids(session="s9") == [c.memory_id]
    assert ids(after=parse_time(b.created_at)) == [c.memory_id, b.memory_id]
    assert ids(before=parse_time(b.created_at)) == [a.memory_id]
    assert [r.memory_id for r in vault.list_records(Filters(limit=1))] == [c.memory_id]
    with pytest.raises(UsageError):
        Filters(types=["nonsense"])


def test_show_and_not_found(vault: Vault) -> None:
    record = vault.add("Lives in Lisbon", "fact").record
    assert vault.get(record.memory_id).content == "Lives in Lisbon"
    with pytest.raises(NotFound):
        vault.get(str(uuid.uuid4()))


def test_input_validation(vault: Vault) -> None:
    with pytest.raises(UsageError):
        vault.add("   ", "fact")
    with pytest.raises(UsageError):
        vault.add("x", "fact", importance=1.5)
    with pytest.raises(UsageError):
        vault.add("x", "opinion")
    with pytest.raises(UsageError):
        vault.add("x", "fact", tags=["has space"])
    with pytest.raises(UsageError):
        vault.add("x", "message", session="../escape")
    assert vault.list_records(Filters()) == []


def test_preferences(vault: Vault) -> None:
    vault.pref_set("editor", "vim")
    vault.pref_set("output.format", "bullets")
    vault.pref_set("editor", "helix")
    assert vault.pref_get("editor")["value"] == "helix"
    assert [p["key"] for p in vault.pref_list()] == ["editor", "output.format"]
    vault.pref_unset("editor")
    with pytest.raises(NotFound):
        vault.pref_get("editor")
    with pytest.raises(NotFound):
        vault.pref_unset("editor")
    # Preference records and settings share the file without clobbering each other.
    vault.add("Prefers tea", "preference")
    vault.pref_set("lang", "en")
    assert [r.content for r in vault.store.doc_records(PREFERENCES)] == ["Prefers tea"]
    assert vault.pref_get("output.format")["value"] == "bullets"


def test_users_are_isolated(vault: Vault, vault_dir: Path) -> None:
    vault.add("alice's secret plan", "fact")
    bob = open_as("bob")
    assert bob.list_records(Filters()) == []
    assert not (vault_dir / "default" / "bob").exists()  # reads create nothing
    bob.add("bob's note", "fact")
    other_org = open_as("alice", org="other")
    assert other_org.list_records(Filters()) == []
    assert [r.content for r in vault.list_records(Filters())] == ["alice's secret plan"]
    # Each user has their own data key.
    assert (vault_dir / "default/alice/keys/1.dek").read_bytes() != \
        (vault_dir / "default/bob/keys/1.dek").read_bytes()


def test_stats_counts(vault: Vault) -> None:
    vault.add("a", "fact")
    vault.add("b", "preference")
    vault.add("c", "message", session="s1")
    vault.pref_set("k", "v")
    stats = vault.stats()
    assert stats["records"] == 3 and stats["sessions"] == 1 and stats["preferences"] == 1
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
    vault.add("a", "fact")
    vault.add("b", "message", session="s1")
    vault.pref_set("k", "v")
    report = vault.verify()
    assert report["ok"] and report["problems"] == []
    assert report["records_checked"] == 2


def test_a_record_that_only_lost_its_newline_is_kept(vault: Vault, vault_dir: Path) -> None:
    for text in ("one", "two"):
        vault.add(text, "message", session="s1")
    path = vault_dir / "default/alice/sessions/s1.jsonl"
    path.write_bytes(path.read_bytes()[:-1])  # the last record loses only its newline
    assert [r.content for r in vault.store.read_lines("sessions/s1.jsonl")] == ["one", "two"]
    vault.add("three", "message", session="s1")
    assert path.read_bytes().count(b"\n") == 3
    assert [r.content for r in vault.store.read_lines("sessions/s1.jsonl")] == \
        ["one", "two", "three"]
    assert vault.verify()["ok"]


def test_cutting_the_audit_log_tail_is_detected(vault: Vault, vault_dir: Path) -> None:
    vault.add("first", "fact")
    vault.add("second", "fact")
    audit = vault_dir / "default/alice/audit.jsonl"
    lines = audit.read_bytes().splitlines(keepends=True)
    audit.write_bytes(b"".join(lines[:-1]))  # drop the newest entry: the chain alone is fine
    report = vault.verify()
    assert not report["ok"]
    assert any("cut from its end" in p["problem"] for p in report["problems"])
    audit.unlink()  # deleting the whole log is detected too
    assert not open_as("alice").verify()["ok"]


def test_a_cut_audit_log_stays_detected_after_later_writes(vault: Vault,
                                                          vault_dir: Path) -> None:
    vault.add("first", "fact")
    vault.add("second", "fact")
    audit = vault_dir / "default/alice/audit.jsonl"
    lines = audit.read_bytes().splitlines(keepends=True)
    audit.write_bytes(b"".join(lines[:-1]))
    open_as("alice").add("third", "fact")  # a write anchors the log again...
    open_as("alice").add("fourth", "fact")
    report = open_as("alice").verify()  # ...but the cut it found is kept as evidence
    assert not report["ok"]
    assert any("were cut" in p["problem"] for p in report["problems"])


def test_a_document_from_a_newer_format_is_refused(vault: Vault) -> None:
    from mem.errors import DataError

    vault.add("a fact", "fact")
    vault.store.write_doc(CLAUDE_MD, {"format": 2, "records": []}, 1)
    with pytest.raises(DataError, match="format"):
        vault.list_records(Filters())
