"""A few records waiting in a long session are embedded reading their own lines (issue
34, item 4: a scheduled `mem embed` decrypted a whole session's line file when one of its
records had no vector): the clear headers say which lines wait, and only those and the
turns beside a person's turn among them are decrypted. The vectors are the ones a whole
read of the session makes; a forget or a compaction between reading and adding leaves the
record for the next run rather than adding a vector of what the file no longer says."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memvault.config import CompactionConfig, resolve
from memvault.embed.builtin import load
from memvault.index.base import beside
from memvault.index.vectors import DIGEST_LEN, embed_text, mixed_rows, stored_vectors, vector_digest
from memvault.model.location import session_file
from memvault.model.records import Record
from memvault.ops import compact, embed, forget
from memvault.ops.ingest import ingest_file
from memvault.storage import userstore
from memvault.storage.userstore import UserStore
from memvault.vault.vault import Vault

TURNS = 3001  # its last turn a person's (alice's)


def chat(path: Path, count: int, start: datetime) -> Path:
    """Two people and an agent: a person's turn borrows from a person's beside it."""
    who = [("user", "alice"), ("user", "bob"), ("assistant", None)]
    path.write_text("".join(json.dumps({
        "role": who[n % 3][0], **({"name": who[n % 3][1]} if who[n % 3][1] else {}),
        "content": f"turn {n}: the {['kiln', 'glaze', 'clay', 'slip'][n % 4]} at "
                   f"{900 + n} degrees",
        "timestamp": (start + timedelta(minutes=n)).strftime("%Y-%m-%dT%H:%M:%SZ")}) + "\n"
        for n in range(count)))
    return path


def vectors(vault: Vault) -> Any:
    return vault.vector_store(vault.state().key_version)


def as_now(vault: Vault, relpath: str) -> dict[str, bytes]:
    """Each record's vector digest as the whole file read now gives it."""
    records = vault.store.read_lines(relpath)
    return {r.memory_id: vector_digest(embed_text(r), beside(records, i))[:DIGEST_LEN]
            .ljust(DIGEST_LEN, b"\0") for i, r in enumerate(records)}


class Decrypted:
    """The line records the store decrypts (its one way to open a line), by id."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.ids: list[str] = []
        real = UserStore._open_line

        def counted(store: UserStore, relpath: str, raw: bytes) -> Record:
            record = real(store, relpath, raw)
            self.ids.append(record.memory_id)
            return record

        monkeypatch.setattr(UserStore, "_open_line", counted)


class Calling:
    """The built-in model, calling `before` on each batch before embedding it."""

    def __init__(self, before: Any) -> None:
        self.inner = load()
        self.model = self.inner.model
        self.before = before

    def embed(self, texts: Sequence[str]) -> Any:
        self.before()
        return self.inner.embed(texts)


@pytest.fixture(scope="module")
def model() -> Any:
    return load()


def long_session(vault: Vault, tmp_path: Path, model: Any,
                 start: datetime = datetime(2026, 5, 4, 8, tzinfo=UTC)) -> str:
    """A session of TURNS records, every one embedded; its file's relpath."""
    result = ingest_file(vault, chat(tmp_path / "chat.jsonl", TURNS, start))
    relpath = session_file(result.session_id)
    assert embed.embed_pending(vault, model).embedded == TURNS
    return relpath


