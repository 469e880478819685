"""The user's rights (SPEC §6, §10): forget, export, import, destroy, freeze, audit, verify
and key rotation. Every "absent" check is paired with a control that finds the same thing
before the operation, so that a check that cannot see anything cannot pass by accident."""

from __future__ import annotations

import io
import itertools
import json
import shutil
import stat
import string
import time
from pathlib import Path
from typing import Any

import pytest
import tantivy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pytest_console_scripts import ScriptRunner

from memvault.crypto.envelope import content_hash, file_key_version
from memvault.errors import DataError, NotFound, StorageError, UsageError
from memvault.index.keyed import SearchIndex
from memvault.model.location import Location, session_file
from memvault.model.records import (
    CLAUDE_MD,
    PREFERENCES,
    TYPES,
    Filters,
    NewMessage,
    Record,
    now_iso,
    uuid7,
)
from memvault.model.results import ForgetPlan
from memvault.ops import admin, forget, ingest, keys, portability, prefs, recall, remember
from memvault.ops import verify as verify_ops
from memvault.ops.recall import search
from memvault.storage.audit import AuditLog
from memvault.storage.userstore import UserStore
from memvault.vault.vault import Vault
from tests.conftest import examples, mem, open_as

CANARY = "quokkacanary"
TAG_CANARY = "canarytag"
AWS_KEY = "AKIA" + "Q3EGXZ7TB4NVK2PW"  # the shape of an AWS access key id (a critical secret)


# --- helpers ------------------------------------------------------------------------------


def mem_json(script_runner: ScriptRunner, *args: str, code: int = 0) -> Any:
    result = mem(script_runner, *args, "--json")
    assert result.returncode == code, result.stderr
    return json.loads(result.stdout)


def user_dir(vault_dir: Path, user: str = "alice") -> Path:
    return vault_dir / "default" / user


def files_of(directory: Path, skip_audit: bool = False) -> dict[str, bytes]:
    """Every file under a directory, by relative path. With skip_audit, the audit log and
    reads.json (reads note themselves there) and the derived index are left out."""
    out = {}
    for path in sorted(directory.rglob("*")):
        rel = path.relative_to(directory).as_posix()
        if not path.is_file():
            continue
        if skip_audit and (rel in ("audit.jsonl", "reads.json") or rel.startswith("index/")):
            continue
        out[rel] = path.read_bytes()
    return out


def fresh(user: str = "alice") -> Vault:
    """A new Vault object (nothing cached), like a new `mem` process."""
    return open_as(user)


def records_of(v: Vault, include_archive: bool = False) -> list[Record]:
    """Every record of a user (decrypted from the files, archived ones only when asked),
    with its supersede link."""
    state = v.state()
    return [v.linked(r, state) for r in v.store.records(include_archive)]


def epoch_of(v: Vault) -> int:
    return v.state().key_version


def index_of(v: Vault) -> SearchIndex:
    return v.search_index(epoch_of(v))


def message(session: str, text: str, **fields: Any) -> Record:
    stamp = fields.pop("created_at", now_iso())
    return Record(memory_id=uuid7(), org_id="default", user_id=fields.pop("user", "alice"),
                  type="message", content=text, content_hash=content_hash(text),
                  category="conversation", session_id=session, role="user",
                  created_at=stamp, updated_at=stamp, **fields)


def add_archived(v: Vault, session: str, texts: list[str],
                 tags: list[str] | None = None) -> list[Record]:
    """Archive lines, as compaction writes them (counted in the user's state, then the
    index is rebuilt, as it would be)."""
    with v.transaction() as tx:
        records = [message(session, t, user=v.settings.user, tags=list(tags or []),
                           key_version=tx.epoch) for t in texts]
        tx.append(session_file(session, archived=True), records)
        tx.state.count("message", len(records), archived=True)
        tx.touch()
        tx.rebuild_indexes()
    return records


def set_compacted_from(v: Vault, summary_id: str, sources: list[str]) -> None:
    with v.transaction() as tx:
        doc = tx.store.read_doc(CLAUDE_MD)
        assert doc is not None
        (entry,) = [r for r in doc["records"] if r["memory_id"] == summary_id]
        entry["compacted_from"] = sources
        tx.write_doc(CLAUDE_MD, doc)
        tx.rebuild_indexes()


def plaintexts(vault_dir: Path) -> dict[str, str]:
    """Every file in the vault as plaintext: each user's encrypted files decrypted with the
    store API (whole files and every line), everything else as its raw bytes."""
    out: dict[str, str] = {}
    for path in sorted(vault_dir.rglob("*")):
        if not path.is_file():
            continue
        rel = path.relative_to(vault_dir).as_posix()
        parts = rel.split("/")
        inner = "/".join(parts[2:])
        if len(parts) >= 3 and (inner in (CLAUDE_MD, PREFERENCES) or (
                parts[2] in ("sessions", "archive") and inner.endswith(".jsonl"))):
            store = open_as(parts[1], parts[0]).store
            if inner in (CLAUDE_MD, PREFERENCES):
                out[rel] = json.dumps(store.read_doc(inner), ensure_ascii=False)
            else:
                scan = store.scan_lines(inner)
                assert scan.problems == [], (rel, scan.problems)
                assert len(scan.records) == path.read_bytes().count(b"\n")
                out[rel] = "\n".join(json.dumps(r.stored(), ensure_ascii=False)
                                     for r in scan.records)
        else:
            out[rel] = path.read_bytes().decode("latin-1")
    return out


def holding(vault_dir: Path, needle: str) -> list[str]:
    return [rel for rel, text in plaintexts(vault_dir).items() if needle in text.lower()]


def index_terms(v: Vault, field: str) -> set[str]:
    """The term dictionary of a field, read with Tantivy itself (deleted documents' terms
    included, until a merge or a rebuild)."""
    searcher = tantivy.Index.open(str(v.layout.index_dir)).searcher()
    return {t for t, _ in searcher.terms_with_prefix(field, "")}


def doc_freq(v: Vault, field: str, term: str) -> int:
    return int(tantivy.Index.open(str(v.layout.index_dir)).searcher().doc_freq(field, term))


def indexed_ids(v: Vault) -> set[str]:
    searcher = tantivy.Index.open(str(v.layout.index_dir)).searcher()
    n = max(int(searcher.num_docs), 1)
    return {searcher.doc(a).to_dict()["id"][0]
            for _, a in searcher.search(tantivy.Query.all_query(), n).hits}


def found(v: Vault, query: str, include_archive: bool = True) -> list[str]:
    """What a search finds (messages are found by their neighbours' words too)."""
    result = search(v, query, Filters(limit=100, include_archive=include_archive))
    return sorted(hit.content for hit in result.results)


def matching(v: Vault, word: str, include_archive: bool = True) -> list[str]:
    """What a search finds that holds the word itself."""
    return [c for c in found(v, word, include_archive) if word.lower() in c.lower()]


def snapshot(user: str = "alice") -> tuple[list[tuple[str, str, str, bool]], dict[str, str]]:
    """What a user would lose: every record (archived included) and every preference."""
    v = fresh(user)
    records = sorted((r.memory_id, r.type, r.content, r.archived)
                     for r in records_of(v, include_archive=True))
    return records, {k: p["value"] for k, p in prefs.read(v).items()}


def line_key_versions(store: UserStore) -> set[int]:
    out = set()
    for rel in store.layout.line_files() + store.layout.line_files(archived=True):
        for raw in store.layout.path(rel).read_bytes().splitlines():
            out.add(json.loads(raw)["kv"])
    return out


def doc_key_versions(store: UserStore) -> set[int]:
    return {file_key_version(store.layout.path(rel).read_bytes())
            for rel in (CLAUDE_MD, PREFERENCES) if store.layout.path(rel).exists()}


def verified(v: Vault) -> dict[str, Any]:
    return verify_ops.verify(v).to_dict()


def export_doc(v: Vault, categories: list[str] | None = None) -> dict[str, Any]:
    """An export, as the JSON document the user gets."""
    buf = io.StringIO()
    portability.export(v, buf, "json", categories)
    doc: dict[str, Any] = json.loads(buf.getvalue())
    return doc


def import_doc(v: Vault, raw: str) -> dict[str, Any]:
    return portability.import_text(v, raw).to_dict()


