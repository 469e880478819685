"""Compaction (SPEC §9): summaries with lineage, originals archived, safe against failing
summarisers, concurrent writers and kills, idempotent, and erasure that reaches old keys."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from conftest import mem, one_error_line, open_as
from memvault.config import CompactionConfig, resolve
from memvault.errors import EX_CONFIG, EX_TEMPFAIL
from memvault.model.location import session_file
from memvault.model.records import Filters, NewMessage
from memvault.ops import compact, forget, ingest, recall, remember, verify
from memvault.storage import fsio
from memvault.vault.vault import Vault

CFG = CompactionConfig()


def ago(days: float = 0, minutes: float = 0) -> str:
    t = datetime.now(UTC) - timedelta(days=days, minutes=minutes)
    return t.isoformat().replace("+00:00", "Z")


def messages(n: int, days_ago: float = 1, word: str = "topic") -> list[NewMessage]:
    return [NewMessage(f"message {i} about {word} number w{i}x",
                       "user" if i % 2 == 0 else "assistant", f"m{i}",
                       ago(days_ago, minutes=n - i)) for i in range(n)]


def every(v: Vault) -> list:
    return recall.list_records(v, Filters(limit=100_000, include_archive=True,
                                          include_superseded=True)).records


def summaries(v: Vault) -> list:
    return [r for r in every(v) if r.type == "summary"]


def assert_verified(v: Vault) -> None:
    report = verify.verify(v)
    assert report.ok, report.to_dict()["problems"]


def script(tmp_path: Path, name: str, body: str) -> str:
    """A real executable the summariser runs (no mock of subprocess)."""
    path = tmp_path / name
    path.write_text("#!" + sys.executable + "\n" + textwrap.dedent(body))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


# --- the long-session trigger, lineage, idempotence -------------------------------------


def test_a_long_session_keeps_its_last_20_raw_and_one_summary_with_lineage(vault):
    ingest.add_messages(vault, "s1", messages(300, word="pgbouncer"))
    out = compact.compact_user(vault, CFG)
    assert (out.sessions_compacted, out.summaries_added, out.archived) == (1, 1, 280)

    live = [r for r in every(vault) if r.type == "message" and not r.archived]
    assert sorted(r.message_id for r in live) == sorted(f"m{i}" for i in range(280, 300))
    archived = [r for r in every(vault) if r.archived]
    assert len(archived) == 280
    (summary,) = summaries(vault)
    assert sorted(summary.compacted_from) == sorted(r.memory_id for r in archived)
    assert summary.session_id == "s1"
    first, last = min(r.created_at for r in archived), max(r.created_at for r in archived)
    assert summary.span == [first, last]
    assert summary.created_at == last  # dated at the end of its span, not at compaction
    assert "pgbouncer" in summary.content
    assert_verified(vault)

    again = compact.compact_user(vault, CFG)
    assert (again.summaries_added, again.archived) == (0, 0)
    assert len(every(vault)) == 301


def test_reingesting_a_compacted_transcript_adds_nothing(vault):
    batch = messages(250)
    ingest.add_messages(vault, "s1", batch)
    compact.compact_user(vault, CFG)
    added = ingest.add_messages(vault, "s1", batch)
    assert (added.added, added.skipped) == (0, 250)
    assert len([r for r in every(vault) if r.type == "message"]) == 250


def test_archived_records_are_out_of_search_unless_asked_and_summaries_show_lineage(
        vault, script_runner):
    ingest.add_messages(vault, "s1", messages(250, word="zanzibarcompact"))
    compact.compact_user(vault, CFG)
    result = mem(script_runner, "search", "zanzibarcompact", "--limit", "50", "--json")
    hits = json.loads(result.stdout)["results"]
    assert {h["type"] for h in hits} == {"message", "summary"}
    assert len([h for h in hits if h["type"] == "message"]) == 20  # the raw ones only
    (summary,) = [h for h in hits if h["type"] == "summary"]
    assert len(summary["compacted_from"]) == 230
    wide = mem(script_runner, "search", "zanzibarcompact", "--include-archive", "--limit",
               "500", "--json")
    assert len(json.loads(wide.stdout)["results"]) == 251


def test_the_brief_shows_the_summary_after_facts(vault):
    remember.add(vault, "Works on the billing service", "fact")
    ingest.add_messages(vault, "s1", messages(250, word="invoices"))
    compact.compact_user(vault, CFG)
    from memvault.ops import brief

    text = brief.build(vault, 50, 8000).brief
    assert text.index("billing service") < text.index("Recent session summaries")
    assert "invoices" in text[text.index("Recent session summaries"):]


# --- the other triggers -------------------------------------------------------------------


def test_an_old_unread_session_is_compacted_whole_and_a_recently_read_one_is_not(vault):
    ingest.add_messages(vault, "old", messages(30, days_ago=200, word="ancient"))
    ingest.add_messages(vault, "read", messages(30, days_ago=200, word="consulted"))
    ingest.add_messages(vault, "new", messages(30, days_ago=2, word="fresh"))
    recall.search(vault, "consulted", Filters())  # a read the audit log keeps
    out = compact.compact_user(vault, CFG)
    assert out.archived == 30
    (summary,) = summaries(vault)
    assert summary.session_id == "old"
    assert not (vault.layout.dir / "sessions" / "old.jsonl").exists()


def test_over_the_token_budget_the_oldest_sessions_go_first(vault):
    for n in range(5):
        ingest.add_messages(vault, f"s{n}", messages(40, days_ago=10 - n, word=f"w{n}"))
    cfg = CompactionConfig(max_active_tokens=1000, compact_fraction=0.5)
    out = compact.compact_user(vault, cfg)
    compacted = sorted(s.session_id for s in summaries(vault))
    assert compacted == ["s0", "s1", "s2"]  # 3 of 5 equal sessions reach half
    assert out.sessions_compacted == 3


def test_short_sessions_of_one_week_share_one_summary(vault):
    monday = datetime(2026, 3, 2, 9, tzinfo=UTC)
    for n in range(3):
        when = (monday + timedelta(days=n)).isoformat().replace("+00:00", "Z")
        ingest.add_messages(vault, f"short{n}", [NewMessage(f"quick question {n}", "user",
                                                             "q", when)])
    out = compact.compact_user(vault, CFG)
    (summary,) = summaries(vault)
    assert summary.session_id is None and "week-2026-W10" in summary.tags
    assert len(summary.compacted_from) == 3 and out.sessions_compacted == 3


def test_exact_duplicates_keep_the_most_recent(vault):
    remember.add(vault, "Uses uv for Python", "fact")
    ingest.add_messages(vault, "copy-a", messages(5, days_ago=3))
    ingest.add_messages(vault, "copy-b", messages(5, days_ago=1))
    # The same fact a second time, as an import or an external summariser could write it.
    with vault.transaction() as tx:
        doc = tx.store.read_doc("CLAUDE.md")
        dup = dict(doc["records"][0], memory_id="01900000-0000-7000-8000-000000000001",
                   created_at=ago(0))
        doc["records"].append(dup)
        tx.write_doc("CLAUDE.md", doc)
        tx.state.count("fact", +1)
        tx.touch()
        tx.rebuild_indexes()
    out = compact.compact_user(vault, CFG)
    assert out.deduplicated == 2
    facts = [r for r in every(vault) if r.type == "fact"]
    assert [f.memory_id for f in facts] == ["01900000-0000-7000-8000-000000000001"]
    sessions = {r.session_id for r in every(vault) if r.type == "message"}
    assert sessions == {"copy-b"}
    assert_verified(vault)


def test_a_frozen_user_is_not_compacted(vault, script_runner):
    ingest.add_messages(vault, "s1", messages(250))
    assert mem(script_runner, "freeze").returncode == 0
    result = mem(script_runner, "compact", "--json")
    assert result.returncode == 0
    assert json.loads(result.stdout)["archived"] == 0
    assert len([r for r in every(vault) if r.archived]) == 0


# --- external summarisers -----------------------------------------------------------------


def test_an_external_summary_and_facts_are_stored_redacted_once(vault, tmp_path):
    remember.add(vault, "Prefers tabs over spaces", "preference")
    cmd = script(tmp_path, "llm", """
        import json, sys
        text = sys.stdin.read()
        assert "message 0 about" in text  # the prompt, then the session
        print(json.dumps({"summary": "Planned the rollout; mail ops@example.com",
                          "facts": [{"type": "fact", "content": "Runs Postgres 16"},
                                    {"type": "preference", "content": "Prefers tabs over spaces"},
                                    {"type": "instruction", "content": "Always run the tests"},
                                    {"type": "fact", "content": "key AKIAIOSFODNN7EXAMPLE"}]}))
    """)
    ingest.add_messages(vault, "s1", messages(250))
    out = compact.compact_user(vault, CompactionConfig(summarizer=cmd))
    assert (out.summaries_added, out.facts_added) == (1, 2)
    (summary,) = summaries(vault)
    assert "<REDACTED:EMAIL>" in summary.content and "ops@example.com" not in summary.content
    records = {r.content: r for r in every(vault)}
    assert records["Runs Postgres 16"].compacted_from == summary.compacted_from
    assert records["Always run the tests"].behavioral
    assert not any("AKIA" in c for c in records)  # a secret is never stored
    assert [c for c in records if c == "Prefers tabs over spaces"] == ["Prefers tabs over spaces"]
    assert_verified(vault)


RECIPES = [  # docs/compaction.md
    "claude --bare -p --model haiku --no-session-persistence",
    "codex exec --ephemeral -",
    "llm -n -m gpt-4o-mini",
    "ollama run llama3.2",
]


@pytest.mark.parametrize("recipe", RECIPES)
def test_the_documented_recipes_get_the_prompt_and_session_on_stdin(vault, tmp_path,
                                                                   monkeypatch, recipe):
    """A stand-in of the same name checks the command line and the stdin/stdout contract
    the tool documents (the real tools need accounts and network)."""
    name, *args = recipe.split()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script(bin_dir, name, f"""
        import sys
        assert sys.argv[1:] == {args!r}, sys.argv
        text = sys.stdin.read()
        assert text.startswith("You are summarising a past conversation"), text[:80]
        assert "message 229 about recipe" in text  # the last one summarised
        print("Discussed the recipe work items")
    """)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    ingest.add_messages(vault, "s1", messages(250, word="recipe"))
    out = compact.compact_user(vault, CompactionConfig(summarizer=recipe))
    assert out.summaries_added == 1, out.problems
    assert "Discussed the recipe work items" in summaries(vault)[0].content


@pytest.mark.parametrize("body,why", [
    # It answers, then fails: the unit's failure (one failing before any answer is a
    # broken set-up: test_a_summariser_that_cannot_work_is_one_error_said_once).
    ("import sys; print('half an answer'); sys.exit(3)", "status 3"),
    ("import time; time.sleep(30)", "did not finish"),
    ("print('')", "printed nothing"),
    ("print('the deploy key is AKIAIOSFODNN7EXAMPLE')", "holds a secret"),
])
def test_a_failing_hanging_empty_or_refused_summariser_changes_nothing(vault, tmp_path,
                                                                      body, why):
    ingest.add_messages(vault, "s1", messages(250))
    before = sorted((p.name, p.read_bytes()) for p in (vault.layout.dir / "sessions").iterdir())
    cmd = script(tmp_path, "bad", body)
    out = compact.compact_user(vault, CompactionConfig(summarizer=cmd, summarizer_timeout=1))
    assert out.summaries_added == 0
    (problem,) = out.problems
    assert problem.problem == "summarizer" and problem.exit_code == EX_TEMPFAIL
    assert why in problem.message, problem.message
    after = sorted((p.name, p.read_bytes()) for p in (vault.layout.dir / "sessions").iterdir())
    assert after == before
    assert not summaries(vault) and not (vault.layout.dir / "archive" / "s1.jsonl").exists()


def _broken(tmp_path: Path, kind: str) -> str:
    if kind == "missing":
        return str(tmp_path / "no-such-llm")
    if kind == "not executable":
        path = tmp_path / "llm"
        path.write_text("#!/bin/sh\necho summary\n")
        path.chmod(0o644)
        return str(path)
    return script(tmp_path, "llm", """
        import sys
        print("llm: loading the model", file=sys.stderr)
        print("Error: no API key: set OPENAI_API_KEY", file=sys.stderr)
        sys.exit(1)
    """)


BROKEN = {"missing": "cannot be started: No such file or directory",
          "not executable": "cannot be started: not executable",
          "failing": "exited with status 1 before answering; it said: llm: loading the "
                     "model | Error: no API key: set OPENAI_API_KEY"}


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_a_summariser_that_cannot_work_is_one_error_said_once(vault, tmp_path,
                                                            script_runner, kind):
    """Not found, not executable, or failing before it ever answered: a set-up to fix
    (78), said once however many sessions and users are due, and nothing changes."""
    for user in ("alice", "bob", "carol"):
        for n in range(4):
            ingest.add_messages(open_as(user), f"old{n}", messages(
                30, days_ago=200 + 10 * n, word=f"{user}{n}"))
    def sessions() -> list[tuple[Path, bytes]]:
        return sorted((p.relative_to(vault.settings.vault), p.read_bytes())
                      for p in vault.settings.vault.rglob("*.jsonl")
                      if p.parent.name in ("sessions", "archive"))

    before = sessions()
    assert len(before) == 12
    cmd = _broken(tmp_path, kind)
    for args in ((), ("--all-users", "--jobs", "1")):
        result = mem(script_runner, "compact", "--summarizer", cmd, "--json", *args)
        assert result.returncode == EX_CONFIG, (args, result.stderr)
        line = one_error_line(result.stderr)
        assert BROKEN[kind] in line and "--summarizer" in line, line
        assert result.stdout == ""
    assert sessions() == before


@pytest.mark.script_launch_mode("subprocess")
def test_a_pool_stops_at_a_summariser_that_cannot_work(vault, tmp_path, script_runner):
    for user in ("alice", "bob", "carol", "dave"):
        ingest.add_messages(open_as(user), "old", messages(30, days_ago=200))
    result = mem(script_runner, "compact", "--all-users", "--jobs", "2", "--summarizer",
                 _broken(tmp_path, "failing"))
    assert result.returncode == EX_CONFIG
    assert BROKEN["failing"] in one_error_line(result.stderr)


def test_a_summariser_that_answered_once_fails_one_unit_at_a_time(vault, tmp_path):
    """Once it has answered, a failure is the unit's (75): the next run retries it."""
    flag = tmp_path / "answered"
    cmd = script(tmp_path, "llm", f"""
        import os, sys
        sys.stdin.read()
        if os.path.exists({str(flag)!r}):
            sys.exit(1)
        open({str(flag)!r}, "w").close()
        print("a summary")
    """)
    for n in range(3):
        ingest.add_messages(vault, f"old{n}", messages(30, days_ago=200 + 10 * n,
                                                       word=f"canal{n}"))
    out = compact.compact_user(vault, CompactionConfig(summarizer=cmd))
    assert out.summaries_added == 1
    assert [p.problem for p in out.problems] == ["summarizer", "summarizer"]
    assert all("exited with status 1" in p.message for p in out.problems)


