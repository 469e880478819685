"""A large pull: stored a batch at a time in flat memory, in the order its pages were
written, and resumed after a kill without fetching again what it had learned; its index
built as the files are written, never left half built for a search, and answering as
the first machine's does."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memvault.model.records import Filters, NewMessage
from memvault.ops import sync as sync_ops
from memvault.ops.ingest import add_messages, ingest_text
from memvault.ops.recall import search
from memvault.ops.remember import add
from memvault.ops.verify import verify
from memvault.storage.remote import FolderRemote
from memvault.vault.vault import Vault
from tests.test_sync import contents, machine

BENCH = Path(__file__).resolve().parents[2] / "shared" / "bench-data"


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

    def killed(vault: Vault, items: list[Any], *held: Any) -> int:
        if calls:
            raise KeyboardInterrupt  # a kill between two batches
        calls.append(len(items))
        return stored(vault, items, *held)

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


def test_a_pull_takes_objects_whole_where_no_id_is_in_two(
        tmp_path: Path, small: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """No record is looked up in the listing's map when every id is in one object (each
    record is its latest version); an object part of which is held here (a pull killed
    after its first batch) is taken record by record, what is held left out."""
    from memvault.model.ids import IdMap

    (tmp_path / "remote").mkdir()
    a, b, c = machine(tmp_path, "a"), machine(tmp_path, "b"), machine(tmp_path, "c")
    fill(a)
    remote = FolderRemote(str(tmp_path / "remote"), tmp_path / "remote")
    sync_ops.sync(a, remote)
    asked: list[str] = []
    get = IdMap.get

    def counted(self: IdMap, memory_id: str, default: Any = None) -> Any:
        asked.append(memory_id)
        return get(self, memory_id, default)

    monkeypatch.setattr(IdMap, "get", counted)
    assert sync_ops.sync(b, remote).pulled == 41
    assert asked == []
    assert contents(b) == contents(a)
    # c holds the first batch (an object's first records among them) and takes the rest.
    stored = sync_ops._add_records
    batches = [0]

    def first_only(vault: Vault, items: list[Any], *held: Any) -> int:
        batches[0] += 1
        if batches[0] > 1:
            raise KeyboardInterrupt
        return stored(vault, items, *held)

    monkeypatch.setattr(sync_ops, "_add_records", first_only)
    with pytest.raises(KeyboardInterrupt):
        sync_ops.sync(c, remote)
    monkeypatch.setattr(sync_ops, "_add_records", stored)
    held = len(sync_ops.scan_local(c))
    assert 0 < held < 41
    assert sync_ops.sync(c, remote).pulled == 41 - held
    assert contents(c) == contents(a) and verify(c).ok


def test_the_next_objects_are_opened_while_a_batch_commits(
        tmp_path: Path, small: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """While a batch's index commit waits for Tantivy, the next batch's objects are
    opened and their records made (nothing of them stored before that batch's own
    transaction); a commit here waits until an object is opened, or gives up."""
    import threading

    from memvault.index import keyed

    (tmp_path / "remote").mkdir()
    a, b = machine(tmp_path, "a"), machine(tmp_path, "b")
    fill(a)
    remote = FolderRemote(str(tmp_path / "remote"), tmp_path / "remote")
    sync_ops.sync(a, remote)
    opened, commit = threading.Event(), keyed.IndexWriter.commit
    open_blob, stored = sync_ops.Session.open_blob, sync_ops._add_records
    during: list[bool] = []
    held: list[int] = []

    def opening(self: sync_ops.Session, *args: Any, **kwargs: Any) -> Any:
        opened.set()
        return open_blob(self, *args, **kwargs)

    def storing(vault: Vault, items: list[Any], *run: Any) -> int:
        opened.clear()  # what this thread opened for this batch was before
        return stored(vault, items, *run)

    def committing(self: keyed.IndexWriter) -> None:
        held.append(len(sync_ops.scan_local(Vault(b.settings))))
        # Opened inside the transaction: ahead. After the last batch nothing is left to
        # open: its commit is not kept waiting.
        during.append(opened.wait(5) if held[-1] < 41 else opened.is_set())
        commit(self)

    monkeypatch.setattr(sync_ops.Session, "open_blob", opening)
    monkeypatch.setattr(sync_ops, "_add_records", storing)
    monkeypatch.setattr(keyed.IndexWriter, "commit", committing)
    assert sync_ops.sync(b, remote).pulled == 41
    # Every commit but the last had the next objects opened meanwhile; what was held
    # at each commit is what the batches before it stored, no more.
    assert during[:-1] and all(during[:-1]) and not during[-1]
    assert held == sorted(held) and held[-1] == 41
    assert contents(a) == contents(b) and verify(b).ok


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


# --- the second machine answers as the first ------------------------------------------


def locomo(v: Vault) -> list[str]:
    """LoCoMo dev's conversations stored as sessions (speakers, times, turn ids as the
    transcript gives them); 50 of its questions, ten of each conversation."""
    questions: list[str] = []
    for c in json.loads((BENCH / "locomo_dev.json").read_text()):
        conv, n = c["conversation"], 1
        while f"session_{n}" in conv:
            start = datetime.strptime(conv[f"session_{n}_date_time"].strip(),
                                      "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)
            add_messages(v, f"{c['sample_id']}-{n}", [
                NewMessage(t["text"], role="user", name=t["speaker"], message_id=t["dia_id"],
                           created_at=(start + timedelta(seconds=i)).isoformat())
                for i, t in enumerate(conv[f"session_{n}"])])
            n += 1
        questions += [q["question"] for q in c["qa"][:10]]
    return questions


def ranked(v: Vault, questions: list[str], limit: int = 10) -> list[list[tuple[str, float]]]:
    return [[(h.memory_id, h.score) for h in search(v, q, Filters(limit=limit),
                                                    audit=False).results]
            for q in questions]


def same_ranking(here: list[tuple[str, float]], there: list[tuple[str, float]]) -> bool:
    """The same ids, in the same order wherever their scores differ: an index's word
    statistics count the documents it replaced until a merge, so two indexes of the same
    records score a few thousandths apart, and hits that close may trade places."""
    if {i for i, _ in here} != {i for i, _ in there}:
        return False
    score = dict(there)
    return all(score[a] >= score[b] - 0.01 for n, (a, _) in enumerate(here)
               for b, _ in here[n + 1:])


@pytest.mark.skipif(not BENCH.is_dir(), reason="the bench data is not beside the project")
def test_a_second_machine_verifies_as_the_first_and_answers_the_same(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Pages and batches small enough that the pull is many transactions, each committing
    # what its files fed the index.
    monkeypatch.setattr(sync_ops, "PAGE", 300)
    monkeypatch.setattr(sync_ops, "BATCH", 1000)
    (tmp_path / "remote").mkdir()
    a, b = machine(tmp_path, "a"), machine(tmp_path, "b")
    questions = locomo(a)
    assert len(questions) == 50
    remote = FolderRemote(str(tmp_path / "remote"), tmp_path / "remote")
    pushed = sync_ops.sync(a, remote).pushed
    assert sync_ops.sync(b, remote).pulled == pushed > 2500
    first, second = verify(a), verify(b)
    assert first.ok and second.ok, second.problems
    assert (second.files_checked, second.records_checked) == \
        (first.files_checked, first.records_checked)
    assert (b.state().live, b.state().archived) == (a.state().live, a.state().archived)
    b = Vault(b.settings)  # as a new process finds it: the index current, never rebuilt
    assert b.search_index(b.state().key_version).is_current()
    there = ranked(a, questions)
    assert sum(map(len, there)) > 400
    here = ranked(b, questions)
    assert [q for q, x, y in zip(questions, here, there, strict=True)
            if not same_ranking(x, y)] == []
    assert sum([i for i, _ in x] == [i for i, _ in y]
               for x, y in zip(here, there, strict=True)) >= 45


def documents(monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, list[str]]]:
    """Each record's Tantivy document as the index is given it, every field (the indexed
    ones too), by record id, the last one built; its sealed location opened (a fresh
    nonce each time it is sealed)."""
    from memvault.index import keyed

    built: dict[str, dict[str, list[str]]] = {}
    document = keyed.SearchIndex.document

    def kept(self: keyed.SearchIndex, entry: Any) -> Any:
        doc = document(self, entry)
        fields = doc.to_dict()
        fields["loc"] = [str(self.open_loc(entry.record.memory_id, fields["loc"][0]))]
        built[entry.record.memory_id] = {k: sorted(map(str, v)) for k, v in fields.items()}
        return doc

    monkeypatch.setattr(keyed.SearchIndex, "document", kept)
    return built


@pytest.mark.skipif(not BENCH.is_dir(), reason="the bench data is not beside the project")
def test_a_pull_builds_the_documents_a_rebuild_builds_field_by_field(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The index a pull builds as it writes its files (sessions split across batches,
    a turn's context from the file's tail, each word's digests memoised) holds what a
    rebuild from the files holds: the same documents, and the same answers."""
    from memvault.ops.admin import reindex

    monkeypatch.setattr(sync_ops, "PAGE", 300)
    monkeypatch.setattr(sync_ops, "BATCH", 1000)
    (tmp_path / "remote").mkdir()
    a, b = machine(tmp_path, "a"), machine(tmp_path, "b")
    questions = locomo(a)
    # Typed memories beside the sessions: tags, an agent, a later version.
    first = add(a, "Caroline keeps a blue notebook of recipes", "fact", tags=["home", "food"],
                agent="codex").record.memory_id
    second = add(a, "Melanie paints on Sundays", "preference", tags=["art"],
                 supersedes=first).record.memory_id
    remote = FolderRemote(str(tmp_path / "remote"), tmp_path / "remote")
    sync_ops.sync(a, remote)
    built = documents(monkeypatch)
    assert sync_ops.sync(b, remote).pulled > 2500
    pulled = dict(built)
    b = Vault(b.settings)
    answers = ranked(b, questions)
    built.clear()
    assert reindex(b).documents == len(pulled)
    assert built.keys() == pulled.keys()
    assert [(i, field, pulled[i].get(field), built[i].get(field)) for i in pulled
            for field in {*pulled[i], *built[i]}
            if pulled[i].get(field) != built[i].get(field)] == []
    assert {"tag", "agent", "who", "ctx", "role"} <= {k for d in built.values() for k in d}
    again = ranked(Vault(b.settings), questions)
    assert [q for q, x, y in zip(questions, answers, again, strict=True)
            if not same_ranking(x, y)] == []
    assert built[first]["superseded"] == ["1"]
    # A later sync brings what supersedes a record held here: it is indexed again so.
    add(a, "Melanie paints on Saturdays now", "preference", supersedes=second)
    sync_ops.sync(a, remote)
    assert sync_ops.sync(b, remote).pulled == 1
    b = Vault(b.settings)
    assert [h.memory_id for h in search(b, "Melanie paints", Filters(limit=5)).results] == \
        [h.memory_id for h in search(a, "Melanie paints", Filters(limit=5)).results]
    assert built[second]["superseded"] == ["1"]