def populate(v: Vault) -> dict[str, str]:
    """A user with something in every kind of file; returns a few of the ids."""
    ids = {
        "fact": remember.add(v, "Lives in Lisbon near the river", "fact",
                             tags=["home"]).record.memory_id,
        "pattern": remember.add(v, "Reviews pull requests every morning",
                                "pattern").record.memory_id,
        "pref": remember.add(v, "Prefers green tea over coffee", "preference",
                             tags=["drink"]).record.memory_id,
        "instruction": remember.add(v, "Always answer in British English",
                                    "instruction").record.memory_id,
    }
    old = remember.add(v, "Works at Initech as a tester", "fact").record.memory_id
    ids["superseded"] = old
    ids["new"] = remember.add(v, "Works at Globex as an engineer", "fact",
                              supersedes=old).record.memory_id
    ingest.add_messages(v, "s1", [NewMessage("Can you book the ferry to Porto", "user", "m1"),
                                  NewMessage("The ferry leaves at nine", "assistant", "m2"),
                                  NewMessage("Great, book a window seat", "user", "m3")])
    ingest.add_messages(v, "s2", [NewMessage("Which violin strings did we order", "user", "x1"),
                                  NewMessage("Gut strings from the Vienna shop", "assistant",
                                             "x2")])
    ids["archived"] = add_archived(v, "old1", ["An archived note about tulips",
                                               "Another archived note about dahlias"])[0].memory_id
    prefs.set_(v, "editor", "vim")
    prefs.set_(v, "theme", "solarized dark")
    return ids

# --- forget: selection ----------------------------------------------------------------------


def test_select_by_each_criterion_and_their_combination(vault: Vault) -> None:
    fact = v_id(remember.add(vault, "Plays the violin on weekends", "fact",
                             tags=["music", "hobby"]))
    tea = v_id(remember.add(vault, "Prefers green tea", "preference", tags=["drink"]))
    ingest.add_messages(vault, "s1", [
        NewMessage("We talked about the violin recital", "user", "a1", "2020-01-01T10:00:00Z",
                   tags=["music"]),
        NewMessage("The recital is in March", "assistant", "a2", "2020-01-01T10:01:00Z"),
    ])
    ingest.add_messages(vault, "s2", [NewMessage("Buy new violin strings", "user", "b1",
                                                 "2021-06-01T10:00:00Z")])
    by_msg = {r.message_id: r.memory_id for r in records_of(vault) if r.message_id}

    def chosen(ids: list[str] | None = None, session: str | None = None,
               before: str | None = None, tag: str | None = None,
               query: str | None = None) -> set[str]:
        from memvault.model.records import parse_time

        return {r.memory_id for r in forget.select(
            vault, ids or [], session, parse_time(before) if before else None, tag,
            query).targets}

    assert chosen(ids=[fact, tea]) == {fact, tea}
    assert chosen(ids=[fact, fact]) == {fact}
    assert chosen(session="s1") == {by_msg["a1"], by_msg["a2"]}
    assert chosen(before="2021-01-01") == {by_msg["a1"], by_msg["a2"]}
    assert chosen(before="2022-01-01") == {by_msg["a1"], by_msg["a2"], by_msg["b1"]}
    assert chosen(tag="music") == {fact, by_msg["a1"]}
    # A search finds a message by its neighbours' words too (a2 is next to a1); forget
    # --query takes only the records holding the word themselves.
    assert chosen(query="violin") == {fact, by_msg["a1"], by_msg["b1"]}
    # Every criterion given must match.
    assert chosen(query="recital", session="s1") == {by_msg["a1"], by_msg["a2"]}
    assert chosen(query="recital", before="2020-01-01T10:00:30Z") == {by_msg["a1"]}
    assert chosen(query="violin", session="s2") == {by_msg["b1"]}
    assert chosen(tag="music", before="2021-01-01") == {by_msg["a1"]}
    assert chosen(ids=[fact, tea], tag="drink") == {tea}
    assert chosen(session="nosuch") == set()
    with pytest.raises(NotFound):
        forget.select(vault, [fact, str(uuid7())], None, None, None, None)
    with pytest.raises(UsageError):
        forget.select(vault, [], None, None, None, None)


@pytest.mark.parametrize("query", ["?", "...", '""', "--"])
def test_a_query_with_no_words_selects_nothing_rather_than_everything(
        vault: Vault, query: str) -> None:
    """A search for no words lists the most recent items; as a forget selector that would
    be "everything", which nobody asking to forget "?" means."""
    remember.add(vault, "Plays the violin", "fact")
    remember.add(vault, "Prefers green tea", "preference")
    with pytest.raises(UsageError):
        forget.select(vault, [], None, None, None, query)
    assert len(records_of(vault)) == 2


@pytest.mark.slow
@pytest.mark.long
def test_a_query_selects_every_match_however_many(vault: Vault) -> None:
    """"Everything a search finds", not the first page of it (it was capped at 10,000)."""
    ingest.add_messages(vault, "s1", [NewMessage(f"walrus sighting {i}", "user", f"m{i}")
                                      for i in range(10_050)])
    remember.add(vault, "Plays the violin", "fact")
    plan = forget.select(vault, [], None, None, None, "walrus")
    assert len(plan.targets) == 10_050
    forget.forget(vault, plan)
    assert [r.content for r in records_of(fresh(), include_archive=True)] == ["Plays the violin"]


def v_id(result: Any) -> str:
    return str(result.record.memory_id)


# --- forget: the command ----------------------------------------------------------------


def test_forget_by_id_prints_a_receipt_and_the_ids_are_gone(
        script_runner: ScriptRunner, vault: Vault, vault_dir: Path) -> None:
    ids = populate(vault)
    before = snapshot()
    gone = [ids["fact"], ids["archived"]]
    receipt = mem_json(script_runner, "forget", *gone)
    assert {"deleted_count", "memory_ids", "audit_id", "files_rewritten"} <= set(receipt)
    assert receipt["deleted_count"] == 2 and receipt["memory_ids"] == sorted(gone)
    assert set(receipt["files_rewritten"]) == {CLAUDE_MD, "archive/old1.jsonl"}
    for memory_id in gone:
        shown = mem(script_runner, "show", memory_id, "--json")
        assert shown.returncode == 66 and shown.stdout == ""
    after = snapshot()
    assert after[0] == [r for r in before[0] if r[0] not in gone] and after[1] == before[1]
    # The audit entry names the ids, and holds no content.
    entries = mem_json(script_runner, "audit")["entries"]
    (entry,) = [e for e in entries if e["audit_id"] == receipt["audit_id"]]
    assert entry["op"] == "forget" and sorted(entry["ids"]) == sorted(gone)
    assert len(entry["hashes"]) == 2
    log = (user_dir(vault_dir) / "audit.jsonl").read_text().lower()
    assert "lisbon" not in log and "tulips" not in log
    assert mem(script_runner, "verify").returncode == 0


def test_forget_an_unknown_id_is_not_found_and_deletes_nothing(
        script_runner: ScriptRunner, vault: Vault, vault_dir: Path) -> None:
    ids = populate(vault)
    files = files_of(user_dir(vault_dir), skip_audit=True)
    result = mem(script_runner, "forget", ids["fact"], str(uuid7()), "--yes", "--json")
    assert result.returncode == 66 and result.stdout == ""
    assert "Traceback" not in result.stderr
    assert files_of(user_dir(vault_dir), skip_audit=True) == files
    assert mem(script_runner, "forget", "--session", "nosuch").returncode == 66
    assert mem(script_runner, "forget").returncode == 2  # nothing named
    assert files_of(user_dir(vault_dir), skip_audit=True) == files