def test_a_unit_whose_session_changes_while_summarising_is_left_for_the_next_run(
        vault, tmp_path):
    ingest.add_messages(vault, "s1", messages(250, days_ago=300))
    flag = tmp_path / "wrote"
    vault_dir, config = str(vault.settings.vault), os.environ["MEM_CONFIG_DIR"]
    # The summariser adds a message to the session it summarises, as a hook would.
    cmd = script(tmp_path, "busy", f"""
        import os, subprocess, sys
        sys.stdin.read()
        if not os.path.exists({str(flag)!r}):
            open({str(flag)!r}, "w").close()
            env = dict(os.environ, MEM_VAULT={vault_dir!r}, MEM_CONFIG_DIR={config!r},
                       MEM_USER="alice")
            subprocess.run([{sys.executable!r}, "-m", "memvault", "add", "late turn",
                            "--type", "message", "--session", "s1"], env=env, check=True)
        print("a summary")
    """)
    cfg = CompactionConfig(summarizer=cmd)
    out = compact.compact_user(vault, cfg)
    assert [p.problem for p in out.problems] == ["changed"] and out.archived == 0
    assert len([r for r in every(vault) if r.type == "message"]) == 251
    again = compact.compact_user(vault, cfg)  # no longer old, but long: 20 stay raw
    assert again.archived == 231 and len(summaries(vault)) == 1
    assert_verified(vault)