def test_one_record_waiting_in_a_long_session_is_read_alone(
        vault: Vault, tmp_path: Path, model: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    relpath = long_session(vault, tmp_path, model)
    records = vault.store.read_lines(relpath)
    n = 1501  # a person's turn (bob's) between alice's and the agent's
    waiting = records[n]
    assert (waiting.role, records[n - 1].role, records[n + 1].role) == \
        ("user", "user", "assistant")
    vectors(vault).remove([waiting.memory_id])  # its vector dropped: it waits alone
    assert embed.pending_count(vault) == 1
    opened = Decrypted(monkeypatch)
    assert embed.embed_pending(vault, model).embedded == 1  # what `mem embed` runs
    monkeypatch.undo()
    # Its own line and the two beside it (what its vector borrows, and whether it may),
    # not the session's 3,000.
    assert sorted(opened.ids) == sorted(r.memory_id for r in records[n - 1:n + 2])
    held = vectors(vault).has()
    assert held == as_now(vault, relpath)  # the same text and neighbours as read whole
    # And the vector itself: its own plus half of alice's turn before it (the agent's
    # reply after it lends nothing), as the whole session read at once makes it.
    rows = model.embed([embed_text(waiting), records[n - 1].content])
    want = mixed_rows(rows, [0], [1], [-1])[0]
    got = dict(stored_vectors(vectors(vault)))[waiting.memory_id]
    assert float(np.dot(want, got) / np.linalg.norm(got)) > 0.999


def test_turns_a_long_session_grew_by_are_embedded_by_a_scheduled_run_alone(
        vault: Vault, tmp_path: Path, model: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A session grown by two turns, embedded by a scheduled run (not the write's own
    background one): the two, and the person's turn before them their words made stale."""
    start = datetime(2026, 5, 4, 8, tzinfo=UTC)
    relpath = long_session(vault, tmp_path, model, start)
    path = chat(tmp_path / "grown.jsonl", TURNS + 2, start)
    (tmp_path / "chat.jsonl").write_text(path.read_text())
    ingest_file(Vault(resolve()), tmp_path / "chat.jsonl")
    records = vault.store.read_lines(relpath)
    assert len(records) == TURNS + 2
    assert embed.pending_count(vault) == 3  # alice's last turn borrows from bob's new one
    opened = Decrypted(monkeypatch)
    assert embed.embed_pending(vault, model).embedded == 3
    monkeypatch.undo()
    assert set(opened.ids) == {r.memory_id for r in records[-4:]}
    assert len(opened.ids) == 4  # each line decrypted once
    assert vectors(vault).has() == as_now(vault, relpath)


@pytest.mark.parametrize("gone", [-1, 0, 1])  # the turn before it, itself, the one after
def test_a_forget_meanwhile_leaves_the_waiting_record_for_the_next_run(
        vault: Vault, tmp_path: Path, model: Any, gone: int) -> None:
    relpath = long_session(vault, tmp_path, model)
    records = vault.store.read_lines(relpath)
    n = 1501  # bob's turn, alice's before it (it borrows), the agent's after it
    assert [r.role for r in records[n - 1:n + 2]] == ["user", "user", "assistant"]
    waiting, forgotten = records[n], records[n + gone]
    vectors(vault).remove([waiting.memory_id])
    # Every digest a vector of the forgotten turn's words, or borrowing them, would carry.
    tainted = {vector_digest(embed_text(r), beside(records, i))[:DIGEST_LEN]
               for i, r in enumerate(records)
               if r is forgotten or forgotten.content in beside(records, i)}
    assert len(tainted) == (1 if gone == 1 else 2)  # the agent's reply lends nothing

    def forget_it() -> None:  # the session rewritten after the batch was read
        other = Vault(resolve())
        forget.forget(other, forget.select(other, [forgotten.memory_id]))

    assert embed.embed_pending(vault, Calling(forget_it)).embedded == 0
    held = vectors(vault).has()
    assert waiting.memory_id not in held  # left for the next run, not embedded stale
    assert forgotten.memory_id not in held
    assert not tainted & {d[:DIGEST_LEN] for d in held.values()}
    embed.embed_pending(vault, model)  # the next run: as the file is now
    assert vectors(vault).has() == as_now(vault, relpath)


def test_a_compaction_meanwhile_leaves_the_waiting_record_for_the_next_run(
        vault: Vault, tmp_path: Path, model: Any) -> None:
    relpath = long_session(vault, tmp_path, model)
    records = vault.store.read_lines(relpath)
    waiting = records[-3]  # bob's, the turn before it alice's
    assert (waiting.role, records[-4].role) == ("user", "user")
    vectors(vault).remove([waiting.memory_id])
    now = datetime(2026, 11, 1, tzinfo=UTC)  # the session months old: it is compacted

    def compact_it() -> None:  # the session rewritten after the batch was read
        done = compact.compact_user(Vault(resolve()), CompactionConfig(), now=now)
        assert done.archived > 0

    assert embed.embed_pending(vault, Calling(compact_it)).embedded == 0
    assert waiting.memory_id not in vectors(vault).has()  # left, not embedded as read
    embed.embed_pending(vault, model)  # the next run: as the files are now
    held = vectors(vault).has()
    now_held = {m: d for f in vault.layout.content_files(include_archive=True)
                if f.endswith(".jsonl") for m, d in as_now(vault, f).items()}
    assert waiting.memory_id in now_held and relpath not in \
        vault.layout.content_files(include_archive=True)  # archived whole, moved
    assert held[waiting.memory_id] == now_held[waiting.memory_id]
    assert embed.pending_count(vault) == 0


def test_a_torn_tail_is_passed_over_and_lends_nothing(
        vault: Vault, tmp_path: Path, model: Any) -> None:
    """An append interrupted mid-line (a crash): the last whole turn beside it waits, and
    is embedded as the whole file read gives it (the torn line is no turn)."""
    result = ingest_file(vault, chat(tmp_path / "short.jsonl", 14,
                                     datetime(2026, 5, 4, 8, tzinfo=UTC)))
    relpath = session_file(result.session_id)
    embed.embed_pending(vault, model)
    last = vault.store.read_lines(relpath)[-1]
    assert last.role == "user"  # bob's: it borrows from alice's before it, not the tail
    vectors(vault).remove([last.memory_id])
    with vault.layout.path(relpath).open("ab") as fh:
        fh.write(b'{"v":1,"kv":1,"id":"0193a0e2-0000-7000-8000-00000000000')  # torn
    assert embed.embed_pending(vault, model).embedded == 1
    assert vectors(vault).has() == as_now(vault, relpath)


@pytest.mark.parametrize("block", [1, 700, 4096, 1 << 20])
def test_the_lines_that_wait_come_with_their_neighbours_whatever_the_blocks(
        vault: Vault, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int) -> None:
    """The file is read a block of lines at a time: a waiting line at a block's start or
    end still comes with the line before and after it, whatever the block's size."""
    result = ingest_file(vault, chat(tmp_path / "c.jsonl", 40,
                                     datetime(2026, 5, 4, 8, tzinfo=UTC)))
    relpath = session_file(result.session_id)
    data = vault.layout.path(relpath).read_bytes()
    lines = data.splitlines(keepends=True)
    starts = [sum(len(x) for x in lines[:n]) for n in range(len(lines))]
    ids = [h.memory_id.encode() for h in vault.store.line_headers(relpath)]
    monkeypatch.setattr(userstore, "_BLOCK", block)
    for waiting in ({0}, {39}, {0, 1, 2}, {5, 17, 18, 38}, set(range(40))):
        held = {ids[n] for n in range(40) if n not in waiting}
        got = [(b.number if b else None, line.number, line.at, line.raw, line.memory_id,
                a.number if a else None)
               for b, line, a in vault.store.lines_without(relpath, held)]
        assert got == [(n if n else None, n + 1, starts[n], lines[n], ids[n].decode(),
                        n + 2 if n + 1 < 40 else None) for n in sorted(waiting)]