def test_forget_query_asks_first_and_deletes_only_with_yes(
        script_runner: ScriptRunner, vault: Vault, vault_dir: Path) -> None:
    populate(vault)
    files = files_of(user_dir(vault_dir), skip_audit=True)
    strings = {r.memory_id for r in records_of(vault) if "strings" in r.content}
    assert len(strings) == 2

    # Erasure takes what a search for the query finds: any of its words.
    both = mem(script_runner, "forget", "--query", "violin strings", "--dry-run", "--json")
    found = mem_json(script_runner, "search", "violin strings", "--limit", "100")
    assert set(json.loads(both.stdout)["memory_ids"]) == \
        {r["memory_id"] for r in found["results"]} == strings

    # No --yes and no terminal to ask on: show the matches, refuse, delete nothing.
    asked = mem(script_runner, "forget", "--query", "strings", "--json")
    assert asked.returncode == 77, asked.stderr
    preview = json.loads(asked.stdout)
    assert preview["dry_run"] is True and set(preview["memory_ids"]) == strings
    table = mem(script_runner, "forget", "--query", "strings")
    assert table.returncode == 77 and "Vienna" in table.stdout
    assert files_of(user_dir(vault_dir), skip_audit=True) == files

    # --dry-run lists the ids and deletes nothing, even with --yes.
    dry = mem(script_runner, "forget", "--query", "strings", "--dry-run", "--yes",
              "--json")
    assert dry.returncode == 0
    assert set(json.loads(dry.stdout)["memory_ids"]) == strings
    dry_tag = mem_json(script_runner, "forget", "--tag", "home", "--dry-run")
    assert dry_tag["would_delete"] == 1
    assert files_of(user_dir(vault_dir), skip_audit=True) == files

    receipt = mem_json(script_runner, "forget", "--query", "strings", "--yes")
    assert set(receipt["memory_ids"]) == strings
    assert not strings & {r.memory_id for r in records_of(fresh(), include_archive=True)}

    nothing = mem(script_runner, "forget", "--query", "?", "--yes")
    assert nothing.returncode == 2, nothing.stderr
    assert len(records_of(fresh(), include_archive=True)) == 11


def test_forget_query_forgets_what_the_search_finds_and_shows_it_first(
        script_runner: ScriptRunner, vault: Vault) -> None:
    for text in ("My sister lives in Lisbon", "Lisbon trip planned for June",
                 "My sister likes chess", "Plays the violin"):
        mem_json(script_runner, "add", text)
    found = mem_json(script_runner, "search", "sister Lisbon")["results"]
    assert len(found) == 3
    preview = mem(script_runner, "forget", "--query", "sister Lisbon")
    assert preview.returncode == 77
    for text in ("My sister lives in Lisbon", "Lisbon trip planned", "My sister likes chess"):
        assert text in preview.stdout
    assert "violin" not in preview.stdout
    receipt = mem_json(script_runner, "forget", "--query", "sister Lisbon", "-y")
    assert set(receipt["memory_ids"]) == {r["memory_id"] for r in found}
    assert mem_json(script_runner, "search", "sister Lisbon")["results"] == []
    assert [r["content"] for r in mem_json(script_runner, "list")["records"]] == \
        ["Plays the violin"]


VOCABULARY = ["sister", "lisbon", "chess", "june", "violin", "ferry", "tea"]
PHRASE = st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=4).map(" ".join)
CORPUS = st.fixed_dictionaries({
    "facts": st.lists(PHRASE, max_size=5),
    "messages": st.lists(st.tuples(st.sampled_from(["s1", "s2"]),
                                   st.sampled_from(["user", "assistant"]), PHRASE),
                         max_size=8),
    "archived": st.lists(PHRASE, max_size=3),
    "supersede": st.booleans(),
})
QUERY = st.one_of(st.lists(st.sampled_from([*VOCABULARY, "piano"]), min_size=1, max_size=2)
                  .map(" ".join),
                  st.tuples(st.sampled_from(VOCABULARY), st.sampled_from(VOCABULARY))
                  .map(lambda p: f'"{p[0]} {p[1]}"'))
EVERYTHING = Filters(limit=100_000, include_archive=True, include_superseded=True)


