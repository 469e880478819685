"""`mem review`: the review queue on a vault built from real transcripts
(../shared/bench-data/transcripts) plus planted memories: it finds what was planted
(exact and near duplicates, a fact stated again with another value, harness and tool
text stored as memories, memories nothing retrieves) and nothing in the clean ones;
keep hides a finding, merge supersedes, and bad input is one line and its code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memvault.model.records import Filters
from memvault.ops import recall, remember, review
from memvault.ops.ingest import ingest_file
from memvault.vault.vault import Vault
from tests.conftest import mem, one_error_line

DATA = Path(__file__).resolve().parents[2] / "shared" / "bench-data" / "transcripts"
OLD = "2025-01-10T09:00:00Z"

# Memories a person would keep: none of them is a finding.
CLEAN = (
    ("The user works on an Elixir Phoenix app called spotter", "context"),
    ("Prefers answers without emoji", "preference"),
    ("Runs the test suite with mix test before every commit", "pattern"),
    ("Never push to main directly; open a pull request", "instruction"),
    ("Timezone is Europe/Berlin", "fact"),
)


@pytest.fixture
def built(vault: Vault) -> dict[str, Any]:
    """Real sessions, then planted memories: the ids of each by what it is."""
    for relpath in ("claude-code/tool_heavy.jsonl", "codex/rollout-vibe-codex-0.39.jsonl",
                    "gemini/session-vibe-gemini.jsonl"):
        ingest_file(vault, DATA / relpath, "auto")
    tools = [r for r in vault.store.records() if r.type == "message" and r.role == "tool"
             and len(r.content) > 40]
    calls = [r for r in vault.store.records() if r.type == "message"
             and r.content.startswith("[tool ")]
    assert tools and calls, "the transcripts hold tool output and calls"
    ids: dict[str, Any] = {"clean": []}

    def add(text: str, kind: str = "fact", **kw: Any) -> str:
        return remember.add(vault, text, kind, **kw).record.memory_id

    for text, kind in CLEAN:
        ids["clean"].append(add(text, kind))
    ids["dup"] = [add("Deploys go through the staging cluster first", "fact"),
                  add("deploys go through the staging   cluster first.", "context"),
                  add("Deploys go through the staging cluster first", "pattern")]
    ids["near"] = [add("The project uses Python 3.11 with strict typing and ruff linting"),
                   add("The project uses Python 3.11 with strict typing and ruff for linting")]
    ids["old_fact"] = add("Favourite editor is vim", created_at="2026-01-02T10:00:00Z")
    ids["new_fact"] = add("Favourite editor is helix")
    # What an agent's harness and tools wrote, stored as if it were a memory.
    ids["noise"] = {
        "tool call": add(calls[0].content),
        "harness tag": add("<system-reminder>The task tools haven't been used recently"
                           "</system-reminder>"),
        "stack trace": add("Traceback (most recent call last):\n  File \"app.py\", line 3, "
                           "in <module>\nValueError: bad"),
        "JSON": add('{"type": "result", "exit_code": 0, "stdout": "ok"}'),
    }
    ids["tool_output"] = add(tools[0].content)
    ids["unused"] = add("Has a cat named Miso", created_at=OLD)
    ids["used"] = add("Allergic to peanuts", created_at=OLD)
    return ids


def _kinds(result: Any) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for item in result.items:
        out.setdefault(item.kind, []).append(item)
    return out


def test_the_queue_finds_what_was_planted_and_nothing_clean(vault: Vault,
                                                            built: dict[str, Any]) -> None:
    recall.search(vault, "peanuts", Filters(limit=5))  # retrieved: not unused
    found = _kinds(review.queue(vault))
    (dup,) = found["duplicate"]
    assert set(dup.memory_ids) == set(built["dup"])
    (near,) = found["near_duplicate"]
    assert set(near.memory_ids) == set(built["near"]) and near.score >= 0.8
    (fact,) = found["superseded_in_fact"]
    assert fact.memory_ids == (built["old_fact"], built["new_fact"])
    assert fact.keep == built["new_fact"] and "favourite editor" in fact.reason
    noise = {item.memory_ids[0]: item.reason for item in found["noise"]}
    for rule, memory_id in built["noise"].items():
        assert noise.get(memory_id) == rule, (rule, noise)
    unused = {item.memory_ids[0] for item in found["unused"]}
    assert built["unused"] in unused and built["used"] not in unused
    everything = {i for item in found.get("noise", []) + found["duplicate"]
                  + found["near_duplicate"] + found["superseded_in_fact"]
                  for i in item.memory_ids}
    assert not everything & set(built["clean"])
    # Messages are transcripts, never findings: only memories are reviewed.
    messages = {r.memory_id for r in vault.store.records() if r.type == "message"}
    assert not {i for item in review.queue(vault).items for i in item.memory_ids} & messages


def test_tool_output_from_real_sessions_is_noise(vault: Vault) -> None:
    """What real tools answered (every tool message of the real sessions), stored as
    memories: most of it is found by the rules (72% of these 369 when measured), and
    none of the clean memories is."""
    for relpath in ("claude-code/tool_heavy.jsonl", "codex/rollout-vibe-codex-0.39.jsonl",
                    "gemini/session-vibe-gemini.jsonl",
                    "claude-code/258c7280-ae70-4798-800f-63464d01a85d.jsonl",
                    "claude-code/vibe-claude-code-1.0.95.jsonl"):
        ingest_file(vault, DATA / relpath, "auto")
    tools = [r.content for r in vault.store.records() if r.type == "message"
             and (r.role == "tool" or r.content.startswith("[tool "))]
    found = sum(review.noise_rule(t) is not None for t in tools)
    assert len(tools) > 300 and found >= 0.7 * len(tools), (found, len(tools))
    assert not [t for t, _ in CLEAN if review.noise_rule(t)]


@pytest.mark.parametrize("text", [
    "\\x1b[31mFAILED\\x1b[0m tests/test_x.py", "drwxr-xr-x  2 root root 4096 Nov 29 .git",
    "diff --git a/x.py b/x.py\n@@ -1,2 +1,2 @@", "[Request interrupted by user for tool use]",
    "Caveat: The messages below were generated by the user while running local commands.",
    "<command-name>/model</command-name>", "a" * 130, "12:01:03 0x7f 255 255 0 0 1 1 2 3 4",
    "This session is being continued from a previous conversation that ran out of context.",
    '[{"role": "tool", "content": "x"}, {"role": "user"}]',
])
def test_noise_variants(text: str) -> None:
    assert review.noise_rule(text) is not None


@pytest.mark.parametrize("text", [text for text, _ in CLEAN] + [
    "Uses 4 spaces, never tabs", "Birthday: 14 March", "Prefers {braces} on the same line"])
def test_not_noise(text: str) -> None:
    assert review.noise_rule(text) is None


@pytest.mark.parametrize(("a", "b", "same"), [
    ("Favourite editor is vim", "favourite editor is helix", True),
    ("deploy target: staging", "Deploy target: production", True),
    ("The user is a developer", "The user is vegetarian", False),  # a pronoun-like subject
    ("It is raining", "It is sunny", False),
    ("Favourite editor is vim", "Favourite editor is vim.", False),  # the same value
])
def test_superseded_in_fact_rule(vault: Vault, a: str, b: str, same: bool) -> None:
    remember.add(vault, a, "fact", created_at="2026-01-01T00:00:00Z")
    remember.add(vault, b, "fact")
    found = review.queue(vault, kinds=["superseded_in_fact"]).items
    assert bool(found) == same


def test_keep_hides_a_finding_and_a_new_copy_brings_it_back(vault: Vault) -> None:
    remember.add(vault, "Likes long walks", "fact")
    remember.add(vault, "likes long walks.", "context")
    (item,) = review.queue(vault).items
    review.keep(vault, item)
    result = review.queue(vault)
    assert result.items == () and result.kept_hidden == 1
    assert [i.key for i in review.queue(vault, include_kept=True).items] == [item.key]
    remember.add(vault, "LIKES LONG WALKS", "pattern")
    (again,) = review.queue(vault).items
    assert again.key != item.key and len(again.memory_ids) == 3


def test_merge_supersedes_all_but_the_kept_one(vault: Vault, script_runner: Any) -> None:
    ids = [remember.add(vault, t, k).record.memory_id for t, k in (
        ("Works from Lisbon", "fact"), ("works from lisbon.", "context"),
        ("Works from Lisbon", "pattern"))]
    (item,) = review.queue(vault).items
    done = mem(script_runner, "review", "--merge", item.key, "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["action"] == "merge" and doc["keep"] == item.keep
    current = {r.memory_id for r in recall.list_records(vault, Filters(limit=50)).records}
    assert current == {item.keep}
    state = vault.state()
    assert {i for i in ids if state.superseded_by(i)} == set(ids) - {item.keep}
    assert review.queue(vault).items == ()
    # The links are the records' own (verify recounts them from the records).
    checked = mem(script_runner, "verify", "--json")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # Search leaves the superseded copies out.
    hits = recall.search(vault, "Lisbon", Filters(limit=10)).results
    assert [h.memory_id for h in hits] == [item.keep]


def test_review_json_and_errors(vault: Vault, built: dict[str, Any], script_runner: Any
                                ) -> None:
    done = mem(script_runner, "review", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["counts"]["duplicate"] == 1 and doc["memories_checked"] > 10
    item = doc["items"][0]
    assert {"key", "kind", "reason", "keep", "memory_ids", "others", "records"} <= set(item)
    noise = next(i for i in doc["items"] if i["kind"] == "noise")
    for args, code, words in (
            (["--kind", "junk"], 2, "unknown kind 'junk'"),
            (["--unused-days", "0"], 2, "1 or more"),
            (["--merge", noise["key"]], 2, "nothing to merge"),
            (["--keep", "0123456789abcdef"], 66, "no review finding"),
            (["--keep", "a", "--merge", "b"], 2, "not both")):
        failed = mem(script_runner, "review", *args)
        assert failed.returncode == code, (args, failed.stderr)
        assert words in one_error_line(failed.stderr)
    human = mem(script_runner, "review", "--kind", "noise")
    assert human.returncode == 0 and "\x1b" not in human.stdout
    assert "findings in" in human.stderr


def test_review_shows_stored_text_harmlessly(vault: Vault, script_runner: Any) -> None:
    with vault.transaction() as tx:
        tx.state  # noqa: B018 - the user exists
    for text in ("Note \u202egnp.exe", "Note \u202egnp.exe."):
        remember.add(vault, text, "fact")
    done = mem(script_runner, "review")
    assert done.returncode == 0, done.stderr
    assert "\u202e" not in done.stdout and "\\u202e" in done.stdout


def test_near_duplicates_by_meaning_where_there_are_vectors(vault: Vault) -> None:
    """Too few words to compare as words; the same by meaning once there are vectors."""
    from memvault.embed.builtin import load
    from memvault.ops import embed

    ids = [remember.add(vault, t, "fact").record.memory_id
           for t in ("My wife is called Anna", "Anna is my wife", "Has a cat named Miso")]
    without = review.queue(vault, kinds=["near_duplicate"])
    assert without.items == () and not without.meaning
    embed.embed_pending(vault, load())
    result = review.queue(vault, kinds=["near_duplicate"])
    assert result.meaning
    (item,) = result.items
    assert set(item.memory_ids) == set(ids[:2]) and item.reason == "alike by meaning"
    assert item.score is not None and item.score >= review.NEAR_MEANING


def test_an_agents_brief_retrieves_and_the_viewers_preview_does_not(vault: Vault) -> None:
    from memvault.ops import brief

    seen = remember.add(vault, "Speaks Portuguese", "fact", created_at=OLD).record.memory_id

    def unused() -> set[str]:
        return {i for item in review.queue(vault, kinds=["unused"]).items
                for i in item.memory_ids}

    assert seen in unused()
    brief.build(vault, 50, 8000, preview=True)  # the person looking, in the viewer
    assert seen in unused()
    brief.build(vault, 50, 8000)  # what an agent is given at session start
    assert seen not in unused()
    assert seen in {i for item in review.queue(vault, kinds=["unused"], unused_days=1,
                                               now=_days_later(2)).items
                    for i in item.memory_ids}


def _days_later(days: int) -> Any:
    from datetime import UTC, datetime, timedelta

    return datetime.now(UTC) + timedelta(days=days)


def test_a_merge_reaches_the_other_machine(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A merge supersedes by changing the kept record in place (a newer version, which
    sync carries): the other machine then leaves the merged copies out as well."""
    from memvault.ops import sync as sync_ops
    from memvault.storage.remote import FolderRemote
    from tests.test_sync import machine

    monkeypatch.delenv("MEM_VAULT")
    (tmp_path / "remote").mkdir()
    remote = FolderRemote(str(tmp_path / "remote"), tmp_path / "remote")
    a, b = machine(tmp_path, "a"), machine(tmp_path, "b")
    ids = [remember.add(a, t, k).record.memory_id for t, k in (
        ("Works from Lisbon", "fact"), ("works from lisbon.", "context"))]
    sync_ops.sync(a, remote)
    sync_ops.sync(b, remote)
    (item,) = review.queue(a).items
    review.merge(a, item)
    sync_ops.sync(a, remote)
    sync_ops.sync(b, remote)
    for v in (a, b):
        current = {r.memory_id for r in recall.list_records(v, Filters(limit=50)).records}
        assert current == {item.keep}, v.settings.vault
        assert {i for i in ids if v.state().superseded_by(i)} == set(ids) - {item.keep}
        assert review.queue(v).items == ()