# --- killed inside the index build ------------------------------------------------------


KILLER = """
import os, signal, sys
from pathlib import Path
from memvault.index import keyed
from memvault.ops import sync as sync_ops
from memvault.storage.remote import FolderRemote
from tests.test_sync import machine

sync_ops.PAGE, sync_ops.BATCH = 7, 10
point, at = sys.argv[1], int(sys.argv[2])
calls = [0]

def killing(owner, name):
    real = getattr(owner, name)
    def call(*args, **kwargs):
        calls[0] += 1
        if point.startswith("after-"):
            out = real(*args, **kwargs)
        if calls[0] == at:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs) if not point.startswith("after-") else out
    setattr(owner, name, call)

owner, name = {"feed": (keyed.SearchIndex, "feed"),
               "commit": (keyed.IndexWriter, "commit"),
               "after-commit": (keyed.IndexWriter, "commit"),
               "mark": (keyed.SearchIndex, "mark_current"),
               "fsync": (sync_ops._Syncs, "wait")}[point]
killing(owner, name)
root = Path(sys.argv[3])
sync_ops.sync(machine(root, "b"), FolderRemote(str(root / "remote"), root / "remote"))
"""


@pytest.mark.parametrize(("point", "at"), [("feed", 1), ("feed", 4), ("commit", 2),
                                           ("after-commit", 2), ("mark", 3), ("fsync", 2)])
