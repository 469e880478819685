"""A live session grown by a few messages is stored in proportion to those messages
(issue 34, item 4): what is stored already is told by the session's keyed marks, kept
sealed beside its file, so a re-ingest neither decrypts nor seals again what the session
held. The marks are derived: lost, stale, torn or another session's, they are made again
from the file, and every message is still stored once; a forget takes a message's mark
with it, and a forgotten message never comes back.

The real sessions are ../shared/bench-data/transcripts, read in place (copied to tmp only
to be cut and grown)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from memvault.model.location import session_file
from memvault.ops.ingest import ingest_file
from memvault.vault.vault import Vault
from test_ingest_incremental import SESSION, _subagents, line_ends, live, real_data, whole
from test_ingest_prefixes import stored, vault_for


def _grown(tmp_path: Path, user: str) -> tuple[Vault, Path, bytes, str]:
    """A vault that ingested 90% of the session; the copy, its whole bytes, its file."""
    raw = SESSION.read_bytes()
    ends = line_ends(raw)
    path = live(tmp_path, SESSION)
    path.write_bytes(raw[:ends[len(ends) * 9 // 10]])
    v = vault_for(user)
    first = ingest_file(v, path)
    assert first.messages_added > 0
    return v, path, raw, session_file(first.session_id)


@real_data
def test_a_grown_session_is_appended_to_without_reading_what_it_holds(
        vault: Vault, tmp_path: Path) -> None:
    """A line stored before is damaged (a bit of its ciphertext flipped): a re-ingest of
    the grown transcript still appends its new messages, since it reads nothing of what
    the session held, and the bytes stored before stay as they were (nothing sealed
    again). `mem verify` is what reports the damaged line."""
    v, path, raw, relpath = _grown(tmp_path, "append-only")
    stored_file = v.layout.path(relpath)
    data = bytearray(stored_file.read_bytes())
    first_line = data.index(b"\n")
    at = data.rindex(b'"ct":"', 0, first_line) + 10
    data[at] = ord("A") if data[at] != ord("A") else ord("B")
    stored_file.write_bytes(bytes(data))
    before = bytes(data)
    path.write_bytes(raw)  # the same file, grown
    grown = ingest_file(v, path)
    assert grown.messages_added > 0
    after = stored_file.read_bytes()
    assert after.startswith(before) and len(after) > len(before)


@real_data
@pytest.mark.parametrize("spill", [None, 16], ids=["held", "spilled"])
@pytest.mark.parametrize("change", ["lost", "stale", "torn", "another session's"])
def test_marks_lost_or_stale_still_store_each_message_once(
        vault: Vault, tmp_path: Path, change: str, spill: int | None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    if spill is not None:  # the marks of a long session: in a table on disk
        from memvault.storage import userstore

        monkeypatch.setattr(userstore, "MARKS_SPILL", spill)
        change += " "
    v, path, raw, relpath = _grown(tmp_path, f"m{abs(hash(change)) % 10**8}")
    marks = (v.layout.dir / "marks" / relpath).with_suffix(".marks")
    assert marks.is_file()
    kept = tmp_path / "kept.marks"
    shutil.copyfile(marks, kept)
    ends = line_ends(raw)
    path.write_bytes(raw[:ends[len(ends) * 19 // 20]])
    ingest_file(v, path)  # appends, and a frame to the marks
    if change.strip() == "lost":
        marks.unlink()
    elif change.strip() == "stale":  # the marks as they were before that append
        shutil.copyfile(kept, marks)
    elif change.strip() == "torn":
        with marks.open("ab") as fh:
            fh.write(b"garbage without its newline")
    else:
        other = (v.layout.dir / "marks" / session_file("another")).with_suffix(".marks")
        shutil.copyfile(marks, other)
        shutil.copyfile(kept, marks)
        other.rename(marks)
    path.write_bytes(raw)
    ingest_file(v, path)
    ingest_file(v, path)
    expected = whole(SESSION, f"m{abs(hash(change)) % 10**8}w")
    assert stored(v) == expected - _subagents(SESSION, f"m{abs(hash(change)) % 10**8}w")


@real_data
def test_a_forgotten_message_leaves_the_marks_and_is_never_stored_again(
        vault: Vault, tmp_path: Path) -> None:
    from memvault.ops.forget import forget, select

    v, path, raw, relpath = _grown(tmp_path, "forgets")
    records = v.store.read_lines(relpath)
    gone = records[len(records) // 2]
    mark = v.store.record_mark(gone)
    assert v.store.marks(relpath).holds(mark)
    forget(v, select(v, [gone.memory_id]))
    fresh = vault_for("forgets")  # another process: nothing held in memory
    assert not fresh.store.marks(relpath).holds(mark)
    path.write_bytes(raw)
    ingest_file(fresh, path)
    ingest_file(fresh, path)
    held = {r[2] for r in stored(fresh)}
    assert gone.message_id not in held
    assert len(held) > len(records)


@real_data
def test_a_long_session_s_marks_wait_on_disk_not_in_memory(
        vault: Vault, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A first ingest of a huge transcript asks its session's marks about every block it
    stores: past MARKS_SPILL they wait in a table on disk (an unlinked file), so memory
    holds at most that many whatever the session's size. Written whole, they are frames
    of at most that many, each read back (another process holds no more of them), and
    every message is still stored once."""
    from memvault.storage import userstore

    monkeypatch.setattr(userstore, "MARKS_SPILL", 16)
    v, path, raw, relpath = _grown(tmp_path, "spilled")
    records = v.store.read_lines(relpath)
    assert len(records) > 4 * 16
    expected = sorted((v.store.record_mark(r), v.store.content_mark(r.content_hash))
                      for r in records)
    marks = v.store.marks(relpath)
    assert marks.kept.held() <= 16
    assert sorted(marks.kept.items()) == expected
    assert marks.holds(expected[-1][0]) and not marks.holds(b"\0" * 16)
    # Lost, they are made again from the file and written whole by the next append: in
    # frames of at most MARKS_SPILL.
    file = (v.layout.dir / "marks" / relpath).with_suffix(".marks")
    file.unlink()
    ends = line_ends(raw)
    path.write_bytes(raw[:ends[len(ends) * 19 // 20]])
    assert ingest_file(vault_for("spilled"), path).messages_added > 0
    records = v.store.read_lines(relpath)
    expected = sorted((v.store.record_mark(r), v.store.content_mark(r.content_hash))
                      for r in records)
    assert file.read_bytes().count(b"\n") >= len(expected) // 16
    fresh = vault_for("spilled")  # another process: the marks read back frame by frame
    loaded = fresh.store.marks(relpath)
    assert loaded.kept.held() <= 16 and sorted(loaded.kept.items()) == expected
    assert not [p for p in v.layout.dir.iterdir() if p.name.startswith(".tmp-")]
    path.write_bytes(raw)
    ingest_file(fresh, path)
    ingest_file(fresh, path)
    assert stored(fresh) == whole(SESSION, "spilledw") - _subagents(SESSION, "spilledw")