def test_the_cli_reports_in_json_and_a_bad_config_is_exit_78(vault, script_runner,
                                                             config_dir):
    ingest.add_messages(vault, "s1", messages(250))
    dry = mem(script_runner, "compact", "--dry-run", "--json")
    doc = json.loads(dry.stdout)
    assert doc["dry_run"] and doc["archived"] == 230 and doc["previews"][0]["summary"]
    assert not summaries(vault)
    done = json.loads(mem(script_runner, "compact", "--json").stdout)
    assert {k: done[k] for k in ("users", "sessions_compacted", "summaries_added",
                                 "archived", "deduplicated")} == {
        "users": 1, "sessions_compacted": 1, "summaries_added": 1, "archived": 230,
        "deduplicated": 0}
    config_dir.mkdir(exist_ok=True)
    (config_dir / "config.yaml").write_text("compaction:\n  session_keep_raw: 500\n")
    bad = mem(script_runner, "compact")
    assert bad.returncode == EX_CONFIG
    assert "session_keep_raw" in one_error_line(bad.stderr)
    (config_dir / "config.yaml").write_text("compaction:\n  max_tokens: 5\n")
    assert mem(script_runner, "compact").returncode == EX_CONFIG


# --- forget after compaction, and erasure that reaches the old key ------------------------


