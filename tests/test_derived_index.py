"""The derived-index protocol (index/base.py), as contract tests every index inherits.

A new index (a vector index beside the keyed-term one) gets a subclass that says how to
make one; it is then correct by the same tests the keyed-term index passes."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
import tantivy

from memvault.index.base import DerivedIndex, Entry, neighbours
from memvault.index.keyed import SearchIndex
from memvault.model.location import Location, session_file
from memvault.model.records import Record, now_iso, uuid7


def record(text: str, kind: str = "message", session: str = "s1") -> Record:
    stamp = now_iso()
    return Record(memory_id=uuid7(), org_id="o", user_id="u", type=kind, content=text,
                  content_hash="sha256:x", category="conversation", session_id=session,
                  role="user", created_at=stamp, updated_at=stamp)


def session_entries(texts: list[str], session: str = "s1",
                    archived: bool = False) -> list[Entry]:
    records = [record(t, session=session) for t in texts]
    return [Entry(r, Location.line(session_file(session, archived), 100 * i),
                  neighbours(records, i)) for i, r in enumerate(records)]


def _superseded(r: Record) -> Record:
    return dataclasses.replace(r, superseded_by="someone")


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

    def test_a_record_the_write_created_is_added_once(self, index: DerivedIndex) -> None:
        """`created` names records new to the index: added without looking for an old
        document, and found once, beside the ones replaced as usual."""
        first, second = session_entries(["alpha", "beta"])
        index.rebuild([first])
        moved = Entry(first.record, Location.line(session_file("s1", archived=True), 7))
        index.apply([moved, second], [], created={second.record.memory_id})
        assert index.locate([first.record.memory_id, second.record.memory_id]) == {
            first.record.memory_id: moved.location,
            second.record.memory_id: second.location}
        if isinstance(index, SearchIndex):
            assert index.searcher().num_docs == 2  # the moved one replaced, not doubled

    def test_a_rewrite_gives_what_a_rebuild_gives(self, index: DerivedIndex) -> None:
        """After a file changes, deriving only that file again (the rest carried over)
        must leave the index a full rebuild would."""
        one = session_entries(["alpha beta", "gamma delta", "epsilon zeta", "eta theta"])
        two = session_entries(["iota kappa", "lambda mu", "nu xi"], session="s2")
        # s1 also has archived turns, and a summary of it (in CLAUDE.md, same session):
        # neither is a turn of s1's live file, nor a neighbour of one.
        old = session_entries(["omicron pi", "rho sigma"], archived=True)
        summary = Entry(record("tau upsilon", kind="summary"), Location.doc("CLAUDE.md"))
        one += [*old, summary]
        index.rebuild([*one, *two])
        # s2 loses its middle turn: its file is rewritten; s1 is untouched.
        kept = [two[0].record, two[2].record]
        rewritten = [Entry(r, Location.line(session_file("s2"), 50 * i), neighbours(kept, i))
                     for i, r in enumerate(kept)]
        superseded = {one[1].record.memory_id}
        count = index.rewrite(rewritten, {session_file("s2")},
                              [session_file("s1"), session_file("s1", archived=True)],
                              lambda memory_id: memory_id in superseded)
        assert count == len(one) + len(kept) and index.is_current()
        ids = [e.record.memory_id for e in [*one, *two]]
        expected = {e.record.memory_id: e.location for e in [*one, *rewritten]}
        assert index.locate(ids) == expected
        self.assert_same_as_rebuild(index, [*one, *rewritten], superseded)

    def assert_same_as_rebuild(self, index: DerivedIndex, entries: list[Entry],
                               superseded: set[str]) -> None:
        """Each implementation compares what it holds with a fresh rebuild."""

    def test_rebuild_keeps_only_what_it_is_given(self, index: DerivedIndex) -> None:
        entries = session_entries(["alpha", "beta", "gamma"])
        index.rebuild(entries)
        index.rebuild(entries[1:])
        assert set(index.locate([e.record.memory_id for e in entries])) == {
            e.record.memory_id for e in entries[1:]}


class TestKeyedTermIndex(DerivedIndexContract):
    key = os.urandom(32)

    def make(self, path: Path) -> DerivedIndex:
        return SearchIndex(path, self.key)

    def assert_same_as_rebuild(self, index: DerivedIndex, entries: list[Entry],
                               superseded: set[str]) -> None:
        assert isinstance(index, SearchIndex)
        fresh = SearchIndex(index.path.with_name("fresh"), self.key)
        fresh.rebuild([Entry(e.record, e.location, e.context) for e in entries
                       if e.record.memory_id not in superseded] +
                      [Entry(_superseded(e.record), e.location, e.context) for e in entries
                       if e.record.memory_id in superseded])
        words = {w for e in entries for w in e.record.content.split()} | {"user", "quokka"}
        mine, theirs = index.searcher(), fresh.searcher()
        assert mine.num_docs == theirs.num_docs
        for word in sorted(words):
            term = index.analyzer.hash(index.analyzer.tokens(word)[0])
            for field in ("body", "ctx"):
                assert mine.doc_freq(field, term) == theirs.doc_freq(field, term), (word, field)
        flagged = tantivy.Query.term_query(index.open().schema, "superseded", 1)
        assert [mine.doc(a).get_first("id") for _, a in mine.search(flagged, 10).hits] == \
            sorted(superseded)

    def test_an_open_index_sees_what_another_writer_committed(self, tmp_path: Path) -> None:
        """A long-lived reader (the MCP server) finds what a hook stored after it opened."""
        reader = SearchIndex(tmp_path / "index", self.key)
        reader.rebuild(session_entries(["first words"]))
        assert reader.searcher().num_docs == 1
        writer = SearchIndex(tmp_path / "index", self.key)
        writer.apply(session_entries(["second words"], session="s2"), [])
        assert reader.searcher().num_docs == 2

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


def test_neighbours_are_the_turns_on_each_side() -> None:
    records = [record(str(n)) for n in range(6)]
    assert neighbours(records, 0) == ("1", "2")
    assert neighbours(records, 3) == ("1", "2", "4", "5")
    assert neighbours(records, 5) == ("3", "4")
    assert neighbours(records, -1) == ("3", "4")  # from the end, as a list index
    assert neighbours(records[:1], 0) == ()


def test_hashing_word_by_word_gives_the_tokens_of_the_whole_text() -> None:
    """Analyzer.digests hashes a message a word at a time (memoised); the index must
    hold exactly the terms one analysis of the whole text gives, whatever the script,
    separators, long tokens or case folding."""
    import random

    from memvault.index.keyed import Analyzer

    analyzer = Analyzer(os.urandom(32))
    alphabet = (" \t\n\x1c\x85\xa0\u2028\u3000\u200b\u00adabcXYZ019éÉßİıﬁ_-.,'’"
                "\u0301\u093f\u0915\U0001F600日本語ÅΩ")
    words = ["running", "runs", "The", "cats", "Über", "x" * 45, "a" * 41, "naïve"]
    rng = random.Random(7)
    for n in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))
        if n % 3 == 0:
            text = " ".join(rng.choice(words) for _ in range(10)) + text
        if n % 500 == 0:
            text *= 200  # longer than what is hashed word by word
        whole = b"".join(analyzer.digest(t) for t in analyzer.tokens(text))
        assert analyzer.digests(text) == whole, repr(text[:80])


def test_the_memo_of_hashed_texts_is_bounded_by_bytes_not_only_by_count() -> None:
    """A long session's tool outputs are long and each distinct: the memo of whole texts
    (their digests and hex, kept for the neighbours that hash them again as context)
    stays within its bytes whatever their length, where 4,096 such texts once made
    gigabytes; an ordinary turn is still hashed once for its neighbours."""
    import random
    import tracemalloc

    from memvault.index.keyed import _TEXTS_BYTES, Analyzer

    analyzer = Analyzer(os.urandom(32))
    rng = random.Random(3)
    vocabulary = [f"w{rng.getrandbits(32):x}" for _ in range(5000)]
    turn = "what did we decide about the cache"
    assert analyzer.hashed(turn) is analyzer.hashed(turn)  # memoised
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(60):  # tool outputs of 200 KB, each distinct
            analyzer.hashed(" ".join(rng.choices(vocabulary, k=25_000)))
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # The two memos (digests, hex) at their bound, and the words' own memos.
    assert held < 2 * _TEXTS_BYTES + (4 << 20), held
    assert analyzer.hashed(turn) is analyzer.hashed(turn)


def test_the_memo_of_token_digests_is_bounded_whatever_the_distinct_tokens() -> None:
    """A long transcript's ids, hashes and paths are distinct tokens by the hundred
    thousand: the memo of each token's digest stays within its bound (it once kept
    500,000, some 76 MB, for the rest of the run), and a token digests the same after
    the memo starts again."""
    import tracemalloc

    from memvault.index.keyed import _TOKENS_KEPT, Analyzer

    analyzer = Analyzer(os.urandom(32))
    first = analyzer.digests("deploy ab12cd34ef")
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(0, 400_000, 1_000):  # a tool output's worth of fresh ids at a time
            analyzer.digests(" ".join(f"x{n + i:07x}q" for i in range(1_000)))
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < _TOKENS_KEPT * 200 + (16 << 20), held
    assert analyzer.digests("deploy ab12cd34ef") == first
