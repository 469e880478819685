"""A large pull: stored a batch at a time in flat memory, in the order its pages were
written, and resumed after a kill without fetching again what it had learned."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memvault.ops import sync as sync_ops
from memvault.ops.ingest import ingest_text
from memvault.ops.remember import add
from memvault.storage.remote import FolderRemote
from memvault.vault.vault import Vault
from tests.test_sync import contents, machine


class Counting(FolderRemote):
    """A folder remote that counts the objects fetched."""

    def __init__(self, root: Path) -> None:
        super().__init__(str(root), root)
        self.fetched: list[str] = []

    def get(self, name: str) -> bytes:
        self.fetched.append(name)
        return super().get(name)


@pytest.fixture
def small(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pages, batches and the kept-sealed budget small enough that a few dozen records
    take many of each."""
    monkeypatch.setattr(sync_ops, "PAGE", 7)
    monkeypatch.setattr(sync_ops, "BATCH", 10)


def fill(v: Vault) -> None:
    for s in range(3):
        lines = [json.dumps({"id": f"m{i}", "role": "user" if i % 2 else "assistant",
                             "content": f"session {s} turn {i}",
                             "timestamp": f"2026-01-0{s + 1}T00:00:{i:02d}Z"})
                 for i in range(12)]
        ingest_text(v, "\n".join(lines), None, "jsonl", session=f"s{s}")
    for i in range(5):
        add(v, f"fact {i}", "fact")


def lines_in_order(v: Vault) -> dict[str, list[str]]:
    """Each session file's messages as they lie in it."""
    return {rel: [r.content for r in v.store.read_lines(rel)]
            for rel in v.layout.line_files()}


def test_a_pull_in_batches_gives_the_same_memory_in_the_same_order(
        tmp_path: Path, small: None) -> None:
    (tmp_path / "remote").mkdir()
    a, b = machine(tmp_path, "a"), machine(tmp_path, "b")
    fill(a)
    remote = Counting(tmp_path / "remote")
    assert sync_ops.sync(a, remote).pushed == 41
    result = sync_ops.sync(b, remote)
    assert result.pulled == 41
    assert contents(a) == contents(b)
    assert lines_in_order(a) == lines_in_order(b)  # turns in the order they were said
    assert sync_ops.sync(b, remote).pulled == 0


def test_a_pull_killed_after_a_batch_resumes_without_fetching_again(
        tmp_path: Path, small: None, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "remote").mkdir()
    a, b = machine(tmp_path, "a"), machine(tmp_path, "b")
    fill(a)
    remote = Counting(tmp_path / "remote")
    sync_ops.sync(a, remote)
    stored = sync_ops._add_records
    calls: list[int] = []

    def killed(vault: Vault, items: list[Any]) -> int:
        if calls:
            raise KeyboardInterrupt  # a kill between two batches
        calls.append(len(items))
        return stored(vault, items)

    monkeypatch.setattr(sync_ops, "_add_records", killed)
    remote.fetched.clear()
    with pytest.raises(KeyboardInterrupt):
        sync_ops.sync(b, remote)
    first = set(remote.fetched)
    held = len(sync_ops.scan_local(b))
    # Whole pages go into a batch until it holds BATCH records or more.
    assert 0 < held < 41 and held == calls[0] >= 10
    monkeypatch.setattr(sync_ops, "_add_records", stored)
    remote.fetched.clear()
    result = sync_ops.sync(b, remote)
    assert result.pulled == 41 - held
    assert contents(a) == contents(b)
    # The objects learned before the kill are not fetched to learn them again: only those
    # that hold what is still missing (an object is at most fetched once more to store).
    again = [n for n in remote.fetched if "/o/" in n]
    assert len(again) == len(set(again)) and set(again) <= first
    assert len(again) < len([n for n in first if "/o/" in n])


def test_a_pull_past_the_kept_budget_fetches_what_it_dropped(
        tmp_path: Path, small: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sync_ops.Fetched, "BUDGET", 1)  # keeps no sealed page
    (tmp_path / "remote").mkdir()
    a, b = machine(tmp_path, "a"), machine(tmp_path, "b")
    fill(a)
    remote = Counting(tmp_path / "remote")
    sync_ops.sync(a, remote)
    remote.fetched.clear()
    assert sync_ops.sync(b, remote).pulled == 41
    assert contents(a) == contents(b)
    adds = [n for n in remote.fetched if "/o/" in n]
    assert len(adds) == 2 * len(set(adds))  # each page: once to learn it, once to store