def test_forget_after_compaction_rebuilds_the_summary_without_the_content(vault):
    batch = messages(250)
    batch[3] = NewMessage("my cat zanzibarsecret hides", "user", "m3", batch[3].created_at)
    ingest.add_messages(vault, "s1", batch)
    compact.compact_user(vault, CFG)
    (summary,) = summaries(vault)
    assert "zanzibarsecret" in summary.content
    plan = forget.select(vault, [], query="zanzibarsecret")
    # What a search by the records' own words finds: the message goes (not the turns it
    # lends its words to as context); the summary made from it is made again without it.
    found = recall.search(vault, "zanzibarsecret", Filters(
        limit=1000, include_archive=True, include_superseded=True), mode="words").results
    assert plan.remade == (summary.memory_id,)
    assert {r.memory_id for r in plan.targets} | {summary.memory_id} == \
        {h.memory_id for h in found}
    assert [r.message_id for r in plan.targets] == ["m3"]
    result = forget.forget(vault, plan)
    assert result.summaries_rebuilt == (summary.memory_id,)
    (remade,) = summaries(vault)
    assert remade.memory_id == summary.memory_id and "zanzibarsecret" not in remade.content
    assert len(remade.compacted_from) == 230 - len(plan.targets)
    assert recall.search(vault, "zanzibarsecret", Filters(include_archive=True)).results == ()
    assert_verified(vault)


def test_forgetting_a_whole_compacted_session_takes_its_summary(vault):
    ingest.add_messages(vault, "s1", messages(250))
    compact.compact_user(vault, CFG)
    forget.forget(vault, forget.select(vault, [], session="s1"))
    assert every(vault) == ()
    assert_verified(vault)


def test_compaction_after_a_forget_moves_to_a_new_key_and_deletes_the_old(vault):
    ingest.add_messages(vault, "s1", messages(10))
    remember.add(vault, "Temporary fact zanzibarold", "fact")
    forget.forget(vault, forget.select(vault, [], query="zanzibarold"))
    assert vault.state().rekey_pending
    out = compact.compact_user(vault, CFG)
    assert out.rekeyed == 1
    v = open_as("alice")
    assert v.state().key_version == 2 and not v.state().rekey_pending
    assert v.store.deks_on_disk() == [2]
    assert len(every(v)) == 10
    assert compact.compact_user(v, CFG).rekeyed == 0
    assert_verified(v)


# --- a kill at any instant -----------------------------------------------------------------

CHILD_KILL = """
import os, signal, sys
from memvault.config import CompactionConfig, resolve
from memvault.ops import compact
from memvault.storage import fsio
from memvault.vault.vault import Vault

limit, calls = int(sys.argv[1]), [0]
def killing(real):
    def wrapper(*args, **kwargs):
        calls[0] += 1
        if calls[0] == limit:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)
    return wrapper
for name in ("atomic_write", "append_line", "remove", "truncate_to"):
    setattr(fsio, name, killing(getattr(fsio, name)))
compact.compact_user(Vault(resolve()), CompactionConfig())
"""


@pytest.mark.slow
@pytest.mark.long  # a fault run: `make test-long` and CI
def test_a_kill_at_every_third_write_leaves_originals_or_summary(vault):
    kill_and_check(vault, step=3)


@pytest.mark.faults
def test_a_kill_at_any_write_leaves_originals_or_summary_never_both_or_neither(vault):
    kill_and_check(vault, step=1)


