"""Search (SPEC §5, §6): an index without plaintext, queries, filters, and an index that
repairs itself. Every check here is built so that it can fail: the plaintext checks are
run against a plaintext control index too, and must find the canaries there."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import stat
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import tantivy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pytest_console_scripts import ScriptRunner

from memvault.config import resolve
from memvault.errors import Busy, DataError, UsageError
from memvault.index.base import Entry
from memvault.index.keyed import SearchIndex
from memvault.model.location import Location, session_file
from memvault.model.records import (
    CATEGORIES,
    TYPES,
    Filters,
    NewMessage,
    Record,
    now_iso,
    parse_time,
    uuid7,
)
from memvault.ops import admin, ingest, recall, remember
from memvault.ops.admin import init
from memvault.storage import fsio
from memvault.vault.vault import Vault
from tests.conftest import examples, mem, open_as

# SPEC §6's fields, a summary's originals (compacted_from: [] for anything else), and
# the agent a transcript's record came from (None for a typed memory)
RESULT_FIELDS = {"memory_id", "category", "type", "content", "snippet", "score", "tags",
                 "created_at", "session_id", "message_id", "compacted_from", "lexical_rank",
                 "semantic_rank", "lexical_score", "semantic_score", "weak", "agent"}
DOC_FIELDS = {"results", "total_searched", "query_time_ms", "mode", "notice"}
TEXT_FIELDS = ("id", "body", "ctx", "type", "category", "tag", "session", "loc", "agent")
HASHED_FIELDS = ("body", "ctx", "tag", "session")
STORED_FIELDS = {"id", "type", "category", "created", "loc", "tag", "session", "agent", "text",
                 "role", "archived", "pos"}
HEX128 = re.compile(r"[0-9a-f]{32}")
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
LOC = re.compile(r"CLAUDE\.md|preferences\.json|(sessions|archive)/[^/@]+\.jsonl@\d+")


# --- helpers ------------------------------------------------------------------------------


def ids(doc: dict[str, Any]) -> list[str]:
    return [r["memory_id"] for r in doc["results"]]


def contents(doc: dict[str, Any]) -> list[str]:
    return [r["content"] for r in doc["results"]]


def search(vault: Vault, text: str, filters: Filters) -> dict[str, Any]:
    """The search document (SPEC §6) that `mem search --json` prints."""
    return recall.search(vault, text, filters).to_dict()


def add(vault: Vault, text: str, kind: str, **kw: Any) -> Any:
    return remember.add(vault, text, kind, **kw)


def add_messages(vault: Vault, session: str, messages: list[NewMessage]) -> list[str]:
    """Append messages to a session; the ids of the records it added, in order (read
    from the session file itself, not through the index)."""
    before = set(session_ids(vault, session))
    added = ingest.add_messages(vault, session, messages).added
    new = [i for i in session_ids(vault, session) if i not in before]
    assert len(new) == added
    return new


def session_ids(vault: Vault, session: str) -> list[str]:
    if not vault.exists():
        return []
    return [r.memory_id for r in vault.store.read_lines(session_file(session))]


def entries(vault: Vault, include_archive: bool = True) -> list[Entry]:
    """Every record with its location and context, read from the vault's files."""
    return list(vault.entries(vault.state(), include_archive))


def all_ids(vault: Vault) -> set[str]:
    return {x.record.memory_id for x in entries(vault)}


def reference_list(vault: Vault, filters: Filters) -> list[Record]:
    """Every record decrypted and filtered in Python, newest first: the reference the
    index must agree with (independent of the index, unlike `mem list`)."""
    records = [x.record for x in entries(vault, filters.include_archive)
               if filters.matches(x.record)]
    records.sort(key=lambda r: (r.created_at, r.memory_id), reverse=True)
    return records[: filters.limit]


def list_records(vault: Vault, filters: Filters) -> list[Record]:
    """What `mem list` returns."""
    return list(recall.list_records(vault, filters).records)


def search_index(vault: Vault) -> SearchIndex:
    return vault.search_index(vault.state().key_version)


def fresh_vault() -> Vault:
    """A new Vault object: nothing cached from earlier calls (like a new `mem` process)."""
    return Vault(resolve())


def index_dir(vault: Vault) -> Path:
    return vault.layout.index_dir


def replace_bytes(path: Path, data: bytes) -> None:
    """Overwrite a file through a new inode: Tantivy may still map the old one, and
    truncating a mapped file in place would kill this process with SIGBUS."""
    tmp = path.with_name(path.name + ".corrupting")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def stamp_is_fresh(vault: Vault) -> bool:
    """Writers drop the stamp before changing content and restore it after the index
    commit: a stamp means the index was in step when it was written."""
    return (index_dir(vault) / "stamp").is_file()


def indexed_ids(vault: Vault) -> set[str]:
    """Every record id in the index, read with Tantivy directly (not through mem)."""
    searcher = tantivy.Index.open(str(index_dir(vault))).searcher()
    n = max(int(searcher.num_docs), 1)
    hits = searcher.search(tantivy.Query.all_query(), n).hits
    return {searcher.doc(addr).to_dict()["id"][0] for _, addr in hits}


