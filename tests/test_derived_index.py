"""The derived-index protocol (index/base.py), as contract tests every index inherits.

A new index (a vector index beside the keyed-term one) gets a subclass that says how to
make one; it is then correct by the same tests the keyed-term index passes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memvault.index.base import DerivedIndex, Entry, neighbours
from memvault.index.keyed import SearchIndex
from memvault.model.location import Location, session_file
from memvault.model.records import Record, now_iso, uuid7


def record(text: str, kind: str = "message", session: str = "s1") -> Record:
    stamp = now_iso()
    return Record(memory_id=uuid7(), org_id="o", user_id="u", type=kind, content=text,
                  content_hash="sha256:x", category="conversation", session_id=session,
                  role="user", created_at=stamp, updated_at=stamp)


def session_entries(texts: list[str], session: str = "s1") -> list[Entry]:
    records = [record(t, session=session) for t in texts]
    return [Entry(r, Location.line(session_file(session), 100 * i), neighbours(records, i))
            for i, r in enumerate(records)]


class DerivedIndexContract:
    """What every derived index promises. Subclasses provide `make`."""

    def make(self, path: Path) -> DerivedIndex:
        raise NotImplementedError

    @pytest.fixture
    def index(self, tmp_path: Path) -> DerivedIndex:
        return self.make(tmp_path / "index")

    def test_it_is_not_current_until_built(self, index: DerivedIndex) -> None:
        assert not index.is_current()
        assert index.rebuild(session_entries(["one", "two"])) == 2
        assert index.is_current()

    def test_a_stale_mark_holds_until_it_is_marked_current(self, index: DerivedIndex) -> None:
        index.rebuild(session_entries(["one"]))
        index.mark_stale()
        assert not index.is_current()
        index.mark_current()
        assert index.is_current()

    def test_locate_returns_where_each_record_lives(self, index: DerivedIndex) -> None:
        entries = session_entries(["alpha", "beta", "gamma"])
        index.rebuild(entries)
        ids = [e.record.memory_id for e in entries]
        assert index.locate([*ids, "no-such-id"]) == {e.record.memory_id: e.location
                                                       for e in entries}

    def test_apply_adds_moves_and_deletes(self, index: DerivedIndex) -> None:
        first, second = session_entries(["alpha", "beta"])
        index.rebuild([first])
        moved = Entry(first.record, Location.line(session_file("s1", archived=True), 7))
        index.apply([second, moved], [])
        assert index.locate([first.record.memory_id, second.record.memory_id]) == {
            first.record.memory_id: moved.location,
            second.record.memory_id: second.location}
        index.apply([], [second.record.memory_id])
        assert index.locate([second.record.memory_id]) == {}

    def test_rebuild_keeps_only_what_it_is_given(self, index: DerivedIndex) -> None:
        entries = session_entries(["alpha", "beta", "gamma"])
        index.rebuild(entries)
        index.rebuild(entries[1:])
        assert set(index.locate([e.record.memory_id for e in entries])) == {
            e.record.memory_id for e in entries[1:]}


class TestKeyedTermIndex(DerivedIndexContract):
    def make(self, path: Path) -> DerivedIndex:
        return SearchIndex(path, os.urandom(32))

    def test_a_rebuild_leaves_no_term_of_what_it_dropped(self, tmp_path: Path) -> None:
        """Deleted Tantivy documents keep their terms until a merge: a rebuild must not."""
        index = SearchIndex(tmp_path / "index", os.urandom(32))
        keep, drop = session_entries(["ordinary words", "zanzibar quokka"])
        index.rebuild([keep, drop])
        term = index.analyzer.hash(index.analyzer.tokens("quokka")[0])
        assert index.searcher().doc_freq("body", term) == 1
        index.apply([], [drop.record.memory_id])
        # The file without the dropped turn: its neighbour no longer has it as context.
        index.rebuild([Entry(keep.record, keep.location, ())])
        assert index.searcher().doc_freq("body", term) == 0
        assert index.searcher().doc_freq("ctx", term) == 0