def test_a_pull_killed_inside_the_index_build_never_leaves_a_partial_index(
        tmp_path: Path, small: None, point: str, at: int) -> None:
    (tmp_path / "remote").mkdir()
    a = machine(tmp_path, "a")
    fill(a)
    remote = FolderRemote(str(tmp_path / "remote"), tmp_path / "remote")
    sync_ops.sync(a, remote)
    machine(tmp_path, "b")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-c", KILLER, point, str(at), str(tmp_path)],
                          env=env, cwd=Path(__file__).parents[1], capture_output=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    b = Vault(machine(tmp_path, "b").settings)
    held = set(sync_ops.scan_local(b))
    assert 0 < len(held) < 41 or point == "mark"
    index = b.search_index(b.state().key_version)
    if index.is_current():  # a stamp says it holds what the files hold, no more, no less
        assert index.matching(index.build_query("", Filters(limit=100))[0]) == held
    # A search finds what the files hold (an index without its stamp is built again).
    found = {h.memory_id for h in search(b, "session turn", Filters(limit=100)).results}
    assert found == {i for i, c in contents(b).items() if "session" in c}
    sync_ops.sync(b, remote)
    assert contents(a) == contents(b) and verify(b).ok
    b = Vault(b.settings)
    index = b.search_index(b.state().key_version)
    assert index.is_current()
    assert index.matching(index.build_query("", Filters(limit=100))[0]) == set(contents(a))
    for asked in ("session 1 turn 3", "fact 2", "turn 11"):  # every match, both machines
        assert {h.memory_id for h in search(b, asked, Filters(limit=100)).results} == \
            {h.memory_id for h in search(a, asked, Filters(limit=100)).results}