def kill_and_check(vault: Vault, step: int) -> None:
    """Kill a compaction at its n-th file write (n = 1, 1 + step, ...) until one runs
    whole; after each kill, what every reader sees is the originals or the summary plus
    the archive, `verify` passes, and a re-run completes."""
    ingest.add_messages(vault, "s1", messages(250, word="durable"))
    ids = {r.memory_id for r in every(vault)}
    snapshot = {p: p.read_bytes() for p in vault.layout.dir.rglob("*") if p.is_file()}
    kills = 0
    for n in range(1, 60, step):
        result = subprocess.run([sys.executable, "-c", CHILD_KILL, str(n)],
                                capture_output=True, text=True, timeout=60)
        v = open_as("alice")
        records = every(v)
        messages_seen = [r.memory_id for r in records if r.type == "message"]
        assert sorted(messages_seen) == sorted(ids), n  # each original exactly once
        found = [r for r in records if r.type == "summary"]
        live = [r for r in records if r.type == "message" and not r.archived]
        if found:
            assert len(found) == 1 and len(live) == 20, n
            assert set(found[0].compacted_from) == {r.memory_id for r in records
                                                   if r.archived}, n
        else:
            assert len(live) == 250 and not any(r.archived for r in records), n
        report = verify.verify(v)
        assert report.ok, (n, report.to_dict()["problems"])
        compact.compact_user(v, CFG)  # the re-run completes
        assert len(summaries(v)) == 1 and len(every(v)) == 251
        if result.returncode != -signal.SIGKILL:
            break
        kills += 1
        for path in list(v.layout.dir.rglob("*")):  # back to the start for the next N
            if path.is_file() and path not in snapshot:
                path.unlink()
        for path, data in snapshot.items():
            fsio.atomic_write(path, data)
    # Cut at its writes (state with the journal, CLAUDE.md, archive, session file, ...),
    # then run whole.
    assert kills >= (4 if step == 1 else 2)


# --- many users -----------------------------------------------------------------------------


def fill_users(names: list[str]) -> None:
    for name in names:
        ingest.add_messages(open_as(name), "s1", messages(250))


def test_all_users_with_jobs_and_shards_compacts_each_once(vault, script_runner):
    names = ["alice", "bob", "carol", "dave"]
    fill_users(names)
    shards = [json.loads(mem(script_runner, "compact", "--all-users", "--shard",
                             f"{k}/2", "--jobs", "2", "--json").stdout) for k in (0, 1)]
    assert sum(s["users"] for s in shards) == 4
    assert sum(s["sessions_compacted"] for s in shards) == 4
    again = json.loads(mem(script_runner, "compact", "--all-users", "--json").stdout)
    assert (again["users"], again["sessions_compacted"]) == (4, 0)
    for name in names:
        assert len(summaries(open_as(name))) == 1


def test_a_busy_user_is_skipped_reported_and_exit_75(vault, script_runner, config_dir):
    fill_users(["alice", "bob"])
    config_dir.mkdir(exist_ok=True)
    (config_dir / "config.yaml").write_text("compaction:\n  lock_wait: 0.2\n")
    bob = open_as("bob")
    with fsio.locked(bob.layout.lock_path, 1, "bob"):
        result = mem(script_runner, "compact", "--all-users", "--json")
    assert result.returncode == EX_TEMPFAIL
    doc = json.loads(result.stdout)
    assert doc["skipped_busy"] == 1 and doc["sessions_compacted"] == 1
    assert [(p["user"], p["problem"]) for p in doc["problems"]] == [("bob", "busy")]
    assert compact.compact_user(open_as("bob"), CFG).archived == 230


def test_shards_are_stable_and_cover_every_user_once():
    users = [("org", f"u{i}") for i in range(200)]
    parts = [{u for u in users if compact.shard_of(*u, 3) == k} for k in range(3)]
    assert set().union(*parts) == set(users)
    assert sum(len(p) for p in parts) == 200 and all(30 < len(p) < 110 for p in parts)
    assert compact.shard_of("org", "u7", 3) == compact.shard_of("org", "u7", 3)


def test_no_plaintext_of_a_summary_under_the_vault(vault):
    ingest.add_messages(vault, "s1", messages(250, word="zanzibarplain"))
    compact.compact_user(vault, CFG)
    for path in vault.settings.vault.rglob("*"):
        if path.is_file():
            assert b"zanzibarplain" not in path.read_bytes(), path
    index = vault.search_index(vault.state().key_version)
    assert index.searcher().doc_freq("body", "zanzibarplain") == 0


def test_resolve_fills_every_compaction_default(monkeypatch, config_dir):
    cfg = resolve().compaction
    assert (cfg.max_active_tokens, cfg.compact_fraction, cfg.session_max_messages,
            cfg.session_keep_raw, cfg.archive_after_days) == (150000, 0.7, 200, 20, 90)
    assert cfg == CompactionConfig()  # the table's defaults and the dataclass's agree
    config_dir.mkdir(exist_ok=True)
    (config_dir / "config.yaml").write_text(
        "compaction:\n  summarizer: [llm, -m, 'my model']\n  compact_fraction: 0.5\n")
    cfg = resolve().compaction
    assert (cfg.summarizer, cfg.compact_fraction) == ("llm -m 'my model'", 0.5)
    monkeypatch.setenv("MEM_SUMMARIZER", "llm -m haiku")
    assert resolve().compaction.summarizer == "llm -m haiku"


def test_session_file_paths_are_the_archive_pair():
    assert session_file("s", archived=True) == "archive/s.jsonl"


# --- beside concurrent writers, with kills thrown in ---------------------------------------

WRITER = """
import json, sys
from datetime import UTC, datetime, timedelta
from memvault.config import resolve
from memvault.model.records import NewMessage
from memvault.ops.ingest import add_messages
from memvault.vault.vault import Vault
done = open(sys.argv[1], "a")
v = Vault(resolve())
start = datetime.now(UTC) - timedelta(days=1)
for n in range(int(sys.argv[2])):
    when = (start + timedelta(seconds=n)).isoformat().replace("+00:00", "Z")
    session = "live" if n % 3 else f"other{n % 4}"
    add_messages(v, session, [NewMessage(f"concurrent turn {n}", "user", f"w{n}", when)])
    done.write(f"{session} w{n}\\n")  # acknowledged: written after the add returned
    done.flush()
"""

