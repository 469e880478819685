"""A batch of a long session is checked where it was read (issue 34: a background `mem
embed` after a gigabyte's first ingest re-read every clear header of the session for each
batch of 256, so its time grew with the square of the session): the check under the lock
reads the batch's own lines and those beside them, never the rest of the file; the records
an ingest of what a session grew by wrote are embedded reading the lines around them; and
a file rewritten meanwhile (a forget) still never gets a vector of what was forgotten, nor
a turn one said beside it meanwhile a vector without it."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from memvault.config import resolve
from memvault.embed.builtin import load
from memvault.index.base import beside
from memvault.index.vectors import DIGEST_LEN, embed_text, vector_digest
from memvault.model.location import session_file
from memvault.ops import embed, forget
from memvault.ops.ingest import ingest_file
from memvault.storage import userstore
from memvault.vault.vault import Vault


def people(tmp_path: Path, count: int, words: int) -> Path:
    """A chat of two people (each turn borrows from the ones beside it), long turns."""
    path = tmp_path / "chat.jsonl"
    path.write_text("".join(json.dumps({
        "role": "user", "name": ["alice", "bob"][n % 2],
        "content": f"turn {n}: " + " ".join(f"kiln{n}x{w}" for w in range(words)),
        "timestamp": f"2026-05-04T{8 + n // 60:02d}:{n % 60:02d}:00Z"}) + "\n"
        for n in range(count)))
    return path


def held(vault: Vault) -> dict[str, bytes]:
    return vault.vector_store(vault.state().key_version).has()


def as_stored(digest: bytes) -> bytes:
    return digest[:DIGEST_LEN].ljust(DIGEST_LEN, b"\0")


def as_now(vault: Vault, relpath: str) -> dict[str, bytes]:
    """Each record's vector digest as the file now gives it (its text, its neighbours)."""
    records = vault.store.read_lines(relpath)
    return {r.memory_id: as_stored(vector_digest(embed_text(r), beside(records, i)))
            for i, r in enumerate(records)}


class Counting:
    """The built-in model, with a hook called after each batch is embedded."""

    def __init__(self, after: Any) -> None:
        self.inner = load()
        self.model = self.inner.model
        self.calls = 0
        self.after = after

    def embed(self, texts: Sequence[str]) -> Any:
        self.calls += 1
        out = self.inner.embed(texts)
        self.after(self.calls)
        return out


class _Counted(io.FileIO):
    """A file whose bytes read are added up in `read_bytes[-1]`."""

    read_bytes: list[int]

    def readinto(self, buffer: Any) -> int | None:
        n = super().readinto(buffer)
        self.read_bytes[-1] += n or 0
        return n

    def readall(self) -> bytes:
        data = super().readall()
        self.read_bytes[-1] += len(data)
        return data