def wrong_modes(directory: Path) -> list[str]:
    out = []
    for path in [directory, *directory.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode != (0o700 if path.is_dir() else 0o600):
            out.append(f"{path.name} {mode:04o}")
    return out


class Umask:
    def __init__(self, mask: int) -> None:
        self.mask = mask

    def __enter__(self) -> None:
        self.old = os.umask(self.mask)

    def __exit__(self, *exc: object) -> None:
        os.umask(self.old)


# --- 1. no plaintext in the index -----------------------------------------------------------


CANARY_WORDS = ["xylophonecanary", "quixoticzebra", "gloriouswombat", "flibbertigibbet",
                "snorkelmango", "zanzibarquokka"]
TAG_CANARIES = ["tagcanaryfrobnitz", "tagcanaryplumbus"]
SESSION_CANARY = "sessioncanarymarmot"
MESSAGE_ID_CANARY = "msgidcanarytardigrade"


def canary_vault(vault: Vault) -> list[str]:
    """Facts, preferences and messages (both write paths) holding canary words; returns
    every content written."""
    texts = [
        ("My xylophonecanary collection is in the attic", "fact"),
        ("Prefers quixoticzebra running shoes", "preference"),
        ("Never mention flibbertigibbet in commit messages", "instruction"),
    ]
    for text, kind in texts:
        add(vault, text, kind, tags=TAG_CANARIES)
    messages = [
        NewMessage("The gloriouswombat escaped again", "user", MESSAGE_ID_CANARY,
                   "2024-05-01T10:00:00Z", tags=[TAG_CANARIES[0]]),
        NewMessage("Try the snorkelmango recipe instead", "assistant", "m2",
                   "2024-05-01T10:01:00Z"),
    ]
    add_messages(vault, SESSION_CANARY, messages)
    add(vault, "zanzibarquokka is the wifi name", "message", session=SESSION_CANARY,
              tags=[TAG_CANARIES[1]])
    return [t for t, _ in texts] + [m.content for m in messages] + \
        ["zanzibarquokka is the wifi name"]


def enumerate_index(path: Path) -> tuple[dict[str, list[str]], list[dict[str, list[Any]]]]:
    """Every term of every text field (the term dictionary, deleted documents' terms
    included) and every stored value of every live document, from Tantivy itself."""
    index = tantivy.Index.open(str(path))
    searcher = index.searcher()
    terms: dict[str, list[str]] = {}
    for field in TEXT_FIELDS:
        try:
            terms[field] = [t for t, _ in searcher.terms_with_prefix(field, "")]
        except ValueError:  # a field the (control) schema does not have
            continue
    n = max(int(searcher.num_docs), 1)
    docs = [searcher.doc(addr).to_dict()
            for _, addr in searcher.search(tantivy.Query.all_query(), n).hits]
    return terms, docs


def plaintext_findings(path: Path, needles: list[str],
                       allowed: Callable[[str, str], bool] = lambda field, value: False,
                       ) -> list[str]:
    """Where any needle (case-insensitive) occurs in the index's terms or stored values."""
    terms, docs = enumerate_index(path)
    lowered = [n.lower() for n in needles]
    found = []
    for field, values in terms.items():
        for value in values:
            for needle in lowered:
                if needle in str(value).lower() and not allowed(field, str(value)):
                    found.append(f"term {field}:{value!r} holds {needle!r}")
    for doc in docs:
        for field, values in doc.items():
            for value in values:
                for needle in lowered:
                    if needle in str(value).lower() and not allowed(field, str(value)):
                        found.append(f"stored {field}={value!r} holds {needle!r}")
    return found


def canary_needles(vault: Vault) -> list[str]:
    analyzer = search_index(vault).analyzer
    needles = [*TAG_CANARIES, MESSAGE_ID_CANARY]
    for word in CANARY_WORDS:
        needles.append(word)
        needles += analyzer.tokens(word)  # the stem, e.g. xylophonecanari
    return needles


def session_only_in_loc(field: str, value: str) -> bool:
    # Documented leakage (docs/security.md): a session line's location names its session
    # file, exactly as the file name on disk does. Nowhere else may the session id appear.
    return field == "loc" and bool(LOC.fullmatch(value)) and value.startswith("sessions/")


def test_index_holds_no_plaintext_terms_or_values(vault: Vault) -> None:
    canary_vault(vault)
    path = index_dir(vault)
    assert stamp_is_fresh(vault)
    needles = canary_needles(vault)
    assert plaintext_findings(path, needles) == []
    # Not even the session id: a record's location (it names the session file) is sealed.
    assert plaintext_findings(path, [SESSION_CANARY]) == []

    # The shape of everything in the index: opaque tokens, ids and non-sensitive metadata.
    terms, docs = enumerate_index(path)
    assert len(docs) == 6
    for field in HASHED_FIELDS:
        assert terms[field], field
        assert [t for t in terms[field] if not HEX128.fullmatch(t)] == [], field
    assert all(UUID.fullmatch(t) for t in terms["id"])
    assert set(terms["type"]) <= set(TYPES) and set(terms["category"]) <= set(CATEGORIES)
    index = search_index(vault)
    for doc in docs:
        assert set(doc) <= STORED_FIELDS
        # Stored for rewrites: keyed digests only, 16 bytes a token, and the hashed tags
        # and session the index already holds as terms.
        assert all(len(b) % 16 == 0 for f in ("text", "role") for b in doc.get(f, []))
        assert all(HEX128.fullmatch(t) for f in ("tag", "session") for v in doc.get(f, [])
                   for t in v.split())
        memory_id, sealed = doc["id"][0], doc["loc"][0]
        # A nonce, the sealed location and its tag: no term, nothing else in clear.
        assert UUID.fullmatch(memory_id) and isinstance(sealed, bytes) and len(sealed) > 12 + 16
        assert "loc" not in terms
        location = index.open_loc(memory_id, sealed)  # opens with the key
        assert isinstance(location, Location) and LOC.fullmatch(str(location))
        # In clear only what the vault's files show anyway: where a line starts.
        assert doc["pos"] == [location.offset or 0]
        assert doc["archived"] == [int(location.archived)]
        assert index.locate([memory_id]) == {memory_id: location}
        assert index.open_loc(str(uuid.uuid4()), sealed) is None  # bound to its record


def test_index_has_no_document_for_any_plaintext_stem(vault: Vault) -> None:
    texts = canary_vault(vault)
    analyzer = search_index(vault).analyzer
    searcher = tantivy.Index.open(str(index_dir(vault))).searcher()
    stems = {s for text in texts for s in analyzer.tokens(text)}
    roles_and_dates = [s for w in ("user", "assistant", "may", "wednesday")
                       for s in analyzer.tokens(w)]  # assistant -> assist
    stems |= {*roles_and_dates, "2024"}
    assert len(stems) > 25
    for stem in sorted(stems):
        for field in ("body", "ctx"):
            assert searcher.doc_freq(field, stem) == 0, (field, stem)
    # The lookups do work: the keyed hashes of the same stems are there.
    for word in CANARY_WORDS:
        (stem,) = analyzer.tokens(word)
        assert searcher.doc_freq("body", analyzer.hash(stem)) >= 1, word
    for stem in roles_and_dates:
        assert searcher.doc_freq("body", analyzer.hash(stem)) >= 1, stem
    assert searcher.doc_freq("ctx", analyzer.hash("gloriouswombat")) >= 1  # a neighbour
    for tag in TAG_CANARIES:
        assert searcher.doc_freq("tag", tag) == 0
        assert searcher.doc_freq("tag", analyzer.opaque("tag", tag)) >= 3
    assert searcher.doc_freq("session", SESSION_CANARY) == 0
    assert searcher.doc_freq("session", analyzer.opaque("session", SESSION_CANARY)) == 3


def build_plaintext_control(path: Path, vault: Vault) -> None:
    """The index a naive implementation would build: plain English-stemmed text, raw tags
    and session ids, stored content."""
    sb = tantivy.SchemaBuilder()
    sb.add_text_field("id", stored=True, tokenizer_name="raw")
    sb.add_text_field("body", stored=True, tokenizer_name="en_stem", index_option="position")
    sb.add_text_field("tag", tokenizer_name="raw")
    sb.add_text_field("session", tokenizer_name="raw")
    path.mkdir()
    index = tantivy.Index(sb.build(), path=str(path))
    writer = index.writer(heap_size=15_000_000, num_threads=1)
    for x in entries(vault):
        doc = tantivy.Document(id=x.record.memory_id, body=x.record.content)
        for tag in x.record.tags:
            doc.add_text("tag", tag)
        if x.record.session_id:
            doc.add_text("session", x.record.session_id)
        writer.add_document(doc)
    writer.commit()
    writer.wait_merging_threads()


def test_the_plaintext_checks_catch_a_plaintext_index(vault: Vault, tmp_path: Path) -> None:
    """Control: the same enumeration and lookups, on a plaintext index, find every canary."""
    canary_vault(vault)
    control = tmp_path / "control-index"
    build_plaintext_control(control, vault)
    analyzer = search_index(vault).analyzer
    findings = plaintext_findings(control, canary_needles(vault))
    for word in CANARY_WORDS + TAG_CANARIES:
        assert any(repr(word) in f or word in f for f in findings), word
    assert any(f.startswith("term body:'xylophonecanari'") for f in findings)  # the stem
    assert any(f.startswith("stored body=") for f in findings)
    assert plaintext_findings(control, [SESSION_CANARY], session_only_in_loc) != []
    searcher = tantivy.Index.open(str(control)).searcher()
    for word in CANARY_WORDS:
        (stem,) = analyzer.tokens(word)
        assert searcher.doc_freq("body", stem) >= 1, word
    terms, _ = enumerate_index(control)
    assert [t for t in terms["body"] if not HEX128.fullmatch(t)] != []


def test_index_files_hold_no_canary_bytes(vault: Vault) -> None:
    """The weak check (SPEC §5: grepping proves little), kept as a tripwire."""
    canary_vault(vault)
    needles: list[bytes] = []
    for word in canary_needles(vault) + [SESSION_CANARY]:
        for variant in (word, word.upper(), word.capitalize()):
            needles += [variant.encode(), variant.encode("utf-16-le")]
    files = [p for p in index_dir(vault).rglob("*") if p.is_file()]
    assert len(files) >= 6
    for path in files:
        data = path.read_bytes()
        assert [n for n in needles if n in data] == [], path.name
    leftovers = [p.name for p in index_dir(vault).parent.iterdir()
                 if p.name.startswith("index.")]
    assert leftovers == []


# --- shared corpus for queries, filters and properties ---------------------------------------


class Corpus:
    def __init__(self, vault: Vault) -> None:
        self.vault = vault
        self.ids: dict[str, str] = {}

    def add(self, name: str, text: str, kind: str = "fact", **kw: Any) -> str:
        result = add(self.vault, text, kind, **kw)
        assert not result.deduplicated
        self.ids[name] = result.record.memory_id
        return result.record.memory_id


def archive_records(vault: Vault, session: str, texts: list[tuple[str, str, list[str]]]) -> None:
    """Records in archive/ (compaction's output), written through the store and indexed
    by a rebuild (compaction itself does not exist yet)."""
    with vault.transaction() as tx:
        epoch = tx.epoch
        records = [Record(memory_id=uuid7(), org_id="default", user_id="alice", type="message",
                          content=text, content_hash="h", category="conversation", tags=tags,
                          session_id=session, role="user", created_at=created,
                          updated_at=created, key_version=epoch)
                   for text, created, tags in texts]
        tx.append(session_file(session, archived=True), records)
        tx.rebuild_indexes()


def build_corpus(vault: Vault) -> Corpus:
    c = Corpus(vault)
    c.add("dog", "My dog is called Luna", tags=["pets", "family"])
    c.add("d1", "What is the time? It is what it is, and that is that", tags=["pets"])
    c.add("d2", "The name of the street is on the sign by the door")
    c.add("d3", "Is it the case that there is what there was?", "context", tags=["family"])
    c.add("d4", "Which of these is the one that you would have been", "pattern")
    c.add("runs", "He runs along the river every morning", tags=["sport"])
    c.add("running", "I was running late for the train", "summary")
    c.add("ran", "She ran a marathon last spring", tags=["sport", "pets"])
    c.add("tea", "Prefers green tea in the afternoon", "preference")
    c.add("coffee", "Prefers black coffee in the afternoon", "preference", supersedes=c.ids["tea"])
    c.add("old", "Deploys happen on Tuesday", tags=["work"])
    c.add("new", "Deploys happen on Thursday", "correction", supersedes=c.ids["old"],
          tags=["work"])
    c.add("instr", "Always answer in British English", "instruction", tags=["family", "work"])
    add_messages(vault, "s1", [
        NewMessage("we should mock the clock in the scheduler tests", "user", "a1",
                   "2024-05-01T10:00:00Z", tags=["work"]),
        NewMessage("the clock will mock you, and mock the tests too", "assistant", "a2",
                   "2024-05-02T10:00:00Z"),
        NewMessage("mock clock frameworks are plentiful", "user", "a3",
                   "2024-05-03T10:00:00Z", tags=["work", "pets"]),
    ])
    add_messages(vault, "s2", [
        NewMessage("Luna chewed the sofa cushion", "user", "b1", "2024-06-01T09:00:00Z",
                   tags=["pets"]),
        NewMessage("Maybe get Luna a chew toy", "assistant", "b2", "2024-06-01T09:05:00Z"),
    ])
    c.add("msg", "the dog park opens at nine", "message", session="s2", tags=["pets"])
    archive_records(vault, "s0", [
        ("Luna was adopted in March", "2023-03-10T08:00:00Z", ["pets"]),
        ("we used to mock the clock with freezegun", "2023-03-11T08:00:00Z", ["work"]),
    ])
    for r in entries(vault):
        c.ids.setdefault(r.record.message_id or r.record.content, r.record.memory_id)
    return c


@pytest.fixture
def corpus(vault: Vault) -> Corpus:
    return build_corpus(vault)


# --- 2. properties ------------------------------------------------------------------------------


OPERATOR_TEXT = st.lists(
    st.sampled_from(['"', "'", ":", "(", ")", "AND", "OR", "NOT", "+", "-", "^", "~", "*",
                     "?", "\\", "/", "[", "]", "{", "}", "!", "::", "TO", "body:", "id:",
                     "dog", "luna", "mock", "the", "clock", "é", "\x00", "\u200b", "🐕",
                     "what", "is", "x" * 60, " ", "\n", "\t"]),
    max_size=12,
).map("".join)
QUERIES = st.one_of(st.text(), OPERATOR_TEXT, st.text(alphabet=st.characters(
    codec="utf-8", exclude_categories=("Cs",))))


@settings(max_examples=examples(200), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(text=QUERIES, limit=st.integers(1, 25), include=st.booleans())
def test_any_query_returns_the_spec_shape(corpus: Corpus, text: str, limit: int,
                                          include: bool) -> None:
    vault = corpus.vault
    filters = Filters(limit=limit, include_archive=include, include_superseded=include)
    doc = search(vault, text, filters)
    assert set(doc) == DOC_FIELDS
    assert isinstance(doc["total_searched"], int) and doc["total_searched"] == 21
    assert isinstance(doc["query_time_ms"], float) and doc["query_time_ms"] >= 0
    results = doc["results"]
    assert len(results) <= limit
    assert len(set(ids(doc))) == len(results)
    eligible = {r.memory_id: r for r in reference_list(vault, Filters(
        limit=1000, include_archive=include, include_superseded=include))}
    for r in results:
        assert set(r) == RESULT_FIELDS
        assert r["memory_id"] in eligible
        record = eligible[r["memory_id"]]
        assert (r["content"], r["type"], r["category"], r["tags"], r["created_at"],
                r["session_id"], r["message_id"]) == (
            record.content, record.type, record.category, record.tags, record.created_at,
            record.session_id, record.message_id)
        assert isinstance(r["score"], float) and math.isfinite(r["score"])
        assert isinstance(r["snippet"], str) and len(r["snippet"]) <= 162
        assert "\n" not in r["snippet"]
    scores = [r["score"] for r in results]
    assert scores == sorted(scores, reverse=True)


def time_points() -> list[datetime | None]:
    base = [parse_time(t) for t in ("2023-03-10T08:00:00Z", "2023-03-11T08:00:00Z",
                                    "2024-05-01T10:00:00Z", "2024-05-02T10:00:00Z",
                                    "2024-06-01T09:05:00Z", "2024-01-01")]
    return [None, *base, *(b + timedelta(microseconds=1) for b in base[:3]),
            datetime.now(UTC) - timedelta(days=1), datetime.now(UTC) + timedelta(days=1)]


@settings(max_examples=examples(200), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(
    types=st.lists(st.sampled_from(TYPES), max_size=3, unique=True),
    categories=st.lists(st.sampled_from(CATEGORIES), max_size=2, unique=True),
    tags=st.lists(st.sampled_from(["pets", "family", "sport", "work", "nosuchtag"]),
                  max_size=2),
    session=st.sampled_from([None, "s0", "s1", "s2", "nosuch"]),
    after=st.sampled_from(time_points()), before=st.sampled_from(time_points()),
    include_archive=st.booleans(), include_superseded=st.booleans(),
    text=st.sampled_from(["", "luna", "mock the clock", '"mock the clock"', "prefers",
                          "what is the name of my dog?", "deploys"]),
)
def test_filters_agree_with_list(corpus: Corpus, types: list[str], categories: list[str],
                                 tags: list[str], session: str | None,
                                 after: datetime | None, before: datetime | None,
                                 include_archive: bool, include_superseded: bool,
                                 text: str) -> None:
    """The reference decrypts everything and filters in Python; `list` and `search` must
    agree with it."""
    filters = Filters(types=types, categories=categories, tags=tags, session=session,
                      after=after, before=before, include_archive=include_archive,
                      include_superseded=include_superseded, limit=1000)
    expected = [r.memory_id for r in reference_list(corpus.vault, filters)]
    assert [r.memory_id for r in list_records(corpus.vault, filters)] == expected
    doc = search(corpus.vault, text, filters)
    if text == "":
        assert ids(doc) == expected  # the same records, and newest first like list
    else:
        assert set(ids(doc)) <= set(expected)


def test_filter_corpus_exercises_every_filter(corpus: Corpus) -> None:
    """The property above is only as good as its corpus: each filter must matter."""
    vault = corpus.vault
    everything = len(reference_list(vault, Filters(limit=1000, include_archive=True,
                                                   include_superseded=True)))
    assert everything == 21
    for f in (Filters(limit=1000), Filters(limit=1000, include_archive=True),
              Filters(limit=1000, include_superseded=True), Filters(limit=1000, tags=["pets"]),
              Filters(limit=1000, tags=["pets", "sport"]), Filters(limit=1000, session="s1"),
              Filters(limit=1000, types=["message"]), Filters(limit=1000,
                                                              categories=["preference"]),
              Filters(limit=1000, after=parse_time("2024-05-02T10:00:00Z"))):
        n = len(reference_list(vault, f))
        assert 0 < n < everything, f


# --- 3. queries ---------------------------------------------------------------------------------


def test_question_finds_the_answer_among_stopword_distractors(corpus: Corpus) -> None:
    doc = search(corpus.vault, "What is the name of my dog?", Filters())
    assert ids(doc)[0] == corpus.ids["dog"]
    assert search_index(corpus.vault).analyzer.query_terms(
        "What is the name of my dog?") == ["name", "dog"]
    # Distractors made only of stopwords are not found at all.
    for name in ("d1", "d3", "d4"):
        assert corpus.ids[name] not in ids(doc)


def test_a_query_of_only_stopwords_still_searches(corpus: Corpus) -> None:
    doc = search(corpus.vault, "what is that", Filters())
    assert ids(doc)[0] == corpus.ids["d1"]


def test_english_stemming(corpus: Corpus) -> None:
    running = search(corpus.vault, "running", Filters())
    assert {corpus.ids["runs"], corpus.ids["running"]} <= set(ids(running))
    runs = search(corpus.vault, "runs", Filters())
    assert {corpus.ids["runs"], corpus.ids["running"]} <= set(ids(runs))
    # The Porter stemmer does not know irregular forms: "ran" is not "run".
    assert corpus.ids["ran"] not in ids(running)
    assert search(corpus.vault, "ran", Filters())["results"][0]["memory_id"] == corpus.ids["ran"]
    assert "Luna" in contents(search(corpus.vault, "DOGS", Filters()))[0]


def test_quoted_phrase_matches_only_that_phrase(corpus: Corpus) -> None:
    phrase = search(corpus.vault, '"mock the clock"', Filters(limit=50))
    assert contents(phrase) == ["we should mock the clock in the scheduler tests"]
    words = search(corpus.vault, "mock the clock", Filters(limit=50))
    assert len(words["results"]) == 3  # without quotes, the other orders match too
    archived = search(corpus.vault, '"mock the clock"', Filters(include_archive=True))
    assert set(contents(archived)) == {"we should mock the clock in the scheduler tests",
                                       "we used to mock the clock with freezegun"}
    assert search(corpus.vault, '"clock the mock"', Filters())["results"] == []
    mixed = search(corpus.vault, '"mock the clock" scheduler', Filters())
    assert contents(mixed)[0] == "we should mock the clock in the scheduler tests"


def test_empty_query_lists_most_recent_first(corpus: Corpus) -> None:
    vault = corpus.vault
    latest = corpus.add("latest", "The very latest thing")
    doc = search(vault, "", Filters(limit=5))
    assert ids(doc)[0] == latest
    assert len(doc["results"]) == 5
    times = [parse_time(r["created_at"]) for r in search(vault, "", Filters(limit=100))[
        "results"]]
    assert times == sorted(times, reverse=True) and len(times) == 18  # 21 + 1 - 2 - 2
    assert ids(doc) == [r.memory_id for r in list_records(vault, Filters(limit=5))]
    assert all(r["score"] == 0.0 for r in doc["results"])


def test_limit_caps_results(corpus: Corpus) -> None:
    for limit in (1, 2, 7):
        assert len(search(corpus.vault, "the", Filters(limit=limit))["results"]) == limit
        assert len(search(corpus.vault, "", Filters(limit=limit))["results"]) == limit
    assert len(search(corpus.vault, "luna", Filters(limit=1))["results"]) == 1
    with pytest.raises(UsageError):
        Filters(limit=0)


def test_after_and_before(corpus: Corpus) -> None:
    vault = corpus.vault
    may2 = parse_time("2024-05-02T10:00:00Z")
    after = search(vault, "mock clock", Filters(after=may2))
    assert set(contents(after)) == {"the clock will mock you, and mock the tests too",
                                    "mock clock frameworks are plentiful"}  # inclusive
    before = search(vault, "mock clock", Filters(before=may2))
    assert contents(before) == ["we should mock the clock in the scheduler tests"]  # exclusive
    window = search(vault, "", Filters(after=parse_time("2024-05-01T10:00:00Z"),
                                       before=parse_time("2024-06-01T09:05:00Z")))
    assert [r["message_id"] for r in window["results"]] == ["b1", "a3", "a2", "a1"]
    assert search(vault, "", Filters(after=may2, before=may2))["results"] == []


def test_tags_are_anded(corpus: Corpus) -> None:
    vault = corpus.vault
    both = search(vault, "", Filters(tags=["pets", "family"], limit=50))
    assert ids(both) == [corpus.ids["dog"]]
    one = search(vault, "", Filters(tags=["pets"], limit=50))
    assert len(one["results"]) == 6 and all("pets" in r["tags"] for r in one["results"])
    assert search(vault, "", Filters(tags=["pets", "nosuchtag"]))["results"] == []
    assert ids(search(vault, "luna", Filters(tags=["family"]))) == [corpus.ids["dog"]]


def test_session_filter(corpus: Corpus) -> None:
    vault = corpus.vault
    s2 = search(vault, "luna", Filters(session="s2"))
    assert {r["session_id"] for r in s2["results"]} == {"s2"}
    # b1 and b2 say "Luna"; the third turn has them as neighbours (context, ranked lower).
    assert [r["message_id"] for r in s2["results"]][:2] in (["b1", "b2"], ["b2", "b1"])
    assert len(s2["results"]) == 3
    assert search(vault, "luna", Filters(session="s1"))["results"] == []
    everything = search(vault, "", Filters(session="s1", limit=50))
    assert [r["message_id"] for r in everything["results"]] == ["a3", "a2", "a1"]
    assert search(vault, "", Filters(session="S1"))["results"] == []  # exact match


def test_superseded_left_out_unless_asked(corpus: Corpus) -> None:
    vault = corpus.vault
    default = search(vault, "prefers afternoon", Filters())
    assert ids(default) == [corpus.ids["coffee"]]
    both = search(vault, "prefers afternoon", Filters(include_superseded=True))
    assert set(ids(both)) == {corpus.ids["coffee"], corpus.ids["tea"]}
    assert ids(search(vault, "tuesday", Filters())) == []
    assert ids(search(vault, "tuesday", Filters(include_superseded=True))) == [
        corpus.ids["old"]]


def test_archive_left_out_unless_asked(corpus: Corpus) -> None:
    vault = corpus.vault
    assert "Luna was adopted in March" not in contents(search(vault, "luna adopted",
                                                              Filters()))
    got = search(vault, "luna adopted", Filters(include_archive=True))
    assert contents(got)[0] == "Luna was adopted in March"


def test_result_shape(corpus: Corpus) -> None:
    doc = search(corpus.vault, "luna", Filters())
    assert set(doc) == DOC_FIELDS
    assert doc["total_searched"] == len(entries(corpus.vault))
    first = doc["results"][0]
    assert set(first) == RESULT_FIELDS
    assert first["score"] > 0
    message = next(r for r in doc["results"] if r["message_id"] == "b1")
    assert message == {**message, "type": "message", "category": "conversation",
                       "session_id": "s2", "tags": ["pets"],
                       "created_at": "2024-06-01T09:00:00.000000Z",  # stored as UTC, microseconds
                       "content": "Luna chewed the sofa cushion",
                       "snippet": "Luna chewed the sofa cushion"}
    fact = search(corpus.vault, "luna called", Filters())["results"][0]
    assert fact["session_id"] is None and fact["message_id"] is None
    assert fact["category"] == "learned_context" and fact["type"] == "fact"
    json.dumps(doc)


def test_snippet_of_a_long_record_holds_the_match(vault: Vault) -> None:
    filler = " ".join(f"word{i}" for i in range(120))
    text = f"{filler}\n\nthe zeppelin landed   safely\n{filler}"
    add(vault, text, "fact")
    for query in ("zeppelin", "Zeppelins", '"zeppelin landed"'):
        result = search(vault, query, Filters())["results"][0]
        assert result["content"] == text
        snippet = result["snippet"]
        assert "zeppelin landed safely" in snippet, query
        assert snippet.startswith("…") and snippet.endswith("…")
        assert len(snippet) <= 162 and "\n" not in snippet
    start = search(vault, "word0", Filters())["results"][0]["snippet"]
    assert start.startswith("word0 ") and start.endswith("…")


def test_other_users_records_are_not_searched(vault: Vault) -> None:
    add(vault, "alice keeps bees", "fact")
    bob = open_as("bob")
    assert search(bob, "bees", Filters())["results"] == []
    assert not bob.store.exists()  # a search creates nothing
    add(bob, "bob keeps goats", "fact")
    assert contents(search(bob, "keeps", Filters())) == ["bob keeps goats"]
    assert contents(search(vault, "keeps", Filters())) == ["alice keeps bees"]


# --- 4. index maintenance -------------------------------------------------------------------


def test_every_write_updates_the_index_without_a_rebuild(vault: Vault,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    add(vault, "first record", "fact")

    def no_rebuild(*args: Any) -> int:
        raise AssertionError("writes must update the index, not rebuild it")

    monkeypatch.setattr(vault, "rebuild_indexes", no_rebuild)
    fact = add(vault, "the giraffe is tall", "fact", tags=["zoo"]).record.memory_id
    assert fact in indexed_ids(vault) and stamp_is_fresh(vault)  # before any search
    assert ids(search(vault, "giraffe", Filters())) == [fact]
    out = add_messages(vault, "s1", [NewMessage("penguins waddle", "user", "p1"),
                                    NewMessage("okapis are shy", "assistant", "p2")])
    assert len(out) == 2 and set(out) <= indexed_ids(vault)
    assert contents(search(vault, "penguins", Filters()))[0] == "penguins waddle"
    msg = add(vault, "narwhals have tusks", "message", session="s1").record.memory_id
    narwhal = ids(search(vault, "narwhal", Filters()))
    assert narwhal[0] == msg  # and the earlier user turn was re-indexed with it as context
    assert set(narwhal) == {msg, out[0]}  # (the assistant's turn has none: below)
    (walrus,) = add_messages(vault, "s1", [NewMessage("walruses are loud")])
    found = ids(search(vault, "walrus", Filters()))
    assert found[0] == walrus and set(found) == {walrus, msg}
    # A neighbour's words are indexed as context: a user's turn is found by the reply...
    assert "penguins waddle" in contents(search(vault, "okapis", Filters(limit=5)))
    # ...but a reply does not borrow the user's words, or it would outrank them.
    assert "okapis are shy" not in contents(search(vault, "penguins", Filters(limit=5)))
    pref = add(vault, "likes oolong", "preference", supersedes=fact).record.memory_id
    assert ids(search(vault, "giraffe", Filters())) == []
    assert ids(search(vault, "oolong", Filters())) == [pref]
    assert indexed_ids(vault) == {x.record.memory_id for x in entries(vault)}


def test_deleted_index_is_rebuilt_with_the_same_results(corpus: Corpus,
                                                        script_runner: ScriptRunner) -> None:
    queries = ["luna", "What is the name of my dog?", '"mock the clock"', "", "prefers"]
    before = {q: ids(search(corpus.vault, q, Filters(limit=50))) for q in queries}
    shutil.rmtree(index_dir(corpus.vault))
    vault = fresh_vault()
    after = {q: ids(search(vault, q, Filters(limit=50))) for q in queries}
    assert {q: set(v) for q, v in after.items()} == {q: set(v) for q, v in before.items()}
    assert after["What is the name of my dog?"][0] == corpus.ids["dog"]
    assert stamp_is_fresh(vault)
    shutil.rmtree(index_dir(vault))
    result = script_runner.run(["mem", "reindex", "--json"])
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"documents": 21}
    assert len(indexed_ids(vault)) == 21


def corrupt_term_dict(vault: Vault, where: str) -> bytes | None:
    """A one-byte change to a segment's term dictionary that Tantivy accepts when opening
    the index but fails on when running mem's queries ("query"), or that makes Tantivy
    panic when opening it ("panic"). Found by trying on a scratch copy, as the bytes
    depend on the random index key."""
    directory = index_dir(vault)
    queries = [search_index(vault).build_query(q, Filters())[0] for q in PROBES]
    term = largest_term_dict(directory)
    pristine = term.read_bytes()
    scratch = directory.with_name("scratch-index")
    try:
        for back in range(1, min(len(pristine), 400)):
            shutil.rmtree(scratch, ignore_errors=True)
            shutil.copytree(directory, scratch)
            data = bytearray(pristine)
            data[len(data) - back] ^= 0xFF
            (scratch / term.name).write_bytes(bytes(data))
            stage = "open"
            try:
                searcher = tantivy.Index.open(str(scratch)).searcher()
                stage = "query"
                for query in queries:
                    for _, addr in searcher.search(query, 50).hits:
                        searcher.doc(addr)
                stage = "ok"
            except BaseException as exc:  # a Rust panic arrives as a BaseException
                if isinstance(exc, KeyboardInterrupt | SystemExit):
                    raise
                if stage == "open" and type(exc).__name__ == "PanicException":
                    stage = "panic"
                if stage == where:
                    return bytes(data)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return None


def largest_term_dict(directory: Path) -> Path:
    """The term dictionary of the index's largest segment (a rebuild may write several)."""
    return max(directory.glob("*.term"), key=lambda p: p.stat().st_size)


PROBES = ["luna", '"mock the clock"', "", "what is the name of my dog?"]


def break_index(vault: Vault, how: str) -> None:
    path = index_dir(vault)
    segments = sorted(p for p in path.iterdir() if p.suffix in (".term", ".store", ".idx",
                                                                  ".fast", ".pos",
                                                                  ".fieldnorm"))
    if how == "meta.json garbage":
        replace_bytes(path / "meta.json", b"\x00\xffnot json at all")
    elif how == "mem-index.json garbage":
        replace_bytes(path / "mem-index.json", b'{"format": 0}')
    elif how == "segment files garbage":
        for p in segments:
            replace_bytes(p, os.urandom(max(p.stat().st_size, 16)))
    elif how == "segment files empty":
        for p in segments:
            replace_bytes(p, b"")
    elif how == "segment file missing":
        for p in segments:
            if p.suffix == ".store":
                p.unlink()
    elif how == "stamp deleted":
        (path / "stamp").unlink()
    elif how == "index is a file":
        shutil.rmtree(path)
        path.write_bytes(b"not a directory")
    elif how in ("term dict fails on query", "term dict panic"):
        data = corrupt_term_dict(vault, how.rsplit(" ", 1)[1])
        if data is None:
            pytest.skip(f"no single-byte change makes this Tantivy fail on {how}")
        replace_bytes(largest_term_dict(path), data)
    else:
        raise AssertionError(how)


CORRUPTIONS = ["meta.json garbage", "mem-index.json garbage", "segment files garbage",
               "segment files empty", "segment file missing", "stamp deleted",
               "index is a file", "term dict fails on query", "term dict panic"]


@pytest.mark.parametrize("how", CORRUPTIONS)
def test_broken_index_is_rebuilt_on_the_next_search(corpus: Corpus, how: str) -> None:
    admin.reindex(corpus.vault)  # one segment, so the term-dictionary cases are well defined
    queries = PROBES
    expected = {q: set(ids(search(corpus.vault, q, Filters(limit=50)))) for q in queries}
    break_index(corpus.vault, how)
    vault = fresh_vault()
    with Umask(0):  # whatever the umask, the rebuilt files are private
        got = {q: set(ids(search(vault, q, Filters(limit=50)))) for q in queries}
    assert got == expected
    assert stamp_is_fresh(vault)
    assert indexed_ids(vault) == {x.record.memory_id for x in entries(vault)}
    assert wrong_modes(index_dir(vault)) == []
    leftovers = [p.name for p in index_dir(vault).parent.iterdir()
                 if p.name.startswith("index.")]
    assert leftovers == []


def test_broken_index_does_not_break_the_cli(corpus: Corpus,
                                             script_runner: ScriptRunner) -> None:
    admin.reindex(corpus.vault)
    break_index(corpus.vault, "term dict fails on query")
    for _ in range(2):
        result = script_runner.run(["mem", "search", "luna", "--json"])
        assert result.returncode == 0, result.stderr
        assert "Luna" in json.loads(result.stdout)["results"][0]["content"]


def test_index_files_stay_private_through_merges(vault: Vault) -> None:
    """Many small commits make Tantivy merge segments in the background; the merged
    segment's files must be 0600 too, whatever the umask (library callers such as the
    benchmarks do not set mem's umask)."""
    with Umask(0o022):
        for i in range(12):
            add(vault, f"fact number {i} about merging", "fact")
            assert wrong_modes(index_dir(vault)) == [], i


def test_rebuild_makes_private_files(vault: Vault) -> None:
    add(vault, "some fact", "fact")
    with Umask(0):
        assert admin.reindex(vault).to_dict() == {"documents": 1}
    assert wrong_modes(index_dir(vault)) == []


def write_behind_the_index(vault: Vault, text: str) -> str:
    """A write killed after it changed a session file and before its index commit."""
    stamp = now_iso()
    record = Record(memory_id=uuid7(), org_id="default", user_id="alice", type="message",
                    content=text, content_hash="h", category="conversation", session_id="s1",
                    role="user", created_at=stamp, updated_at=stamp,
                    key_version=vault.state().key_version)
    with pytest.raises(KeyboardInterrupt), vault.transaction() as tx:
        tx.append(session_file("s1"), [record])
        raise KeyboardInterrupt
    assert record.memory_id not in indexed_ids(vault)
    return record.memory_id


def test_an_interrupted_write_leaves_an_index_that_is_rebuilt(corpus: Corpus) -> None:
    vault = corpus.vault
    behind = write_behind_the_index(vault, "the okapi escaped")
    assert not stamp_is_fresh(vault)
    assert ids(search(fresh_vault(), "okapi", Filters()))[0] == behind
    assert stamp_is_fresh(vault)
    assert behind in indexed_ids(vault)


def test_a_write_after_an_interrupted_one_rebuilds(corpus: Corpus) -> None:
    """The next write must not just add its own record to a stale index."""
    vault = corpus.vault
    behind = write_behind_the_index(vault, "the okapi escaped")
    new = add(fresh_vault(), "the capybara is calm", "fact").record.memory_id
    assert {behind, new} <= indexed_ids(vault)  # before any search
    assert indexed_ids(vault) == {x.record.memory_id for x in entries(vault)}
    vault = fresh_vault()
    assert ids(search(vault, "okapi", Filters()))[0] == behind
    assert ids(search(vault, "capybara", Filters())) == [new]


def test_an_index_without_its_description_is_rebuilt_by_the_next_write(
        corpus: Corpus) -> None:
    vault = corpus.vault
    shutil.rmtree(index_dir(vault))
    index_dir(vault).mkdir()
    (index_dir(vault) / "stamp").write_text("a stamp, but no index")
    new = add(fresh_vault(), "the capybara is calm", "fact").record.memory_id
    assert indexed_ids(vault) == {x.record.memory_id for x in entries(vault)}
    vault = fresh_vault()
    assert ids(search(vault, "capybara", Filters())) == [new]
    assert ids(search(vault, "what is the name of my dog", Filters()))[0] == corpus.ids["dog"]


def test_moved_lines_are_detected(vault: Vault) -> None:
    """Two lines of a session file swapped behind mem's back (each line is authentic on
    its own) while the stamp stays: a hit's location now holds another record, so
    search notices and rebuilds instead of returning the wrong one."""
    add_messages(vault, "s1", [NewMessage(f"{animal} likes the rain", "user", f"m{i}",
                                         f"2024-05-0{i + 1}T10:00:00Z")
                              for i, animal in enumerate(["alpaca", "beaver", "cougar"])])
    path = vault.layout.path(session_file("s1"))
    lines = path.read_bytes().splitlines(keepends=True)
    assert len({len(line) for line in lines}) == 1  # same offsets, other records
    replace_bytes(path, b"".join([lines[1], lines[0], lines[2]]))
    assert stamp_is_fresh(vault)
    for animal in ("alpaca", "beaver", "cougar"):
        got = search(fresh_vault(), animal, Filters())["results"][0]
        assert got["content"] == f"{animal} likes the rain"
    for r in search(fresh_vault(), "rain", Filters())["results"]:
        assert r["content"].startswith({"m0": "alpaca", "m1": "beaver",
                                        "m2": "cougar"}[r["message_id"]])


def test_a_bad_message_time_never_makes_the_vault_unsearchable(corpus: Corpus) -> None:
    with pytest.raises(DataError):  # refused, and nothing of the batch stored
        add_messages(corpus.vault, "s9", [NewMessage("bad time", "user", "x1", "yesterday")])
    assert ids(search(fresh_vault(), "what is the name of my dog", Filters()))[0] == \
        corpus.ids["dog"]


def test_list_and_empty_search_agree_on_order_with_utc_offsets(vault: Vault) -> None:
    add_messages(vault, "s1", [NewMessage("ten utc", "user", "o1", "2024-05-01T12:00:00+02:00"),
                              NewMessage("eleven utc", "user", "o2", "2024-05-01T11:00:00Z")])
    assert contents(search(vault, "", Filters())) == ["eleven utc", "ten utc"]
    assert [r.content for r in list_records(vault, Filters())] == ["eleven utc", "ten utc"]


def hold_lock(vault: Vault, seconds: float, held: threading.Event,
              release: threading.Event | None = None) -> threading.Thread:
    """A thread that holds the user's lock for `seconds`, or until `release` is set."""
    def run() -> None:
        with fsio.locked(vault.layout.lock_path, 5, "test holder"):
            held.set()
            if release is None:
                time.sleep(seconds)
            else:
                release.wait(seconds)

    thread = threading.Thread(target=run)
    thread.start()
    assert held.wait(5)
    return thread


def test_a_write_waits_for_the_lock_then_lands_in_the_index(vault: Vault) -> None:
    first = add(vault, "the first record", "fact").record.memory_id
    held = threading.Event()
    thread = hold_lock(vault, 0.3, held)
    other = subprocess.Popen([str(Path(sys.executable).parent / "mem"), "add",  # noqa: S603
                              "the other process wrote this", "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    started = time.monotonic()
    second = add(vault, "the second record", "fact").record.memory_id
    waited = time.monotonic() - started
    thread.join()
    out, err = other.communicate(timeout=30)
    assert other.returncode == 0, err
    assert waited >= 0.2
    third = json.loads(out)["memory_id"]
    vault = fresh_vault()
    assert set(ids(search(vault, "record", Filters()))) == {first, second}
    assert ids(search(vault, "other process", Filters())) == [third]
    assert indexed_ids(vault) == {first, second, third} and stamp_is_fresh(vault)


def test_reads_do_not_wait_for_a_writer(vault: Vault) -> None:
    add(vault, "the first record", "fact")
    held, release = threading.Event(), threading.Event()
    thread = hold_lock(vault, 60, held, release)
    try:  # answered while the lock is still held: the holder lets go only afterwards
        assert contents(search(vault, "first", Filters())) == ["the first record"]
        assert thread.is_alive()
    finally:
        release.set()
        thread.join()


def test_a_lock_held_too_long_is_busy_and_changes_nothing(
        vault: Vault, monkeypatch: pytest.MonkeyPatch) -> None:
    add(vault, "the first record", "fact")
    monkeypatch.setenv("MEM_LOCK_TIMEOUT", "0.1")
    impatient = fresh_vault()
    held = threading.Event()
    thread = hold_lock(vault, 0.5, held)
    with pytest.raises(Busy):
        add(impatient, "never written", "fact")
    thread.join()
    assert contents(search(fresh_vault(), "", Filters())) == ["the first record"]


# --- 5. the installed script ------------------------------------------------------------------


def test_cli_search_prints_one_json_document(corpus: Corpus,
                                             script_runner: ScriptRunner) -> None:
    result = mem(script_runner, "search", "What is the name of my dog?", "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)  # exactly one document, nothing else on stdout
    assert set(doc) == DOC_FIELDS and doc["results"][0]["content"] == "My dog is called Luna"
    assert all(set(r) == RESULT_FIELDS for r in doc["results"])
    human = mem(script_runner, "search", "luna")
    assert human.returncode == 0 and "Luna" in human.stdout
    filtered = json.loads(mem(script_runner, "search", "--json", "--tag", "pets", "--tag",
                              "family", "-n", "3", "--include-superseded").stdout)
    assert [r["content"] for r in filtered["results"]] == ["My dog is called Luna"]
    dated = json.loads(mem(script_runner, "search", "--json", "--session", "s1",
                           "--after", "2024-05-02", "--before", "2024-05-03").stdout)
    assert [r["message_id"] for r in dated["results"]] == ["a2"]


@pytest.mark.parametrize("query", ['AND OR " ( :: ~ ^ *', "", '"', "body:x AND NOT id:*",
                                   "\u00e9\u0301 \U0001f415 \x07", "-", "((((", "x" * 5000])
def test_cli_search_odd_input(corpus: Corpus, script_runner: ScriptRunner,
                              query: str) -> None:
    result = mem(script_runner, "search", query, "--json")
    assert result.returncode == 0, result.stderr
    assert set(json.loads(result.stdout)) == DOC_FIELDS
    assert mem(script_runner, "search", query).returncode == 0
    assert mem(script_runner, "search", "--", query).returncode == 0


@pytest.mark.parametrize("args", [["--type", "bogus"], ["--category", "nope"],
                                  ["--limit", "0"], ["--after", "last blursday"],
                                  ["--before", "2024-13-45"], ["--no-such-flag"]])
def test_cli_search_usage_errors(corpus: Corpus, script_runner: ScriptRunner,
                                 args: list[str]) -> None:
    result = mem(script_runner, "search", "luna", *args)
    assert result.returncode == 2, result.stderr
    assert result.stdout == "" and "Traceback" not in result.stderr


@pytest.mark.script_launch_mode("subprocess")  # an abort must fail the test, not pytest
def test_cli_search_with_a_huge_limit(corpus: Corpus, script_runner: ScriptRunner) -> None:
    """--limit is user input: Tantivy reserves room for `limit` hits up front, so a huge
    value must not abort the process (SIGABRT on a 48 GB allocation)."""
    for query in ("", "luna"):
        result = mem(script_runner, "search", query, "--limit", "100000000000", "--json")
        assert result.returncode == 0, result.stderr[-500:]
        assert len(json.loads(result.stdout)["results"]) == (17 if not query else 4)


def test_cli_search_without_records(script_runner: ScriptRunner, vault: Vault) -> None:
    result = mem(script_runner, "search", "anything", "--json")
    assert result.returncode == 66 and "user alice has no memory yet" in result.stderr
    add(vault, "alice keeps bees", "fact")
    pref = mem(script_runner, "pref", "set", "editor", "vim", "--user", "bob")
    assert pref.returncode == 0
    other = mem(script_runner, "search", "bees", "--json", "--user", "bob")
    assert other.returncode == 0 and json.loads(other.stdout)["results"] == []
    assert mem(script_runner, "search", "--user", "bob").returncode == 0


def test_cli_reindex_reports_the_count(vault: Vault, script_runner: ScriptRunner) -> None:
    assert mem(script_runner, "reindex").returncode == 66  # no memory for alice yet
    add(vault, "alice keeps bees", "fact")
    add_messages(vault, "s1", [NewMessage("hello there"), NewMessage("general kenobi")])
    result = mem(script_runner, "reindex", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"documents": 3}
    assert "index rebuilt: 3 records" in mem(script_runner, "reindex").stderr


def test_library_search_on_a_fresh_vault(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEM_VAULT", str(tmp_path / "elsewhere"))
    init(resolve())
    assert search(Vault(resolve()), "", Filters())["results"] == []


@pytest.fixture(autouse=True)
def _no_stray_index_dirs(vault_dir: Path) -> Iterator[None]:
    yield
    if vault_dir.exists():
        stray = [p for p in vault_dir.rglob("*") if p.name.startswith(("index.new-",
                                                                        "index.old-"))]
        assert stray == []


# --- 7. time: --as-of and relative dates --------------------------------------------------


def test_relative_dates_resolve_against_the_moment_asked() -> None:
    from memvault.index.when import resolve

    now = datetime(2026, 3, 12, 15, 0, tzinfo=UTC)  # a Thursday

    def days(text: str) -> list[tuple[str, str]]:
        return [(w.start.date().isoformat(), w.end.date().isoformat())
                for w in resolve(text, now)]

    assert days("what did I do yesterday?") == [("2026-03-11", "2026-03-13")]
    assert days("the book I finished two days ago") == [("2026-03-09", "2026-03-12")]
    assert days("lunch last Tuesday") == [("2026-03-10", "2026-03-12")]
    assert days("Lunch LAST Thursday") == [("2026-03-05", "2026-03-07")]  # not today
    assert days("trips last week") == [("2026-03-02", "2026-03-11")]
    assert days("what I bought last month") == [("2026-02-01", "2026-03-03")]
    assert days("plans for this weekend, days ago, last time") == []  # plans; no count
    assert resolve("999 years ago", datetime(1, 6, 1, tzinfo=UTC)) == []  # no crash


@pytest.mark.script_launch_mode("inprocess")
def test_search_as_of_ranks_what_a_relative_date_names_and_hides_later_records(
        vault: Vault, script_runner: ScriptRunner, tmp_path: Path) -> None:
    turns = [("m1", "2026-01-20T10:00:00Z", "I went hiking with Sam near the lake"),
             ("m2", "2026-03-04T10:00:00Z", "I went hiking with Sam in the hills"),
             ("m3", "2026-03-20T10:00:00Z", "I went hiking with Sam by the sea")]
    transcript = tmp_path / "walks.jsonl"
    transcript.write_text("".join(json.dumps({"id": i, "role": "user", "content": text,
                                              "timestamp": at}) + "\n"
                                  for i, at, text in turns))
    assert mem(script_runner, "ingest", str(transcript), "--format", "jsonl",
               "--session", "walks").success

    def found(query: str, *args: str) -> list[str]:
        out = mem(script_runner, "search", query, "--json", *args)
        assert out.success, out.stderr
        return [r["content"].split()[-1] for r in json.loads(out.stdout)["results"]]

    assert found("hiking with Sam last week", "--as-of", "2026-03-12") == ["hills", "lake"]
    assert found("hiking with Sam two months ago", "--as-of", "2026-03-12")[0] == "lake"
    assert found("hiking with Sam yesterday", "--as-of", "2026-03-21T09:00:00Z")[0] == "sea"
    # A bare date is the whole day; nothing after it is searched.
    assert set(found("hiking", "--as-of", "2026-03-20")) == {"sea", "hills", "lake"}
    assert set(found("hiking", "--as-of", "2026-03-19")) == {"hills", "lake"}
    bad = mem(script_runner, "search", "hiking", "--as-of", "soon")
    assert bad.returncode == 2 and "--as-of 'soon' is not a date or time" in bad.stderr


def test_a_question_naming_a_chat_member_ranks_what_they_said_first(vault: Vault) -> None:
    # Ben talks about Ana at length; Ana's own turn names her only as its speaker.
    turns = [NewMessage("Ana has a pet? Ana talks about her pet all day, Ana is Ana.",
                        "user", "b1", name="Ben"),
             NewMessage("I adopted a kitten from the shelter.", "user", "a1", name="Ana"),
             NewMessage("Lovely, a pet is good company.", "user", "b2", name="Ben")]
    add_messages(vault, "chat", turns)
    found = search(vault, "what pet does Ana have?", Filters())
    assert [r["message_id"] for r in found["results"]][:2] == ["a1", "b1"]


def test_equal_scores_rank_alike_whatever_order_they_were_stored_in(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path) -> None:
    """Records alike by words score the same; their order is the ids', not the order a
    machine happened to store them in (a second machine pulls them in another order),
    so two memories holding the same records answer a question alike."""
    def ask(*args: str) -> Any:
        result = mem(script_runner, *args, "--json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    for text in ("kiwi mango papaya", "papaya kiwi mango", "mango papaya kiwi",
                 "kiwi papaya mango"):
        ask("add", text, "--type", "fact")
    export = json.loads(mem(script_runner, "export").stdout)
    for category in export["categories"].values():
        category["records"].reverse()
    path = tmp_path / "reversed.json"
    path.write_text(json.dumps(export))
    assert mem(script_runner, "import", str(path), "--user", "bob").returncode == 0

    def order(user: str) -> list[str]:
        found = ask("search", "mango", "--mode", "words", "--user", user)["results"]
        return [r["memory_id"] for r in found]

    alice = order("alice")
    assert len(alice) == 4 and len({r["score"] for r in ask(
        "search", "mango", "--mode", "words")["results"]}) == 1
    assert order("bob") == alice == sorted(alice)