@settings(max_examples=examples(12), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@pytest.mark.slow
@given(corpus=CORPUS, query=QUERY)
def test_forget_query_forgets_exactly_what_the_preview_lists_and_search_finds(
        vault: Vault, corpus: dict[str, Any], query: str) -> None:
    v = open_as(f"q{next(_users)}")
    for text in corpus["facts"]:
        remember.add(v, text, "fact")
    for i, (session, role, text) in enumerate(corpus["messages"]):
        ingest.add_messages(v, session, [NewMessage(text, role, f"m{i}")])
    if corpus["archived"]:
        add_archived(v, "old", corpus["archived"])
    facts = [r for r in records_of(v) if r.type == "fact"]
    if corpus["supersede"] and facts:
        remember.add(v, "a newer fact", "fact", supersedes=facts[0].memory_id)
    before = {r.memory_id for r in records_of(v, include_archive=True)}
    found = {h.memory_id for h in search(v, query, EVERYTHING, mode="words").results}

    plan = forget.select(v, [], None, None, None, query)
    assert {r.memory_id for r in plan.targets} == found
    if found:
        result = forget.forget(v, plan)
        assert set(result.memory_ids) == found
    after = fresh_as(v)
    assert search(after, query, EVERYTHING, mode="words").results == ()
    assert {r.memory_id for r in records_of(after, include_archive=True)} == before - found


def fresh_as(v: Vault) -> Vault:
    return open_as(v.user)


def test_forget_takes_the_summaries_compacted_from_a_forgotten_record(vault: Vault) -> None:
    ingest.add_messages(vault, "s1", [
        NewMessage("The vault door code is hidden in the atlas", "user", "m1"),
        NewMessage("Noted", "assistant", "m2")])
    source = next(r for r in records_of(vault) if r.message_id == "m1")
    other = v_id(remember.add(vault, "Unrelated fact about tulips", "fact"))
    summary = v_id(remember.add(vault, "Summary: the code is in the atlas", "summary"))
    summary_of_summary = v_id(remember.add(vault, "Summary of summaries: atlas and code",
                                           "summary"))
    unrelated_summary = v_id(remember.add(vault, "Summary: tulips", "summary"))
    set_compacted_from(vault, summary, [source.memory_id])
    set_compacted_from(vault, summary_of_summary, [summary])
    set_compacted_from(vault, unrelated_summary, [other])

    plan = forget.select(vault, [source.memory_id], None, None, None, None)
    assert {r.memory_id for r in plan.targets} == {source.memory_id, summary,
                                                   summary_of_summary}
    receipt = forget.forget(vault, plan).to_dict()
    assert receipt["deleted_count"] == 3
    left = {r.memory_id for r in records_of(fresh(), include_archive=True)}
    assert {other, unrelated_summary} <= left
    assert not {source.memory_id, summary, summary_of_summary} & left
    assert "atlas" not in fresh_brief()


def fresh_brief() -> str:
    from memvault.ops.brief import build

    return build(fresh(), 50, 8000).brief.lower()


def test_forgotten_content_leaves_every_file_the_index_export_and_search(
        script_runner: ScriptRunner, vault: Vault, vault_dir: Path) -> None:
    """The canary is a message (its neighbours index it as context), a fact, an archive
    line and a summary compacted from the message (untagged: it goes because of its
    source). Before the forget every check finds it; after, none does."""
    remember.add(vault, "Lives in Lisbon", "fact")
    remember.add(vault, f"The {CANARY} badge opens the lab", "fact", tags=[TAG_CANARY])
    ingest.add_messages(vault, "s1", [
        NewMessage("We planned the trip to Porto", "user", "m1"),
        NewMessage(f"The {CANARY} code is in the drawer", "assistant", "m2",
                   tags=[TAG_CANARY]),
        NewMessage("Thanks, noted the drawer", "user", "m3"),
    ])
    add_archived(vault, "old1", [f"archived {CANARY} note"], tags=[TAG_CANARY])
    add_archived(vault, "old1", ["archived tulip note"])
    add_archived(vault, "old2", ["archived dahlia note"])
    source = next(r.memory_id for r in records_of(vault) if r.message_id == "m2")
    summary = v_id(remember.add(vault, f"Summary: the {CANARY} code", "summary"))
    set_compacted_from(vault, summary, [source])
    prefs.set_(vault, "editor", "vim")

    analyzer = index_of(fresh()).analyzer
    (stem,) = analyzer.tokens(CANARY)
    token, tag_token = analyzer.hash(stem), analyzer.opaque("tag", TAG_CANARY)

    def everywhere() -> dict[str, Any]:
        v = fresh()
        return {
            "files": holding(vault_dir, CANARY),
            "body": token in index_terms(v, "body"),
            "ctx": token in index_terms(v, "ctx"),
            "tag": tag_token in index_terms(v, "tag"),
            "freq": doc_freq(v, "body", token) + doc_freq(v, "ctx", token),
            "export": CANARY in mem(script_runner, "export").stdout.lower(),
            "markdown": CANARY in mem(script_runner, "export", "--format",
                                      "markdown").stdout.lower(),
            "search": found(v, CANARY),
            "holding": matching(v, CANARY),
            "cli search": CANARY in mem(script_runner, "search", CANARY, "--include-archive",
                                        "--json").stdout,
            "brief": CANARY in fresh_brief(),
        }

    control = everywhere()
    assert set(control["files"]) == {"default/alice/CLAUDE.md", "default/alice/sessions/s1.jsonl",
                                     "default/alice/archive/old1.jsonl"}
    assert control["body"] and control["ctx"] and control["tag"] and control["freq"] >= 4
    assert control["export"] and control["markdown"] and control["brief"]
    assert len(control["holding"]) == 4 and len(control["search"]) == 7  # 3 by context
    assert control["cli search"]

    receipt = mem_json(script_runner, "forget", "--tag", TAG_CANARY)
    assert receipt["deleted_count"] == 4
    assert set(receipt["files_rewritten"]) == {CLAUDE_MD, "sessions/s1.jsonl",
                                               "archive/old1.jsonl"}
    assert everywhere() == {"files": [], "body": False, "ctx": False, "tag": False,
                            "freq": 0, "export": False, "markdown": False, "search": [],
                            "holding": [],
                            "cli search": False, "brief": False}
    # Nothing else went, and the rest is still found, context included.
    v = fresh()
    assert sorted(r.content for r in records_of(v, include_archive=True)) == sorted([
        "Lives in Lisbon", "We planned the trip to Porto", "Thanks, noted the drawer",
        "archived tulip note", "archived dahlia note"])
    assert matching(v, "drawer") == ["Thanks, noted the drawer"]
    assert prefs.get(v, "editor").value == "vim"
    assert indexed_ids(v) == {r.memory_id for r in records_of(v, include_archive=True)}
    assert mem(script_runner, "verify").returncode == 0


def test_forget_now_retires_the_key_so_an_old_copy_cannot_be_decrypted(
        script_runner: ScriptRunner, vault: Vault, vault_dir: Path, tmp_path: Path) -> None:
    remember.add(vault, "Lives in Lisbon", "fact")
    remember.add(vault, f"The {CANARY} badge opens the lab", "fact")
    ingest.add_messages(vault, "s1", [NewMessage(f"The {CANARY} code is 4411", "user", "m1"),
                                      NewMessage("Noted", "assistant", "m2")])
    ingest.add_messages(vault, "s2", [NewMessage("Book the ferry", "user", "f1")])
    home = user_dir(vault_dir)
    backup = tmp_path / "backup"
    shutil.copytree(home, backup)  # a snapshot taken before the forget
    forgotten = [r.memory_id for r in records_of(vault) if CANARY in r.content]

    receipt = mem_json(script_runner, "forget", *forgotten, "--now")
    assert receipt["deleted_count"] == 2 and receipt["key_rotated"] is True
    v = fresh()
    assert epoch_of(v) == 2 and admin.stats(v).key_version == 2
    assert v.store.deks_on_disk() == [2] and not (home / "keys" / "1.dek").exists()
    assert line_key_versions(v.store) == {2} and doc_key_versions(v.store) == {2}
    assert sorted(r.content for r in records_of(v)) == ["Book the ferry", "Lives in Lisbon",
                                                       "Noted"]
    assert matching(v, "ferry") == ["Book the ferry"]
    assert holding(vault_dir, CANARY) == []

    # The old copies of the files, put back: under key version 1, which no longer exists.
    for rel in ("sessions/s1.jsonl", CLAUDE_MD):
        live = (home / rel).read_bytes()
        shutil.copyfile(backup / rel, home / rel)
        store = fresh().store
        with pytest.raises(DataError, match="1.dek is missing"):
            store.read_lines(rel) if rel.endswith(".jsonl") else store.read_doc(rel)
        for args in (["list", "--json"], ["export"], ["verify", "--json"]):
            result = mem(script_runner, *args)
            assert result.returncode == 65, (args, result.stderr)
            assert CANARY not in result.stdout + result.stderr
        (home / rel).write_bytes(live)
    assert mem(script_runner, "verify").returncode == 0


# --- export ------------------------------------------------------------------------------


def test_export_is_complete_and_in_the_seed_shape(
        script_runner: ScriptRunner, vault: Vault) -> None:
    ids = populate(vault)
    doc = json.loads(mem(script_runner, "export").stdout)
    assert set(doc) == {"export_version", "org_id", "user_id", "exported_at", "record_count",
                        "categories", "preferences"}
    assert doc["export_version"] == "1.0" and doc["org_id"] == "default"
    assert doc["user_id"] == "alice" and doc["exported_at"].endswith("Z")
    assert set(doc["categories"]) == {"conversation", "work_pattern", "preference",
                                      "learned_context"}
    by_id: dict[str, dict[str, Any]] = {}
    for category, group in doc["categories"].items():
        assert set(group) == {"count", "records"} and group["count"] == len(group["records"])
        for r in group["records"]:
            assert r["category"] == category
            assert {"memory_id", "type", "content", "session_id", "message_id", "tags",
                    "created_at", "content_hash"} <= set(r)
            assert r["content_hash"] == content_hash(r["content"])
            by_id[r["memory_id"]] = r
    assert doc["record_count"] == len(by_id) == 13
    stored = {r.memory_id: r for r in records_of(vault, include_archive=True)}
    assert set(by_id) == set(stored)
    for memory_id, r in stored.items():
        assert by_id[memory_id]["content"] == r.content
    assert by_id[ids["archived"]]["archived"] is True
    assert sum(1 for r in by_id.values() if r.get("archived")) == 2
    assert by_id[ids["superseded"]]["superseded_by"] == ids["new"]
    assert by_id[ids["fact"]]["archived"] is False
    assert doc["preferences"] == {"editor": "vim", "theme": "solarized dark"}
    assert doc["categories"]["conversation"]["count"] == 7

    only = json.loads(mem(script_runner, "export", "--category", "conversation",
                          "-c", "work_pattern").stdout)
    assert set(only["categories"]) == {"conversation", "work_pattern"}
    assert only["record_count"] == 8 and only["preferences"] == {}
    prefs = json.loads(mem(script_runner, "export", "-c", "preference").stdout)
    assert prefs["record_count"] == 2 and prefs["preferences"] == doc["preferences"]
    assert mem(script_runner, "export", "-c", "opinions").returncode == 2


def test_export_to_a_file_is_private_and_markdown_holds_every_record(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path) -> None:
    populate(vault)
    out = tmp_path / "alice-export.json"
    result = mem(script_runner, "export", "--output", str(out))
    assert result.returncode == 0 and result.stdout == ""
    assert "13 records" in result.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    written = json.loads(out.read_text())
    stdout = json.loads(mem(script_runner, "export", "--output", "-").stdout)
    written.pop("exported_at"), stdout.pop("exported_at")
    assert written == stdout

    md = mem(script_runner, "export", "--format", "markdown")
    assert md.returncode == 0 and md.stdout.startswith("# Memory of default/alice")
    for r in records_of(vault, include_archive=True):
        assert r.content in md.stdout, r.content
    assert "archived" in md.stdout and "superseded" in md.stdout
    assert "`theme`: solarized dark" in md.stdout
    md_file = tmp_path / "alice.md"
    assert mem(script_runner, "export", "--format", "markdown", "-o",
               str(md_file)).stdout == ""
    written_md = md_file.read_text().splitlines()
    assert written_md[:2] == md.stdout.splitlines()[:2]  # line 2 holds exported_at
    assert written_md[3:] == md.stdout.splitlines()[3:]
    assert stat.S_IMODE(md_file.stat().st_mode) == 0o600
    assert mem(script_runner, "export", "--format", "yaml").returncode == 2
    assert mem(script_runner, "export", "-o", str(tmp_path / "no" / "dir.json")).returncode == 66


# --- import ------------------------------------------------------------------------------


def comparable(doc: dict[str, Any]) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """An export's records by id, without what names the owner, and its preferences."""
    records = {}
    for category, group in doc["categories"].items():
        assert group["count"] == len(group["records"])
        for r in group["records"]:
            assert r["category"] == category
            records[r["memory_id"]] = {k: v for k, v in r.items()
                                       if k not in ("org_id", "user_id", "key_version")}
    assert doc["record_count"] == len(records)
    return records, doc["preferences"]


def test_import_restores_every_record_with_its_id_and_twice_adds_nothing(
        script_runner: ScriptRunner, vault: Vault, vault_dir: Path, tmp_path: Path) -> None:
    populate(vault)
    export = tmp_path / "alice.json"
    assert mem(script_runner, "export", "-o", str(export)).returncode == 0
    original = comparable(json.loads(export.read_text()))

    first = mem_json(script_runner, "import", str(export), "--user", "bob")
    assert first["imported"] == 13 and first["skipped"] == 0
    bob = json.loads(mem(script_runner, "export", "--user", "bob").stdout)
    assert bob["user_id"] == "bob" and comparable(bob) == original
    assert (user_dir(vault_dir, "bob") / "archive" / "old1.jsonl").is_file()
    assert sorted(p.name for p in (user_dir(vault_dir, "bob") / "sessions").iterdir()) == \
        ["s1.jsonl", "s2.jsonl"]
    assert matching(open_as("bob"), "tulips") == ["An archived note about tulips"]
    assert matching(open_as("bob"), "ferry", include_archive=False) == [
        "Can you book the ferry to Porto", "The ferry leaves at nine"]

    files = files_of(user_dir(vault_dir, "bob"), skip_audit=True)
    again = mem_json(script_runner, "import", str(export), "--user", "bob")
    assert again["imported"] == 0 and again["skipped"] == 13
    assert again.get("preferences_imported", 0) == 0
    assert files_of(user_dir(vault_dir, "bob"), skip_audit=True).keys() == files.keys()
    assert comparable(json.loads(mem(script_runner, "export", "--user", "bob").stdout)) == \
        original
    assert mem(script_runner, "verify", "--user", "bob").returncode == 0
    entries = mem_json(script_runner, "audit", "--user", "bob")["entries"]
    assert [e["op"] for e in entries if e["op"] == "import"] == ["import", "import"]
    # Importing into the user it came from adds nothing either.
    assert mem_json(script_runner, "import", str(export))["imported"] == 0


def _export(v: Vault) -> dict[str, Any]:
    return export_doc(v)


def _records(doc: dict[str, Any], category: str) -> list[dict[str, Any]]:
    return list(doc["categories"][category]["records"])


def _edit_content(doc: dict[str, Any]) -> None:
    _records(doc, "learned_context")[0]["content"] = "Lives in Madrid near the river"


def _count(doc: dict[str, Any]) -> None:
    doc["categories"]["learned_context"]["count"] += 1


def _record_count(doc: dict[str, Any]) -> None:
    doc["record_count"] -= 1


def _drop_record_and_fix_count(doc: dict[str, Any]) -> None:
    doc["categories"]["conversation"]["records"].pop()
    doc["categories"]["conversation"]["count"] -= 1  # record_count now disagrees


def _no_session(doc: dict[str, Any]) -> None:
    _records(doc, "conversation")[0]["session_id"] = None


def _bad_session(doc: dict[str, Any]) -> None:
    _records(doc, "conversation")[0]["session_id"] = "../../bob"


def _wrong_category(doc: dict[str, Any]) -> None:
    fact = doc["categories"]["learned_context"]["records"].pop(0)
    doc["categories"]["learned_context"]["count"] -= 1
    doc["categories"]["preference"]["records"].append(fact)
    doc["categories"]["preference"]["count"] += 1


def _wrong_type(doc: dict[str, Any]) -> None:
    _records(doc, "preference")[0]["type"] = "message"


def _duplicate(doc: dict[str, Any]) -> None:
    first = _records(doc, "learned_context")[0]
    twin = dict(first, content="Another fact entirely")
    twin["content_hash"] = content_hash(twin["content"])
    doc["categories"]["learned_context"]["records"].append(twin)
    doc["categories"]["learned_context"]["count"] += 1
    doc["record_count"] += 1


def _unknown_category(doc: dict[str, Any]) -> None:
    doc["categories"]["opinions"] = {"count": 0, "records": []}


def _bad_time(doc: dict[str, Any]) -> None:
    _records(doc, "learned_context")[0]["created_at"] = "last tuesday"


def _no_id(doc: dict[str, Any]) -> None:
    del _records(doc, "learned_context")[0]["memory_id"]


def _bad_prefs(doc: dict[str, Any]) -> None:
    doc["preferences"] = {"editor": ["vim"]}


def _bad_tags(doc: dict[str, Any]) -> None:
    _records(doc, "learned_context")[0]["tags"] = "not-a-list"


def _bad_importance(doc: dict[str, Any]) -> None:
    _records(doc, "learned_context")[0]["importance"] = 7


MALFORMED = {
    "not json": lambda raw: raw[: len(raw) // 2],
    "not an object": lambda raw: "[1, 2, 3]",
    "wrong version": lambda raw: raw.replace('"export_version": "1.0"',
                                             '"export_version": "9.9"'),
}
MUTATIONS = [_edit_content, _count, _record_count, _drop_record_and_fix_count, _no_session,
             _bad_session, _wrong_category, _wrong_type, _duplicate, _unknown_category,
             _bad_time, _no_id, _bad_prefs, _bad_tags, _bad_importance]


@pytest.mark.parametrize("case", list(MALFORMED) + [m.__name__ for m in MUTATIONS])
def test_a_malformed_import_is_a_data_error_and_writes_nothing(
        script_runner: ScriptRunner, vault: Vault, vault_dir: Path, tmp_path: Path,
        case: str) -> None:
    populate(vault)
    remember.add(open_as("bob"), "Bob already knows this", "fact")
    doc = _export(vault)
    if case in MALFORMED:
        raw = MALFORMED[case](json.dumps(doc, indent=2))
    else:
        mutation = {m.__name__: m for m in MUTATIONS}[case]
        mutation(doc)
        raw = json.dumps(doc)
    path = tmp_path / "import.json"
    path.write_text(raw)
    before = files_of(user_dir(vault_dir, "bob"))
    result = mem(script_runner, "import", str(path), "--user", "bob", "--json")
    assert result.returncode == 65, (case, result.returncode, result.stderr)
    assert result.stdout == "" and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1
    assert files_of(user_dir(vault_dir, "bob")) == before  # not even an audit entry
    assert not (vault_dir / "default" / "carol").exists()


def test_an_import_without_a_file_is_not_found(script_runner: ScriptRunner, vault: Vault,
                                               tmp_path: Path) -> None:
    assert mem(script_runner, "import", str(tmp_path / "nope.json")).returncode == 66


@pytest.mark.parametrize("where", ["content", "preference value", "preference key"])
def test_an_import_holding_a_critical_secret_is_refused_whole(
        script_runner: ScriptRunner, vault: Vault, vault_dir: Path, tmp_path: Path,
        where: str) -> None:
    populate(vault)
    remember.add(open_as("bob"), "Bob already knows this", "fact")
    doc = _export(vault)
    if where == "content":
        fact = _records(doc, "learned_context")[0]
        fact["content"] = f"the deploy key is {AWS_KEY}"
        fact["content_hash"] = content_hash(fact["content"])
    elif where == "preference value":
        doc["preferences"]["aws"] = AWS_KEY
    else:
        doc["preferences"][AWS_KEY] = "deploy"
    path = tmp_path / "import.json"
    path.write_text(json.dumps(doc))
    before = files_of(user_dir(vault_dir, "bob"))
    result = mem(script_runner, "import", str(path), "--user", "bob")
    assert result.returncode == 77, (where, result.stderr)
    assert AWS_KEY not in result.stdout + result.stderr
    assert files_of(user_dir(vault_dir, "bob")) == before
    assert holding(vault_dir, AWS_KEY.lower()) == []


# --- round trip (Hypothesis) ---------------------------------------------------------------


WORD = st.text(alphabet=string.ascii_letters, min_size=1, max_size=9)
TEXT = st.lists(WORD, min_size=1, max_size=6).map(" ".join)
TAG = st.text(alphabet=string.ascii_lowercase + string.digits + "-_", min_size=1, max_size=8)
ITEM = st.tuples(st.sampled_from(TYPES), TEXT, st.lists(TAG, max_size=3, unique=True),
                 st.sampled_from([None, "s1", "s2", "s3"]))
VAULTS = st.fixed_dictionaries({
    "items": st.lists(ITEM, min_size=0, max_size=10),
    "prefs": st.dictionaries(st.text(alphabet=string.ascii_lowercase, min_size=1, max_size=8),
                             TEXT, max_size=3),
    "archive": st.lists(TEXT, max_size=3),
    "archive_session": st.sampled_from(["s1", "a1"]),
    "supersede": st.booleans(),
})
_users = itertools.count()


@settings(max_examples=examples(12), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@pytest.mark.slow
@given(spec=VAULTS)
def test_export_import_export_round_trip(vault: Vault, spec: dict[str, Any]) -> None:
    n = next(_users)
    source, target = open_as(f"u{n}"), open_as(f"u{n}-copy")
    for kind, text, tags, session in spec["items"]:
        if kind == "message" and session is None:
            session = "s1"
        remember.add(source, text, kind, tags=tags, session=session)
    facts = [r for r in records_of(source) if r.type == "fact"]
    if spec["supersede"] and facts:
        remember.add(source, "a correction of the first fact", "fact",
                   supersedes=facts[0].memory_id)
    for key, value in spec["prefs"].items():
        prefs.set_(source, key, value)
    if spec["archive"]:
        add_archived(source, spec["archive_session"], spec["archive"])

    first = export_doc(source)
    result = import_doc(target, json.dumps(first))
    assert result["imported"] == first["record_count"] and result["skipped"] == 0
    second = export_doc(target)
    assert second["user_id"] == f"u{n}-copy"
    assert comparable(second) == comparable(first)
    assert {c: g["count"] for c, g in second["categories"].items()} == \
        {c: g["count"] for c, g in first["categories"].items()}
    again = import_doc(target, json.dumps(second))
    assert again["imported"] == 0 and again["skipped"] == first["record_count"]
    if first["record_count"]:
        report = verified(target)
        assert report["ok"], report["problems"]


# --- destroy --------------------------------------------------------------------------------


def test_destroy_needs_the_users_name(script_runner: ScriptRunner, vault: Vault,
                                      vault_dir: Path) -> None:
    populate(vault)
    before = files_of(vault_dir)
    for args in ([], ["--confirm", "bob"], ["--confirm", "Alice"], ["--confirm", ""]):
        result = mem(script_runner, "destroy", *args, "--json")
        assert result.returncode == 77, (args, result.stderr)
        assert result.stdout == "" and "nothing was touched" in result.stderr
    assert files_of(vault_dir) == before
    assert mem(script_runner, "destroy", "--confirm", "zoe", "--user", "zoe").returncode == 66


def test_destroy_leaves_only_the_org_audit_record(
        script_runner: ScriptRunner, vault: Vault, vault_dir: Path, tmp_path: Path) -> None:
    remember.add(vault, f"The {CANARY} badge opens the lab", "fact", tags=[TAG_CANARY])
    ids = populate(vault)
    bob = open_as("bob")
    remember.add(bob, "Bob plays the cello", "fact")
    ingest.add_messages(bob, "b1", [NewMessage("Tune the cello", "user", "c1")])
    bob_files = files_of(user_dir(vault_dir, "bob"))
    copy = tmp_path / "alice-copy"
    shutil.copytree(user_dir(vault_dir), copy)
    index_docs = int(tantivy.Index.open(str(user_dir(vault_dir) / "index")).searcher().num_docs)

    doc = mem_json(script_runner, "destroy", "--confirm", "alice")
    assert set(doc) == {"destroyed", "records_deleted", "files_deleted", "index_docs_deleted",
                        "audit_id"}
    assert doc["destroyed"] == "default/alice" and doc["records_deleted"] == 14
    assert doc["index_docs_deleted"] == index_docs == 14
    assert doc["files_deleted"] == sum(1 for p in copy.rglob("*") if p.is_file())
    assert not user_dir(vault_dir).exists()
    assert files_of(user_dir(vault_dir, "bob")) == bob_files
    assert verified(open_as("bob"))["ok"]
    # The locks live beside the users' directories (<org>/.locks/), and hold nothing.
    assert sorted(p.name for p in (vault_dir / "default").iterdir()) == \
        [".locks", "audit.jsonl", "bob"]
    assert all(p.is_file() and p.stat().st_size == 0
               for p in (vault_dir / "default" / ".locks").iterdir())

    # One org-level entry, chained and MAC'd, naming the user and counts, no content.
    org_log = vault_dir / "default" / "audit.jsonl"
    (entry,) = [json.loads(line) for line in org_log.read_text().splitlines()]
    assert entry["op"] == "user.destroy" and entry["audit_id"] == doc["audit_id"]
    assert entry["detail"]["user"] == "alice" and entry["detail"]["records"] == 14
    check = admin.org_audit(open_as("bob")).check()
    assert check.ok and len(check.entries) == 1
    text = org_log.read_text().lower()
    for needle in (CANARY, TAG_CANARY, "lisbon", "vim", ids["fact"]):
        assert needle not in text, needle
    assert holding(vault_dir, CANARY) == []

    # Nothing of alice's is readable any more: she is no user of the org now.
    assert mem(script_runner, "show", ids["fact"]).returncode == 66
    gone = mem(script_runner, "list")
    assert gone.returncode == 66 and "no user alice in org default" in gone.stderr
    assert mem(script_runner, "destroy", "--confirm", "alice").returncode == 66

    # Her files restored from a copy, without the keys: nothing decrypts, nothing leaks.
    shutil.copytree(copy, user_dir(vault_dir), ignore=shutil.ignore_patterns("keys"))
    assert not (user_dir(vault_dir) / "keys").exists()
    with pytest.raises(DataError):
        records_of(fresh(), include_archive=True)
    for args in (["list"], ["show", ids["fact"]], ["export"], ["search", "lab"],
                 ["verify"], ["stats"], ["export", "--format", "markdown"]):
        result = mem(script_runner, *args)
        assert result.returncode == 65, (args, result.returncode, result.stderr)
        out = (result.stdout + result.stderr).lower()
        assert CANARY not in out and "lisbon" not in out, args


# --- freeze --------------------------------------------------------------------------------


def test_a_frozen_memory_refuses_every_write_and_serves_every_read(
        script_runner: ScriptRunner, vault: Vault, vault_dir: Path, tmp_path: Path) -> None:
    ids = populate(vault)
    transcript = tmp_path / "t.jsonl"
    transcript.write_text(json.dumps({"role": "user", "content": "hello from a transcript"})
                          + "\n")
    other = open_as("bob")
    remember.add(other, "Bob plays the cello", "fact")
    export = tmp_path / "bob.json"
    export.write_text(json.dumps(export_doc(other)))

    assert mem_json(script_runner, "freeze") == {"frozen": True}
    assert mem_json(script_runner, "freeze") == {"frozen": True}  # idempotent
    assert mem_json(script_runner, "stats")["frozen"] is True
    files = files_of(user_dir(vault_dir), skip_audit=True)
    audit_ops = [e["op"] for e in mem_json(script_runner, "audit")["entries"]]
    writes = [
        ["add", "a new fact"],
        ["add", "a message", "--type", "message", "--session", "s9"],
        ["pref", "set", "editor", "emacs"],
        ["pref", "unset", "editor"],
        ["forget", ids["fact"]],
        ["forget", "--session", "s1", "--yes"],
        ["import", str(export)],
        ["rotate-key"],
        ["rotate-key", "--now"],
        ["ingest", str(transcript), "--format", "jsonl", "--session", "t1"],
    ]
    for args in writes:
        result = mem(script_runner, *args)
        assert result.returncode == 77, (args, result.returncode, result.stderr)
        assert "frozen" in result.stderr and "Traceback" not in result.stderr
    assert files_of(user_dir(vault_dir), skip_audit=True) == files
    later = [e["op"] for e in mem_json(script_runner, "audit")["entries"]]
    assert later[: len(audit_ops)] == audit_ops
    assert set(later[len(audit_ops):]) <= {"list", "show", "search", "export", "verify",
                                            "pref.get", "pref.list", "brief"}

    reads = [["list"], ["search", "ferry"], ["show", ids["fact"]], ["export"], ["verify"],
             ["brief"], ["stats"], ["pref", "get", "editor"], ["pref", "list"], ["audit"],
             ["export", "--format", "markdown"]]
    for args in reads:
        result = mem(script_runner, *args)
        assert result.returncode == 0, (args, result.stderr)
        assert result.stdout or args[0] in ("verify", "audit"), args  # these say it on stderr
    assert "ferry" in mem(script_runner, "search", "ferry").stdout
    assert files_of(user_dir(vault_dir), skip_audit=True) == files

    assert mem_json(script_runner, "unfreeze") == {"frozen": False}
    assert mem(script_runner, "add", "a new fact").returncode == 0
    assert mem(script_runner, "pref", "set", "editor", "emacs").returncode == 0
    assert "a new fact" in [r.content for r in records_of(fresh())]
    ops = [e["op"] for e in mem_json(script_runner, "audit")["entries"]]
    assert ops.count("freeze") == 1 and ops.count("unfreeze") == 1


def test_a_frozen_memory_serves_searches_even_when_its_index_is_out_of_step(
        vault: Vault) -> None:
    """A search that meets a stale index rebuilds it: that is no write to the memory."""
    ingest.add_messages(vault, "s1", [NewMessage(f"giraffe number {i}", "user", f"g{i}")
                                      for i in range(5)])
    admin.set_frozen(vault, True)
    store = fresh().store  # outside a transaction: the index is not told
    records = store.read_lines("sessions/s1.jsonl")
    store.rewrite_lines("sessions/s1.jsonl", records[::-1])
    assert len(matching(fresh(), "giraffe")) == 5


@pytest.mark.script_launch_mode("subprocess")  # the hook hands its ingest to a detached mem
def test_the_hook_exits_0_while_frozen_and_its_ingest_is_refused(
        script_runner: ScriptRunner, vault: Vault, vault_dir: Path, tmp_path: Path) -> None:
    populate(vault)
    admin.set_frozen(fresh(), True)
    files = files_of(user_dir(vault_dir), skip_audit=True)
    logs = tmp_path / "logs"
    transcript = Path(__file__).parent / "fixtures" / "transcripts" / "claude-code.jsonl"
    payload = {"hook_event_name": "SessionEnd", "session_id": "hooksession",
               "transcript_path": str(transcript), "cwd": str(tmp_path)}
    result = mem(script_runner, "hook", "claude-code", stdin=json.dumps(payload),
                 MEM_LOG_DIR=str(logs))
    assert result.returncode == 0 and result.stdout == ""
    log = logs / "hooks.log"
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and "frozen" not in (
            log.read_text() if log.exists() else ""):
        time.sleep(0.1)
    assert "frozen" in log.read_text()  # the background ingest was refused, and logged
    assert files_of(user_dir(vault_dir), skip_audit=True) == files
    assert not (user_dir(vault_dir) / "sessions" / "hooksession.jsonl").exists()
    start = mem(script_runner, "hook", "claude-code", stdin=json.dumps(
        {"hook_event_name": "SessionStart"}), MEM_LOG_DIR=str(logs))
    assert start.returncode == 0 and "British English" in start.stdout  # reads still work


# --- audit ----------------------------------------------------------------------------------


def audit_lines(vault_dir: Path) -> list[bytes]:
    return (user_dir(vault_dir) / "audit.jsonl").read_bytes().splitlines(keepends=True)


def test_the_audit_log_is_complete_chained_and_holds_no_content(
        script_runner: ScriptRunner, vault: Vault, vault_dir: Path) -> None:
    remember.add(vault, f"The {CANARY} badge opens the lab", "fact", tags=[TAG_CANARY])
    prefs.set_(vault, "wifi", f"{CANARY}-network")
    ingest.add_messages(vault, "s1", [NewMessage(f"say {CANARY}", "user", "m1")])
    forgotten = v_id(remember.add(vault, "to be forgotten", "fact"))
    forget.forget(vault, forget.select(vault, [forgotten], None, None, None, None))
    search(fresh(), CANARY, Filters())
    export_doc(fresh())
    doc = mem_json(script_runner, "audit")
    assert doc["chain_ok"] is True
    ops = [e["op"] for e in doc["entries"]]
    for op in ("user.create", "add", "pref.set", "ingest", "forget", "search", "export"):
        assert op in ops, op
    assert [e["seq"] for e in doc["entries"]] == list(range(1, len(ops) + 1))
    for e in doc["entries"]:
        assert {"seq", "audit_id", "ts", "op", "actor", "ids", "hashes", "detail", "prev",
                "mac"} <= set(e)
    raw = (user_dir(vault_dir) / "audit.jsonl").read_text().lower()
    assert CANARY not in raw and TAG_CANARY not in raw and "wifi" not in raw
    assert "forgotten" not in raw and "badge" not in raw
    assert forgotten in raw  # ids are audited
    human = mem(script_runner, "audit")
    assert human.returncode == 0 and "chain ok" in human.stderr


def _edit_field(lines: list[bytes]) -> list[bytes]:
    entry = json.loads(lines[2])
    entry["actor"] = "mallory"
    return [*lines[:2], json.dumps(entry, separators=(",", ":")).encode() + b"\n", *lines[3:]]


def _edit_ids(lines: list[bytes]) -> list[bytes]:
    entry = json.loads(lines[2])
    entry["ids"] = []
    return [*lines[:2], json.dumps(entry, separators=(",", ":")).encode() + b"\n", *lines[3:]]


def _swap(lines: list[bytes]) -> list[bytes]:
    return [lines[0], lines[2], lines[1], *lines[3:]]


@pytest.mark.parametrize("tamper", [
    _edit_field, _edit_ids, _swap,
    lambda lines: lines[:2] + lines[3:],  # a middle entry deleted
    lambda lines: lines[1:],  # the first deleted
    lambda lines: lines[:-1],  # the last (anchored in state.json) cut
    lambda lines: lines[:-2],
    lambda lines: [],  # the whole log emptied
], ids=["edit field", "edit ids", "swap", "delete middle", "delete first", "cut last",
        "cut two", "emptied"])
def test_an_edited_or_removed_audit_entry_is_detected(
        script_runner: ScriptRunner, vault: Vault, vault_dir: Path, tamper: Any) -> None:
    for i in range(4):
        remember.add(vault, f"fact number {i}", "fact")
    prefs.set_(vault, "editor", "vim")  # the last entry is a write's: it is anchored
    lines = audit_lines(vault_dir)
    assert len(lines) == 6
    assert mem_json(script_runner, "audit")["chain_ok"] is True
    path = user_dir(vault_dir) / "audit.jsonl"
    path.write_bytes(b"".join(tamper(lines)))
    result = mem(script_runner, "audit", "--json")
    assert result.returncode == 65
    doc = json.loads(result.stdout)
    assert doc["chain_ok"] is False and doc["problems"]
    verify = mem(script_runner, "verify", "--json")
    assert verify.returncode == 65
    assert any(p["file"].endswith("audit.jsonl") for p in json.loads(verify.stdout)["problems"])
    path.write_bytes(b"".join(lines))  # the control: the original passes again
    assert mem_json(script_runner, "audit")["chain_ok"] is True


# --- key rotation ---------------------------------------------------------------------------


def test_rotate_key_starts_a_new_epoch_and_old_data_stays_readable(
        script_runner: ScriptRunner, vault: Vault, vault_dir: Path) -> None:
    populate(vault)
    before = snapshot()
    old_analyzer = index_of(fresh()).analyzer
    (stem,) = old_analyzer.tokens("ferry")
    assert old_analyzer.hash(stem) in index_terms(fresh(), "body")

    doc = mem_json(script_runner, "rotate-key")
    assert doc["key_version"] == 2 and doc["files_reencrypted"] == 0 and doc["keys_deleted"] == []
    v = fresh()
    assert epoch_of(v) == 2 and v.store.deks_on_disk() == [1, 2]
    assert line_key_versions(v.store) == {1} and doc_key_versions(v.store) == {1}
    assert snapshot() == before
    # The index was rebuilt under the new epoch's index key.
    new_analyzer = index_of(v).analyzer
    terms = index_terms(v, "body")
    assert new_analyzer.hash(stem) in terms and old_analyzer.hash(stem) not in terms
    assert matching(v, "ferry") == ["Can you book the ferry to Porto",
                                    "The ferry leaves at nine"]

    # New writes use version 2: a new line, and a whole file rewritten.
    ingest.add_messages(v, "s1", [NewMessage("One more about the ferry", "user", "m4")])
    remember.add(v, "Has a cat named Miso", "fact")
    lines = [json.loads(raw) for raw in
             (user_dir(vault_dir) / "sessions" / "s1.jsonl").read_bytes().splitlines()]
    assert [line["kv"] for line in lines] == [1, 1, 1, 2]
    assert file_key_version((user_dir(vault_dir) / CLAUDE_MD).read_bytes()) == 2
    assert len(matching(fresh(), "ferry")) == 3
    assert mem(script_runner, "verify").returncode == 0

    now = mem_json(script_runner, "rotate-key", "--now")
    assert now["key_version"] == 3 and sorted(now["keys_deleted"]) == [1, 2]
    v = fresh()
    assert v.store.deks_on_disk() == [3]
    assert line_key_versions(v.store) == {3} and doc_key_versions(v.store) == {3}
    assert all(r.key_version == 3 for r in records_of(v, include_archive=True))
    assert len(snapshot()[0]) == len(before[0]) + 2 and snapshot()[1] == before[1]
    assert len(matching(v, "ferry")) == 3 and matching(v, "tulips")
    assert mem_json(script_runner, "verify") == {**mem_json(script_runner, "verify"),
                                                 "ok": True, "problems": []}
    ops = [e["op"] for e in mem_json(script_runner, "audit")["entries"]]
    assert ops.count("key.rotate") == 2 and ops.count("key.retire") == 1


STEPS = [  # (name, owner, attribute, which call fails)
    ("new key", UserStore, "new_epoch", 1),
    ("state", UserStore, "save_state", 1),
    ("audit entry", AuditLog, "append", 1),
    ("CLAUDE.md", UserStore, "write_doc", 1),
    ("preferences.json", UserStore, "write_doc", 2),
    ("first session", UserStore, "rewrite_lines", 1),
    ("second session", UserStore, "rewrite_lines", 2),
    ("archive", UserStore, "rewrite_lines", 3),
    ("index", Vault, "rebuild_indexes", 1),
    ("old key", UserStore, "remove_dek", 1),
    ("retire entry", AuditLog, "append", 2),
]


@pytest.mark.parametrize(("step", "owner", "attr", "nth"), STEPS, ids=[s[0] for s in STEPS])
def test_an_interrupted_rotation_loses_nothing_and_is_repaired(
        vault: Vault, step: str, owner: Any, attr: str, nth: int) -> None:
    populate(vault)
    before = snapshot()
    calls = 0
    original = getattr(owner, attr)

    def failing(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == nth:
            raise StorageError(f"injected failure in {attr}")
        return original(*args, **kwargs)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(owner, attr, failing)
        with pytest.raises(StorageError, match="injected"):
            keys.rotate_key(fresh(), now=True)
    assert calls == nth

    # Before any repair: every record reads, search finds what it should, verify passes.
    assert snapshot() == before
    v = fresh()
    assert matching(v, "ferry") == ["Can you book the ferry to Porto",
                                    "The ferry leaves at nine"]
    assert matching(v, "tulips") == ["An archived note about tulips"]
    assert matching(v, "Lisbon") == ["Lives in Lisbon near the river"]
    report = verified(v)
    assert report["ok"], report["problems"]

    repaired = verify_ops.repair(fresh()).to_dict()
    assert any("rebuilt the index" in a for a in repaired["repaired"])
    report = verified(fresh())
    assert report["ok"] and report["problems"] == [], report["problems"]
    assert snapshot() == before
    v = fresh()
    assert sorted(v.store.deks_on_disk()) == sorted(keys.keys_in_use(v.store, epoch_of(v)))

    again = keys.rotate_key(fresh(), now=True).to_dict()
    v = fresh()
    assert v.store.deks_on_disk() == [again["key_version"]]
    assert line_key_versions(v.store) == {again["key_version"]}
    assert snapshot() == before
    assert matching(v, "ferry") and matching(v, "tulips")
    assert verified(fresh())["problems"] == []


def test_the_cli_repairs_an_interrupted_rotation(
        script_runner: ScriptRunner, vault: Vault) -> None:
    populate(vault)
    before = snapshot()
    with pytest.MonkeyPatch.context() as m:
        original = UserStore.rewrite_lines
        calls = itertools.count(1)

        def failing(self: UserStore, rel: str, records: list[Record]) -> list[Location]:
            if next(calls) == 2:
                raise StorageError("injected")
            return original(self, rel, records)

        m.setattr(UserStore, "rewrite_lines", failing)
        with pytest.raises(StorageError):
            keys.rotate_key(fresh(), now=True)
    v = fresh()
    assert line_key_versions(v.store) == {1, 2} and v.store.deks_on_disk() == [1, 2]
    doc = mem_json(script_runner, "verify", "--repair")
    assert doc["ok"] is True and doc["problems"] == [] and doc["repaired"]
    # The repair finished the interrupted rotation: everything under key 2, key 1 gone.
    v = fresh()
    assert line_key_versions(v.store) == {2} and v.store.deks_on_disk() == [2]
    assert mem_json(script_runner, "rotate-key", "--now")["keys_deleted"] == [2]
    assert snapshot() == before


# --- verify ---------------------------------------------------------------------------------


def test_verify_reports_a_record_missing_from_the_index_and_repair_restores_it(
        script_runner: ScriptRunner, vault: Vault) -> None:
    ids = populate(vault)
    index_path = vault.layout.index_dir
    assert (index_path / "stamp").exists()
    index = tantivy.Index.open(str(index_path))
    writer = index.writer(heap_size=15_000_000, num_threads=1)
    writer.delete_documents_by_term("id", ids["fact"])
    writer.commit()
    writer.wait_merging_threads()
    assert ids["fact"] not in indexed_ids(vault) and (index_path / "stamp").exists()

    result = mem(script_runner, "verify", "--json")
    assert result.returncode == 65
    (problem,) = json.loads(result.stdout)["problems"]
    assert problem["file"] == "default/alice/index" and problem["severity"] == "error"
    assert "1 records missing" in problem["problem"]

    doc = mem_json(script_runner, "verify", "--repair")
    assert doc["ok"] is True and doc["problems"] == []
    assert indexed_ids(fresh()) == {r.memory_id for r in records_of(fresh(), include_archive=True)}
    assert matching(fresh(), "Lisbon") == ["Lives in Lisbon near the river"]


def test_verify_warns_of_an_unused_data_key_and_repair_deletes_it(
        script_runner: ScriptRunner, vault: Vault, vault_dir: Path) -> None:
    populate(vault)
    vault.store.new_epoch(5)  # as an interrupted rotation could leave it
    doc = mem_json(script_runner, "verify")
    assert doc["ok"] is True
    (problem,) = doc["problems"]
    assert problem["file"] == "default/alice/keys/5.dek" and problem["severity"] == "warning"
    repaired = mem_json(script_runner, "verify", "--repair")
    assert "deleted unused data key 5" in repaired["repaired"]
    assert repaired["problems"] == []
    assert sorted(p.name for p in (user_dir(vault_dir) / "keys").iterdir()) == ["1.dek"]
    assert len(snapshot()[0]) == 13


def test_import_masks_personal_data_like_every_other_way_in(vault: Vault) -> None:
    source = open_as("eve")
    remember.add(source, "Her doctor is at the Elm Street clinic", "fact")
    doc = export_doc(source)
    record = _records(doc, "learned_context")[0]
    record["content"] = "Write to dr.who@example.org about the clinic"
    record["content_hash"] = content_hash(record["content"])
    import_doc(vault, json.dumps(doc))
    (stored,) = recall.list_records(vault, Filters()).records
    assert stored.content == "Write to <REDACTED:EMAIL> about the clinic"
    assert stored.content_hash == content_hash(stored.content)


def test_reindex_works_on_a_frozen_user(vault: Vault) -> None:
    remember.add(vault, "Plays the cello on Sundays", "fact")
    admin.set_frozen(vault, True)
    assert admin.reindex(vault).documents == 1
    assert found(vault, "cello")


def test_forgotten_messages_stay_forgotten_when_the_transcript_comes_again(
        vault: Vault) -> None:
    from memvault.model.records import NewMessage

    transcript = [NewMessage("we moved the standup", "user", "t1"),
                  NewMessage("my sister's diagnosis came back", "user", "t2"),
                  NewMessage("noted", "assistant", "t3")]
    ingest.add_messages(vault, "s1", transcript)
    target = [r for r in recall.list_records(vault, Filters()).records
              if r.message_id == "t2"]
    forget.forget(vault, ForgetPlan(tuple(target)))
    added = ingest.add_messages(vault, "s1", transcript).added  # a hook or a scan again
    assert added == 0
    added = ingest.add_messages(vault, "s1",
                                [*transcript, NewMessage("and lunch?", "user", "t4")]).added
    assert added == 1
    assert sorted(r.message_id for r in recall.list_records(vault, Filters()).records) == \
        ["t1", "t3", "t4"]
    assert not found(vault, "diagnosis")