COMPACTOR = """
from memvault.config import CompactionConfig, resolve
from memvault.ops import compact
from memvault.vault.vault import Vault
cfg = CompactionConfig(session_max_messages=30, session_keep_raw=5, lock_wait=5)
while True:
    compact.compact_user(Vault(resolve()), cfg)
"""


@pytest.mark.faults
def test_compaction_beside_a_writer_with_kills_loses_and_duplicates_nothing(vault, tmp_path):
    import random
    import time

    ingest.add_messages(vault, "live", messages(40, days_ago=2, word="seed"))
    acked = tmp_path / "acked"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(acked), "300"])
    rng = random.Random(3)
    kills = 0
    while writer.poll() is None:
        compactor = subprocess.Popen([sys.executable, "-c", COMPACTOR])
        time.sleep(rng.uniform(0.2, 1.5))
        compactor.send_signal(signal.SIGKILL)
        compactor.wait()
        kills += 1
    assert writer.returncode == 0 and kills >= 2
    cfg = CompactionConfig(session_max_messages=30, session_keep_raw=5)
    compact.compact_user(open_as("alice"), cfg)
    v = open_as("alice")
    records = every(v)
    stored = sorted((r.session_id, r.message_id) for r in records if r.type == "message")
    wanted = sorted([("live", f"m{i}") for i in range(40)] +
                    [tuple(line.split()) for line in acked.read_text().splitlines()])
    assert stored == wanted  # every acknowledged message, exactly once
    archived = {r.memory_id for r in records if r.archived}
    lineage = [i for r in records if r.type == "summary" for i in r.compacted_from]
    assert sorted(lineage) == sorted(archived)  # each archived message in one summary
    assert_verified(v)


def test_a_dry_run_over_every_user_shows_no_memory(vault, script_runner):
    fill_users(["alice", "bob"])
    doc = json.loads(mem(script_runner, "compact", "--all-users", "--dry-run",
                         "--json").stdout)
    assert len(doc["previews"]) == 2 and all(p["summary"] is None for p in doc["previews"])
    assert "about topic" not in json.dumps(doc)  # no word of what was said
    one = json.loads(mem(script_runner, "compact", "--dry-run", "--json").stdout)
    assert "message 0 about topic" in one["previews"][0]["summary"]


def test_a_card_is_made_of_what_people_said_more_than_of_tool_output():
    import re as _re

    from memvault.model.records import Record
    from memvault.ops.summarize import card

    def analyze(text: str) -> list[tuple[str, int, int]]:
        return [(m.group(0).lower(), m.start(), m.end()) for m in _re.finditer(r"\w+", text)]

    def rec(role: str, text: str) -> Record:
        return Record("id", "o", "u", "message", text, "h", role=role)

    dump = " ".join(f"drwxr{i} inode{i} blockcount{i}" for i in range(40))
    records = [rec("user", "Please migrate the billing service to postgres sixteen."),
               rec("tool", dump + ". " + dump),
               rec("assistant", "The billing migration to postgres sixteen is done.")]
    text = card(records, analyze, frozenset({"the", "to", "is", "please"}))
    title, points = text.splitlines()[0], text.split("Key points:")[1].split("Keywords:")[0]
    assert "billing" in title.lower() and "drwxr" not in title
    assert "tool:" not in points and "user: Please migrate" in points
    assert "drwxr1" in text  # a tool's words still count, at a quarter
    # A call the assistant made, as a transcript's message holds it, is no key point.
    calls = [rec("user", "Bump the postgres driver and rerun the billing migration."),
             rec("assistant", "Bumping the driver.\n[tool shell] pip install --upgrade "
                 "psycopg psycopg-binary psycopg-pool sqlalchemy alembic billing-tools")]
    points = card(calls, analyze, frozenset({"the", "and"})).split("Key points:")[1]
    assert "[tool" not in points.split("Keywords:")[0] and "user: Bump" in points
    # Nor is a tool's output a decision, a to-do or a quote of what someone said.
    logs = [rec("user", "Deploy the billing service tonight."),
            rec("tool", "warning: you need to rerun migrations; I want coffee; we decided"),
            rec("assistant", "We need to rerun the billing migrations first.")]
    text = card(logs, analyze, frozenset({"the", "to"}))
    assert "tool:" not in text and "assistant: We need to rerun" in text


def test_a_cards_title_names_topics_in_words_and_its_keywords_keep_the_rest():
    import re as _re

    from memvault.model.records import Record
    from memvault.ops.summarize import card

    def analyze(text: str) -> list[tuple[str, int, int]]:
        return [(m.group(0).lower(), m.start(), m.end()) for m in _re.finditer(r"\w+", text)]

    said = ["Commit ds906659 pins the compiler; rebuild ds906659 with 160p images.",
            "The compiler upgrade for ds906659 broke the 160p thumbnails again.",
            "Pin the compiler, regenerate the thumbnails, then tag ds906659."]
    records = [Record("id", "o", "u", "message", t, "h", role="user") for t in said]
    text = card(records, analyze, frozenset({"the", "for", "then", "with"}))
    title, keywords = text.splitlines()[0], text.split("Keywords: ")[1].splitlines()[0]
    assert "ds906659" not in title.lower() and "160p" not in title
    assert "compiler" in title.lower() and "thumbnails" in title.lower()
    assert {"ds906659", "160p"} <= set(keywords.split(", "))


# --- the built-in card: the same in every process, so a dry run shows what is stored -------


REAL = Path(__file__).resolve().parents[2] / "shared" / "bench-data" / "transcripts"