def test_a_write_between_two_batches_of_a_pull_is_indexed(
        tmp_path: Path, small: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process writes while a pull holds its index writer between batches: its
    record is stored (its index change waits for no one) and found after the pull."""
    (tmp_path / "remote").mkdir()
    a, b = machine(tmp_path, "a"), machine(tmp_path, "b")
    fill(a)
    remote = FolderRemote(str(tmp_path / "remote"), tmp_path / "remote")
    sync_ops.sync(a, remote)
    stored = sync_ops._add_records
    done: list[str] = []

    def between(vault: Vault, items: list[Any], *held: Any) -> int:
        if len(done) == 2:  # after the second batch: a hook's add, in another vault object
            done.append(add(Vault(vault.settings), "an okapi seen between batches",
                            "fact").record.memory_id)
        done.append("batch")
        return stored(vault, items, *held)

    monkeypatch.setattr(sync_ops, "_add_records", between)
    assert sync_ops.sync(b, remote).pulled == 41
    b = Vault(b.settings)
    hits = search(b, "okapi", Filters(limit=5)).results
    assert [h.memory_id for h in hits] == [done[2]]
    assert len(search(b, "session turn", Filters(limit=100)).results) == 36
    assert verify(b).ok


def test_a_large_pull_names_a_bounded_number_of_ids_and_every_record_gets_its_vector(
        tmp_path: Path, small: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a pull stored waits for its vector; the process keeps no list of every id it
    wrote (a million ids), only a bounded one and that there were more, and the embedder
    then finds every record that waits, not only those named."""
    from memvault.embed.builtin import load
    from memvault.ops import embed
    from memvault.vault.vault import Written

    monkeypatch.setattr(Written, "LIMIT", 10)
    (tmp_path / "remote").mkdir()
    a, b = machine(tmp_path, "a"), machine(tmp_path, "b")
    fill(a)
    sync_ops.sync(a, FolderRemote(str(tmp_path / "remote"), tmp_path / "remote"))
    assert sync_ops.sync(b, FolderRemote(str(tmp_path / "remote"),
                                         tmp_path / "remote")).pulled == 41
    assert len(b.written) == 10 and b.written.more
    assert embed.pending_count(b) == 41
    assert embed.embed_new(b, load(), b.written) == 41
    assert embed.pending_count(b) == 0


def big_cache() -> sync_ops.Cache:
    from memvault.model.ids import IdList, IdSet
    from memvault.model.records import uuid7

    # Ids of another form than mem's own (a hand-made vault, an import's) among them.
    ids = [uuid7() if n % 5000 else f"other-{n}" for n in range(150_000)]
    return sync_ops.Cache(
        objects={f"ns/o/k-{n}": {"kind": "add", "at": "t",
                                 "ids": IdList.of(ids[n * 2000:(n + 1) * 2000]),
                                 "archived": IdList.of(ids[n * 2000:n * 2000 + 3]),
                                 "v": {}} for n in range(75)},
        local=IdSet(ids), epoch=1, keys={"k"}, last_sync="t", remote="/r",
        files={f"sessions/s{n}.jsonl": [1, 2, IdList.of(ids[n * 100:(n + 1) * 100])]
               for n in range(1500)})


def test_the_cache_is_written_as_a_stream_and_read_back_whole(tmp_path: Path) -> None:
    """A million records' cache is over 100 MB: writing it never holds it whole (nor
    twice, with its MAC), and what is read back is what was written."""
    import tracemalloc

    cache, path, kek = big_cache(), tmp_path / "c.json", b"k" * 32
    tracemalloc.start()
    try:
        sync_ops.save_cache(path, kek, cache)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < path.stat().st_size / 4
    back = sync_ops.load_cache(path, kek)
    assert (back.objects, set(back.local), back.files, back.keys, back.epoch) == (
        cache.objects, cache.local, cache.files, cache.keys, cache.epoch)


def test_a_cache_cut_short_edited_or_of_the_format_before_reads_as_none(
        tmp_path: Path) -> None:
    import orjson

    from memvault.crypto import syncseal

    cache, path, kek = big_cache(), tmp_path / "c.json", b"k" * 32
    sync_ops.save_cache(path, kek, cache)
    whole = path.read_bytes()
    lines = whole.splitlines(keepends=True)
    assert len(sync_ops.load_cache(path, kek).local) == 150_000
    for damaged in (b"".join(lines[:-1]),  # no MAC
                    b"".join([*lines[:-2], lines[-1]]),  # a line of ids lost
                    whole.replace(b'"frozen":false', b'"frozen":true'),
                    b"".join([lines[0], lines[2], lines[1], *lines[3:]])):  # reordered
        path.write_bytes(damaged)
        assert sync_ops.load_cache(path, kek) == sync_ops.Cache()
    # The format before: one JSON document after its MAC line.
    body = orjson.dumps({"format": 2, "objects": {}, "local": ["x"], "epoch": 1,
                         "keys": [], "frozen": False, "files": {}, "entries": {}})
    path.write_bytes(syncseal.cache_mac(kek, body).encode() + b"\n" + body)
    assert sync_ops.load_cache(path, kek) == sync_ops.Cache()
    path.write_bytes(whole)
    assert sync_ops.load_cache(path, b"x" * 32) == sync_ops.Cache()  # another key


class Asked(FolderRemote):
    """A folder remote read by four workers, as S3 is, that notes each object asked."""

    workers = 4

    def __init__(self, root: Path) -> None:
        super().__init__(str(root), root)
        self.asked: list[str] = []

    def get(self, name: str) -> bytes:
        self.asked.append(name)
        return super().get(name)


def test_a_pull_lets_each_sealed_page_go_once_its_records_are_taken(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small: None) -> None:
    """The pages kept sealed from the first read shrink as their records are stored (a
    second machine's peak is not all of them held to the end), and none is fetched
    twice."""
    (tmp_path / "remote").mkdir()
    a = machine(tmp_path, "a")
    fill(a)
    sync_ops.sync(a, FolderRemote(str(tmp_path / "remote"), tmp_path / "remote"))
    held: list[int] = []
    get = sync_ops.Fetched.get

    def noted(self: sync_ops.Fetched, name: str, **last: Any) -> Any:
        body = get(self, name, **last)
        if body is not None and body["kind"] == "add":
            held.append(self.sealed_bytes)
        return body

    monkeypatch.setattr(sync_ops.Fetched, "get", noted)
    remote = Counting(tmp_path / "remote")
    b = machine(tmp_path, "b")
    assert sync_ops.sync(b, remote).pulled == len(contents(a))
    assert len(held) > 3
    assert held == sorted(held, reverse=True) and held[0] > held[-1] == 0
    assert len(remote.fetched) == len(set(remote.fetched))


def test_objects_are_fetched_ahead_while_each_is_opened(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While the caller opens one object, the next ones are on their way: the workers
    never wait for the caller to finish a round before they fetch again."""
    import time

    monkeypatch.setattr(sync_ops, "PAGE", 2)
    (tmp_path / "remote").mkdir()
    a = machine(tmp_path, "a")
    fill(a)
    sync_ops.sync(a, FolderRemote(str(tmp_path / "remote"), tmp_path / "remote"))
    remote = Asked(tmp_path / "remote")
    b = machine(tmp_path, "b")
    with sync_ops.Session(b, remote) as s:
        kids, names = s.listing()
        s.check_keys(kids)
        objects = [n for n in names if "/o/" in n]
        assert len(objects) > 2 * 2 * remote.workers
        remote.asked.clear()
        for at, (_, body, _, _) in enumerate(s.fetch_new(objects)):
            assert body is not None
            ahead = min(len(objects), at + 1 + 2 * remote.workers)
            waited = 0.0
            while len(remote.asked) < ahead and waited < 5:
                time.sleep(0.01)
                waited += 0.01
            assert len(remote.asked) >= ahead, (at, len(remote.asked))


def test_doctor_reads_the_last_sync_and_what_waits_from_the_cache(tmp_path: Path) -> None:
    (tmp_path / "remote").mkdir()
    a = machine(tmp_path, "a")
    fill(a)
    sync_ops.sync(a, FolderRemote(str(tmp_path / "remote"), tmp_path / "remote"))
    last = sync_ops.last_sync(a)
    assert last is not None and last["remote"] == str(tmp_path / "remote")
    assert sync_ops.waiting(a) == 0
    add(a, "one more fact", "fact")
    add(a, "and another", "fact")
    assert sync_ops.waiting(a) == 2


# --- a batch's files durable before its audit entry and its commit -------------------

def batch_events(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    """What a pull does that orders its durability, as it does it: each new line file
    written, each filesystem sync (and whether it was made), each file fsynced by name,
    each audit entry and each index commit."""
    from memvault.index import keyed
    from memvault.storage import fsio
    from memvault.vault.vault import Transaction

    events: list[tuple[str, Any]] = []
    write_new, whole, fsync_file = sync_ops._write_new, fsio.FilesystemSync.__call__, \
        fsio.fsync_file
    audit, commit = Transaction.audit, keyed.IndexWriter.commit

    def written(files: list[tuple[Path, bytes]]) -> None:
        write_new(files)
        events.extend(("new", path) for path, _ in files)

    def synced(self: fsio.FilesystemSync, *folders: Path) -> bool:
        made = whole(self, *folders)
        events.append(("syncfs", made))
        return made

    def fsynced(path: Path) -> None:
        fsync_file(path)
        events.append(("fsync", path))

    def audited(self: Transaction, op: str, *args: Any, **kwargs: Any) -> str:
        events.append(("audit", op))
        return audit(self, op, *args, **kwargs)

    def committed(self: keyed.IndexWriter) -> None:
        events.append(("commit", None))
        commit(self)

    monkeypatch.setattr(sync_ops, "_write_new", written)
    monkeypatch.setattr(fsio.FilesystemSync, "__call__", synced)
    monkeypatch.setattr(fsio, "fsync_file", fsynced)
    monkeypatch.setattr(Transaction, "audit", audited)
    monkeypatch.setattr(keyed.IndexWriter, "commit", committed)
    return events


def pulled_in_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                      ) -> tuple[Vault, Vault, list[list[tuple[str, Any]]]]:
    """Machine a filled and synced, then b's pull: what b did, cut after each batch's
    audit entry (and the index commit that follows it)."""
    (tmp_path / "remote").mkdir()
    a, b = machine(tmp_path, "a"), machine(tmp_path, "b")
    fill(a)
    remote = FolderRemote(str(tmp_path / "remote"), tmp_path / "remote")
    sync_ops.sync(a, remote)
    events = batch_events(monkeypatch)
    assert sync_ops.sync(b, remote).pulled == 41
    batches: list[list[tuple[str, Any]]] = [[]]
    for event in events:
        batches[-1].append(event)
        if event == ("audit", "sync.pull"):
            batches.append([])
    return a, b, batches[:-1]


def test_a_pull_batch_syncs_its_new_files_once_before_its_audit_entry_and_commit(
        tmp_path: Path, small: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the filesystem can be synced whole (Linux 5.8 on), each batch's new line
    files are written, then one sync covers them all, then the audit entry that says the
    records are in, then the index commit: no file is fsynced one by one."""
    from memvault.storage import fsio

    if fsio._syncfs() is None:
        pytest.skip("no syncfs here (not Linux 5.8 or later)")
    a, b, batches = pulled_in_batches(tmp_path, monkeypatch)
    assert len(batches) > 2
    made: list[Path] = []
    for batch in batches:
        kinds = [kind for kind, _ in batch]
        assert kinds.count("syncfs") <= 1 and "fsync" not in kinds
        new = [path for kind, path in batch if kind == "new"]
        if new:
            # every new file before the one sync, which was made, before the audit entry
            assert kinds[kinds.index("syncfs") - 1] == "new"
            assert kinds[kinds.index("syncfs"):] == ["syncfs", "audit"]
            assert ("syncfs", True) in batch
        made += new
        assert batch[-1] == ("audit", "sync.pull")
    # and each batch's commit after its audit entry: the next batch's events open with it
    assert all(batch[0] == ("commit", None) for batch in batches[1:])
    assert sorted(made) == sorted(b.layout.path(rel) for rel in b.layout.line_files())
    assert contents(a) == contents(b) and verify(b).ok


def test_a_pull_batch_fsyncs_each_new_file_when_the_filesystem_sync_fails(
        tmp_path: Path, small: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A syncfs that fails (or is missing) leaves the batch durable as before: each new
    file fsynced, all of them before the audit entry."""
    from memvault.storage import fsio

    monkeypatch.setattr(fsio, "_syncfs", lambda: lambda fd: -1)  # the call fails (EIO...)
    a, b, batches = pulled_in_batches(tmp_path, monkeypatch)
    fsynced: list[Path] = []
    for batch in batches:
        new = [path for kind, path in batch if kind == "new"]
        synced = [path for kind, path in batch if kind == "fsync"]
        assert sorted(synced) == sorted(new)
        if new:
            kinds = [kind for kind, _ in batch]
            assert ("syncfs", False) in batch
            at = kinds.index("syncfs")
            assert "fsync" not in kinds[:at]  # none before every file is written
            assert kinds[at:] == ["syncfs", *["fsync"] * len(new), "audit"]
        fsynced += synced
    assert len(fsynced) == len(b.layout.line_files())
    assert contents(a) == contents(b) and verify(b).ok


def test_a_filesystem_sync_covers_only_folders_on_its_filesystem(tmp_path: Path) -> None:
    from memvault.storage import fsio

    if fsio._syncfs() is None:
        pytest.skip("no syncfs here (not Linux 5.8 or later)")
    other = Path("/dev/shm")
    whole = fsio.FilesystemSync(tmp_path)
    try:
        assert whole(tmp_path)
        if other.is_dir() and other.stat().st_dev != tmp_path.stat().st_dev:
            assert not whole(tmp_path, other)  # the caller fsyncs file by file
    finally:
        whole.close()