class Watch:
    """The bytes of one file read while the user's lock is held, a lock at a time (the
    check of each batch added: `under`), and outside it (`outside`)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
        self.under: list[int] = []
        self.outside = [0]
        self.locked = False
        real_open, real_lock = userstore._open, Vault.lock

        def watched_open(at: Path, name: str) -> Any:
            fh = real_open(at, name)  # its checks, as the store's
            if Path(at) != path:
                return fh
            fh.close()
            raw = _Counted(at)
            raw.read_bytes = self.under if self.locked else self.outside
            return io.BufferedReader(raw)

        @contextmanager
        def watched_lock(vault: Vault) -> Iterator[None]:
            with real_lock(vault):
                self.locked = True
                self.under.append(0)
                try:
                    yield
                finally:
                    self.locked = False

        monkeypatch.setattr(userstore, "_open", watched_open)
        monkeypatch.setattr(Vault, "lock", watched_lock)


def test_a_batch_reads_its_own_lines_not_the_session(
        vault: Vault, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = ingest_file(vault, people(tmp_path, 300, 300))
    relpath = session_file(result.session_id)
    size = vault.layout.path(relpath).stat().st_size
    assert size > 1 << 20  # a session of a megabyte and more
    watch = Watch(monkeypatch, vault.layout.path(relpath))
    assert embed.embed_pending(vault, load(), batch=8).embedded == 300
    monkeypatch.undo()
    assert len(watch.under) >= 300 // 8
    # Each batch's check read about its ten lines (its eight and the two beside them,
    # some 5 KB each), not the session's megabyte: the time of a session's embedding
    # grows with its size, not with its square.
    assert max(watch.under) < 128 << 10, (max(watch.under), size)
    assert watch.outside[0] < 2 * size  # the session itself read once
    # And what was added is what the whole file read at once gives.
    assert held(vault) == as_now(vault, relpath)


def test_turns_appended_to_a_long_session_are_embedded_reading_around_them(
        vault: Vault, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After an ingest of what a long session grew by (a hook's), the records it wrote
    and the person's turn before them are embedded from the lines around them alone."""
    chat = people(tmp_path, 303, 300)
    lines = chat.read_text().splitlines(keepends=True)
    chat.write_text("".join(lines[:300]))
    result = ingest_file(vault, chat)
    relpath = session_file(result.session_id)
    embed.embed_pending(vault, load())
    chat.write_text("".join(lines))
    v = Vault(resolve())
    ingest_file(v, chat)
    new = [m for m in as_now(v, relpath) if m not in held(v)]
    assert len(new) == 4  # the three said, and the turn before them (it borrows from one)
    size = v.layout.path(relpath).stat().st_size
    watch = Watch(monkeypatch, v.layout.path(relpath))
    assert embed.embed_new(v, load(), v.written) == 4
    monkeypatch.undo()
    # The lines around the four (some 5 KB each), each read a page or two at a time, not
    # the session's megabyte and a half (its every clear header, each batch).
    read = watch.outside[0] + sum(watch.under)
    assert read < 256 << 10, (read, size)
    assert held(v) == as_now(v, relpath)


@pytest.mark.parametrize("gone", [0, 5, 11])  # the first turn, one of the batch, its last
def test_a_forget_between_reading_and_adding_leaves_no_vector_of_what_it_forgot(
        vault: Vault, tmp_path: Path, gone: int) -> None:
    result = ingest_file(vault, people(tmp_path, 12, 8))
    relpath = session_file(result.session_id)
    before = vault.store.read_lines(relpath)
    forgotten = before[gone]
    # Every digest a vector borrowing the forgotten turn's text would carry: its own,
    # and its neighbours' as they were read.
    tainted = {as_stored(vector_digest(embed_text(r), beside(before, i)))
               for i, r in enumerate(before) if abs(i - gone) <= 1}

    def forget_it(call: int) -> None:  # the session is rewritten after the read
        if call == 1:
            other = Vault(resolve())
            forget.forget(other, forget.select(other, [forgotten.memory_id]))

    embed.embed_pending(vault, Counting(forget_it), batch=64)
    now = as_now(vault, relpath)
    assert forgotten.memory_id not in now
    vectors = held(vault)
    assert not tainted & set(vectors.values())
    assert all(now[m] == d for m, d in vectors.items())  # from the file as it is now
    embed.embed_pending(vault, load())  # the next run: the rest, as the file is now
    assert held(vault) == now


def test_a_turn_said_between_reading_and_adding_is_borrowed_from(
        vault: Vault, tmp_path: Path) -> None:
    chat = people(tmp_path, 14, 8)
    lines = chat.read_text().splitlines(keepends=True)
    chat.write_text("".join(lines[:12]))
    result = ingest_file(vault, chat)
    relpath = session_file(result.session_id)

    def say_more(call: int) -> None:  # two turns appended after the batch was read
        if call == 1:
            chat.write_text("".join(lines))
            assert ingest_file(Vault(resolve()), chat).session_id == result.session_id

    embed.embed_pending(vault, Counting(say_more), batch=64)
    now = as_now(vault, relpath)
    assert len(now) == 14
    vectors = held(vault)
    # The last turn as read had no turn after it: its vector is not added without the
    # one said since (it is made again by the next run); the others are kept.
    assert len(vectors) == 11
    assert all(now[m] == d for m, d in vectors.items())
    embed.embed_pending(vault, load())
    assert held(vault) == now