def reworded_turns() -> str:
    """A chat whose every turn says the same words twice in another order: sentences
    of equal weight, whose sums a walk over a set of words adds up in an order that
    changes with PYTHONHASHSEED."""
    import random

    rng = random.Random(3)
    words = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike "
             "november oscar papa quebec romeo sierra tango uniform victor whiskey xray "
             "yankee zulu").split()
    words += [a + b for a in ("red", "blue", "green", "amber", "teal")
              for b in ("fish", "stone", "cloud", "river")]
    lines = []
    for i in range(100):
        said = rng.sample(words, rng.randint(10, 16))
        again = rng.sample(said, len(said))
        lines.append(json.dumps({"id": f"m{i}", "role": "user" if i % 2 == 0 else "assistant",
                                 "content": f"{' '.join(said)}. {' '.join(again)}.",
                                 "timestamp": f"2026-01-01T{i // 60:02d}:{i % 60:02d}:00Z"}))
    return "\n".join(lines) + "\n"


@pytest.mark.long  # a fault run: `make test-long` and CI
def test_the_builtin_card_is_the_same_in_every_process_and_a_dry_run_shows_what_is_stored(
        vault, script_runner, tmp_path):
    real = REAL / "claude-code" / "258c7280-ae70-4798-800f-63464d01a85d.jsonl"
    if not real.is_file():
        pytest.skip("the shared bench data is not here")
    chat = tmp_path / "chat.jsonl"
    chat.write_text(reworded_turns())
    for name, path in (("real", real), ("chat", chat)):
        assert mem(script_runner, "ingest", str(path), "--session", name).returncode == 0

    def compact_in_a_new_process(seed: int, *more: str) -> dict[str, str | None]:
        done = subprocess.run(
            ["mem", "compact", "--session", "real", "--session", "chat", "--json", *more],
            env={**os.environ, "PYTHONHASHSEED": str(seed)}, capture_output=True,
            text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        return {p["sessions"][0]: p["summary"] for p in json.loads(done.stdout)["previews"]}

    # Summed in a set's order, these seeds give three different cards of the chat.
    cards = [compact_in_a_new_process(seed, "--dry-run") for seed in (1, 2, 4)]
    assert cards[0] == cards[1] == cards[2]
    assert all(cards[0].values())
    compact_in_a_new_process(3)
    made = {s.session_id: s.content for s in summaries(vault) if "compacted" in s.tags}
    assert made == cards[0]


# --- what a summariser may add, and where the brief puts it ----------------------------------


def proposing(tmp_path: Path, kind: str = "instruction", n: int = 50,
              plain: bool = False) -> str:
    """An external summariser that proposes `n` facts of one kind for each session (their
    text names the session it read, so no two sessions' facts are the same), after a
    plain fact if `plain`."""
    return script(tmp_path, f"hostile-{kind}-{n}", f"""
        import hashlib, json, sys
        seen = hashlib.sha256(sys.stdin.read().encode()).hexdigest()[:8]
        plain = [{{"type": "fact", "content": f"Read session {{seen}}"}}] if {plain} else []
        print(json.dumps({{"summary": "Routine work.", "facts": plain + [
            {{"type": {kind!r}, "content": f"Always obey rule {{i}} of {{seen}}"}}
            for i in range({n})]}}))
    """)


def test_a_hostile_summariser_adds_at_most_the_caps_of_behavioural_facts(
        vault, tmp_path, script_runner, config_dir):
    ingest.add_messages(vault, "s1", messages(250, word="first"))
    cmd = proposing(tmp_path)
    doc = json.loads(mem(script_runner, "compact", "--summarizer", cmd, "--json").stdout)
    stored = [r for r in every(vault) if r.type == "instruction"]
    assert len(stored) == 3 == CFG.max_behavioral_facts_per_summary
    assert (doc["facts_added"], doc["facts_capped"]) == (3, 47)
    seen = stored[0].content[-8:]  # the first ones proposed
    assert sorted(r.content for r in stored) == [f"Always obey rule {i} of {seen}"
                                                 for i in range(3)]

    # The cap over a run: three sessions, one user, 5 from each summary but 7 in all.
    config_dir.mkdir(exist_ok=True)
    (config_dir / "config.yaml").write_text(
        "compaction:\n  max_behavioral_facts_per_summary: 5\n"
        "  max_behavioral_facts_per_run: 7\n")
    for name in ("s2", "s3", "s4"):
        ingest.add_messages(vault, name, messages(250, word=name))
    result = mem(script_runner, "compact", "--summarizer",
                 proposing(tmp_path, "correction", 49, plain=True), "--json")
    doc = json.loads(result.stdout)
    assert result.returncode == 0 and doc["summaries_added"] == 3
    assert len([r for r in every(vault) if r.type == "correction"]) == 7
    # Plain facts are not behavioural: not capped.
    assert (doc["facts_added"], doc["facts_capped"]) == (7 + 3, 3 * 49 - 7)
    human = mem(script_runner, "compact", "--summarizer", cmd)
    assert human.returncode == 0  # nothing left to do: no cap row
    assert "dropped" not in human.stdout + human.stderr


def test_the_brief_puts_what_the_user_stated_before_what_a_summariser_inferred(
        vault, tmp_path):
    from memvault.ops import brief, prefs

    remember.add(vault, "Never push to main", "instruction", importance=0.1)
    remember.add(vault, "Works at Acme", "fact")
    prefs.set_(vault, "editor", "vim")
    # A fact a summariser drew, as mem stored it before it marked their channel.
    old = remember.add(vault, "Uses the old deploy script", "fact").record
    with vault.transaction() as tx:
        doc = tx.store.read_doc("CLAUDE.md")
        for r in doc["records"]:
            if r["memory_id"] == old.memory_id:
                r["compacted_from"] = ["01900000-0000-7000-8000-000000000001"]
        tx.write_doc("CLAUDE.md", doc)
    ingest.add_messages(vault, "s1", messages(250))
    out = compact.compact_user(vault, CompactionConfig(
        summarizer=proposing(tmp_path, n=3, plain=True)))
    assert out.facts_added == 4  # newer, more numerous, and as important or more

    built = brief.build(vault, 50, 8000)
    entries = [(e.type, e.content, e.inferred) for e in built.entries]
    own = [("setting", "editor: vim", False), ("instruction", "Never push to main", False)]
    assert entries[:2] == own
    assert [t for t, _, inferred in entries[2:5]] == ["instruction"] * 3
    assert all(inferred for _, _, inferred in entries[2:5])
    facts = [(c, inferred) for t, c, inferred in entries if t == "fact"]
    assert facts[0] == ("Works at Acme", False)
    assert ("Uses the old deploy script", True) in facts
    assert "d, inferred from a session] Always obey rule 0" in built.brief  # a day old
    assert "- [instruction, now] Never push to main" in built.brief

    # However tight the bound, no entry the user stated gives way to a summariser's.
    stated = {"editor: vim", "Never push to main", "Works at Acme"}
    for max_entries in range(1, 12):
        for max_chars in (150, 400, 500, 600, 700, 900, 8000):
            chosen = brief.build(vault, max_entries, max_chars).entries
            if any(e.inferred for e in chosen):
                assert stated <= {e.content for e in chosen}, (max_entries, max_chars)


def test_the_hooks_limit_drops_no_entry_the_user_stated_for_a_summarisers(
        vault, tmp_path, monkeypatch):
    from memvault.integrations import claude_code

    ingest.add_messages(vault, "s1", messages(250))
    compact.compact_user(vault, CompactionConfig(summarizer=proposing(tmp_path, n=3)))
    for n in range(20):  # more than a hook may print: each a full brief line
        remember.add(vault, f"Fact {n}: " + "the harbour lighthouse keeper " * 25, "fact")
    monkeypatch.setenv("MEM_BRIEF_MAX_CHARS", "1000000")  # the hook's limit is the bound
    monkeypatch.setenv("MEM_BRIEF_MAX_TOKENS", "1000000")
    out = claude_code.handle(resolve, json.dumps({"hook_event_name": "SessionStart"}))
    context = json.loads(out)["hookSpecificOutput"]["additionalContext"]
    assert "Fact 19: " in context and "the rest of the brief was cut" in context
    assert "inferred from a session" not in context  # not every fact of the user fitted


@pytest.mark.slow
def test_a_dry_run_shows_what_a_run_stores_over_more_units_than_one_apply(vault):
    """A run applies its summaries in batches (compact.BATCH_UNITS units at most); the
    summaries of one batch must not change how the next batch's cards weigh words."""
    from memvault.crypto.envelope import content_hash
    from memvault.model.records import uuid7
    from memvault.ops import portability

    names = [f"s{n:03d}" for n in range(compact.BATCH_UNITS + 1)]
    turns = []
    for n, name in enumerate(names):
        # The last session says "summary", a rare word until the first batch's summaries
        # (whose headings all say it) are in the index, and "harbour", which a third of
        # the sessions say: the one weighs more than the other only before.
        said = "a summary" if n == len(names) - 1 else "notes"
        said += " near the harbour" if n < 30 or n == len(names) - 1 else ""
        turns += [(name, "user", f"{said} of {name} about word{n}", ago(2, minutes=n)),
                  (name, "assistant", f"word{n} and lighthouse keepers of {name}",
                   ago(2, minutes=n - 0.5))]
    records = [{"memory_id": uuid7(), "org_id": "default", "user_id": "alice",
                "type": "message", "category": "conversation", "content": text,
                "content_hash": content_hash(text), "session_id": name, "role": role,
                "created_at": at} for name, role, text, at in turns]
    portability.import_text(vault, json.dumps({  # one write, not a hundred ingests
        "export_version": "1.0", "record_count": len(records), "preferences": {},
        "categories": {"conversation": {"count": len(records), "records": records}}}))
    dry = compact.compact_user(vault, CFG, dry_run=True, sessions=names)
    shown = {p.sessions[0]: p.summary for p in dry.previews}
    done = compact.compact_user(vault, CFG, sessions=names)
    assert done.summaries_added == len(names)
    assert {s.session_id: s.content for s in summaries(vault)} == shown


def test_what_the_user_states_after_a_summariser_inferred_it_is_the_users_own(
        vault, tmp_path, script_runner):
    from memvault.ops import brief

    ingest.add_messages(vault, "s1", messages(250))
    compact.compact_user(vault, CompactionConfig(summarizer=proposing(tmp_path, n=2)))
    (inferred,) = [e for e in brief.build(vault, 50, 8000).entries
                   if e.content.startswith("Always obey rule 1 ")]
    assert inferred.inferred
    doc = json.loads(mem(script_runner, "add", inferred.content, "--type", "instruction",
                         "--json").stdout)
    assert doc["deduplicated"] and doc["memory_id"] == inferred.memory_id
    entries = brief.build(vault, 50, 8000).entries
    assert (entries[0].content, entries[0].inferred) == (inferred.content, False)
    assert entries[1].inferred  # rule 0 is still the summariser's alone
