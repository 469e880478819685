"""Ingest of transcripts that change under it: a live session read mid-message, files
added to a session, an agent's compaction summary (SPEC §6, §10)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pytest_console_scripts import ScriptRunner

from memvault.vault.vault import Vault
from tests.conftest import mem

SESSION = "5f1e1c3a-0d6e-4c55-9a51-7e0d8a1b2c3d"


def run_json(script_runner: ScriptRunner, *args: str) -> Any:
    result = mem(script_runner, *args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def stored(script_runner: ScriptRunner, session: str = SESSION) -> list[tuple[str, str]]:
    """The session's messages as (role, content), oldest first."""
    doc = run_json(script_runner, "list", "--session", session, "--limit", "1000",
                   "--type", "message")
    return [(r["role"], r["content"]) for r in sorted(doc["records"],
                                                      key=lambda r: r["created_at"])]


def claude_lines() -> list[dict[str, Any]]:
    """A Claude Code session whose assistant message is written as three lines (one per
    content block, all with the API message id msg_1), as Claude Code streams it."""
    def line(uuid: str, parent: str | None, kind: str, content: Any, second: int,
             message_id: str | None = None) -> dict[str, Any]:
        message: dict[str, Any] = {"role": kind, "content": content}
        if message_id:
            message["id"] = message_id
        return {"type": kind, "uuid": uuid, "parentUuid": parent, "sessionId": SESSION,
                "timestamp": f"2026-03-01T10:00:{second:02d}.000Z", "message": message}

    return [
        line("u1", None, "user", "Which port does the staging proxy listen on?", 1),
        line("a1", "u1", "assistant", [{"type": "text", "text": "Let me check the config."}],
             2, "msg_1"),
        line("a2", "a1", "assistant", [{"type": "tool_use", "id": "t1", "name": "Bash",
                                        "input": {"command": "grep port proxy.yaml"}}],
             3, "msg_1"),
        line("r1", "a2", "user", [{"type": "tool_result", "tool_use_id": "t1",
                                   "content": "port: 8443"}], 4),
        line("a3", "r1", "assistant", [{"type": "text", "text": "It listens on 8443."}],
             5, "msg_2"),
    ]


def write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_transcript_read_mid_message_then_whole_stores_what_a_whole_read_stores(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path) -> None:
    rows = claude_lines()
    live = write(tmp_path / f"{SESSION}.jsonl", rows[:2])  # msg_1 has only its text block
    first = run_json(script_runner, "ingest", str(live))
    assert first["messages_added"] == 2
    assert stored(script_runner)[-1] == ("assistant", "Let me check the config.")

    write(live, rows)  # the agent finished the message, and went on
    again = run_json(script_runner, "ingest", str(live))
    assert (again["messages_added"], again["messages_updated"]) == (2, 1)
    grown = stored(script_runner)

    whole_user = "bob"
    result = mem(script_runner, "ingest", str(live), "--json", "--user", whole_user)
    assert result.returncode == 0, result.stderr
    whole = run_json(script_runner, "list", "--session", SESSION, "--limit", "1000",
                     "--type", "message", "--user", whole_user)["records"]
    assert grown == [(r["role"], r["content"]) for r in sorted(
        whole, key=lambda r: r["created_at"])]
    assert any("grep port proxy.yaml" in content for _, content in grown)
    # The grown message is found by its new words, and only once.
    hits = run_json(script_runner, "search", "grep proxy.yaml")["results"]
    assert len([h for h in hits if "grep port" in h["content"]]) == 1
    # Read again, nothing changes.
    third = run_json(script_runner, "ingest", str(live))
    assert (third["messages_added"], third["messages_updated"]) == (0, 0)
    assert run_json(script_runner, "verify")["ok"] is True


def test_messages_without_ids_from_a_second_file_of_a_session_are_stored(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path) -> None:
    monday = tmp_path / "monday.jsonl"
    tuesday = tmp_path / "tuesday.jsonl"
    # Same role, same place in the file, no time: only what was said tells them apart.
    monday.write_text(json.dumps({"role": "user", "content": "the boiler was serviced"}) + "\n")
    tuesday.write_text(json.dumps({"role": "user", "content": "the gutter was cleaned"}) + "\n")
    for path in (monday, tuesday):
        report = run_json(script_runner, "ingest", str(path), "--session", "house")
        assert report["messages_added"] == 1, path.name
    again = run_json(script_runner, "ingest", str(tuesday), "--session", "house")
    assert (again["messages_added"], again["messages_skipped"]) == (0, 1)
    # Edited in place: the new line is a new message, the old one stays.
    tuesday.write_text(tuesday.read_text() + json.dumps(
        {"role": "user", "content": "the gutter was cleaned again"}) + "\n")
    assert run_json(script_runner, "ingest", str(tuesday),
                    "--session", "house")["messages_added"] == 1
    assert [c for _, c in stored(script_runner, "house")] == [
        "the boiler was serviced", "the gutter was cleaned", "the gutter was cleaned again"]


def compacted_session(tmp_path: Path) -> Path:
    rows = [
        {"type": "user", "uuid": "c1", "parentUuid": None, "sessionId": SESSION,
         "isCompactSummary": True, "timestamp": "2025-07-14T08:30:00.000Z",
         "message": {"role": "user", "content": "Summary: the team moved the "
                     "kestrel deployment to Frankfurt."}},
        {"type": "user", "uuid": "c2", "parentUuid": "c1", "sessionId": SESSION,
         "timestamp": "2025-07-14T08:31:00.000Z",
         "message": {"role": "user", "content": "Carry on with the migration plan."}},
    ]
    return write(tmp_path / "compacted.jsonl", rows)


def test_an_agent_summary_is_dated_when_written_and_counted(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path) -> None:
    report = run_json(script_runner, "ingest", str(compacted_session(tmp_path)))
    assert report["summaries_added"] == 1
    (summary,) = run_json(script_runner, "list", "--type", "summary")["records"]
    assert summary["created_at"] == "2025-07-14T08:30:00.000000Z"
    assert "kestrel" in summary["content"]
    before = run_json(script_runner, "list", "--type", "summary", "--before", "2025-08-01")
    assert [r["memory_id"] for r in before["records"]] == [summary["memory_id"]]


def test_a_forgotten_agent_summary_is_not_brought_back_by_ingesting_again(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path) -> None:
    transcript = compacted_session(tmp_path)
    run_json(script_runner, "ingest", str(transcript))
    (summary,) = run_json(script_runner, "list", "--type", "summary")["records"]
    result = mem(script_runner, "forget", summary["memory_id"], "--yes")
    assert result.returncode == 0, result.stderr
    again = run_json(script_runner, "ingest", str(transcript))
    assert again["summaries_added"] == 0
    assert run_json(script_runner, "list", "--type", "summary")["records"] == []
    assert "kestrel" not in mem(script_runner, "brief").stdout


def test_every_ignored_line_is_reported_with_its_reason(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path) -> None:
    rows = claude_lines()
    path = tmp_path / f"{SESSION}.jsonl"
    # A line being written when the file was read: no newline yet, not whole JSON.
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"type": "assist')
    doc = run_json(script_runner, "ingest", str(path))
    assert doc["ignored"].get("torn last line") == 1
    assert doc["lines_ignored"] == sum(doc["ignored"].values())
    again = mem(script_runner, "ingest", str(path), "--dry-run")
    assert "1 line ignored: 1 × torn last line" in again.stderr


# --- small things a user runs into ---------------------------------------------------------


def test_version(script_runner: ScriptRunner) -> None:
    from importlib.metadata import version

    result = mem(script_runner, "--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"mem {version('memvault')}"


def test_text_starting_with_a_dash_is_added_after_double_dash(
        script_runner: ScriptRunner, vault: Vault) -> None:
    added = mem(script_runner, "add", "--", "-rf removes a whole tree")
    assert added.returncode == 0, added.stderr
    hits = run_json(script_runner, "search", "removes tree")["results"]
    assert [h["content"] for h in hits] == ["-rf removes a whole tree"]


def test_a_query_without_a_searchable_word_says_so(
        script_runner: ScriptRunner, vault: Vault) -> None:
    assert mem(script_runner, "add", "the ferry leaves at noon").returncode == 0
    for query in ("???", "x" * 50):  # punctuation; one token too long to be a word
        result = mem(script_runner, "search", query, "--json")
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["results"] == []  # not the most recent items
        assert "no words to search for" in result.stderr
    # An empty query still lists the most recent items (SPEC §5).
    assert len(run_json(script_runner, "search", "")["results"]) == 1


def test_a_session_is_ingested_with_its_subagents(script_runner: ScriptRunner, vault: Vault,
                                                  tmp_path: Path) -> None:
    """What the SessionEnd hook hands over is the main transcript: the subagents' work,
    kept beside it, is stored with the session; the compaction agent's restatement is
    not."""
    real = Path(__file__).resolve().parents[2] / "shared" / "bench-data" / "transcripts"
    main = real / "claude-code" / "258c7280-ae70-4798-800f-63464d01a85d.jsonl"
    if not main.exists():
        pytest.skip("the shared bench data is not here")
    report = run_json(script_runner, "ingest", str(main))
    records = run_json(script_runner, "list", "--session", report["session_id"],
                       "--type", "message", "--limit", "10000")["records"]
    channels = {r["channel"] for r in records}
    assert channels == {None, "subagent:a881341"}
    assert report["messages_added"] == len(records)
    again = run_json(script_runner, "ingest", str(main))
    assert again["messages_added"] == 0


def test_a_message_stored_redacted_is_not_taken_for_one_that_grew(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path) -> None:
    """The stored form of a message is its masked, cleaned form: reading the transcript
    again finds it the same, and rewrites nothing."""
    path = tmp_path / "chat.jsonl"
    path.write_text(json.dumps({"id": "m1", "role": "user", "content":
                                "Mail the summary to ana@example.com \x1b[31mtoday"}) + "\n")
    assert run_json(script_runner, "ingest", str(path))["messages_added"] == 1
    session_file = next(vault.store.layout.dir.glob("sessions/*.jsonl"))
    before = session_file.read_bytes()
    again = run_json(script_runner, "ingest", str(path))
    assert (again["messages_added"], again["messages_updated"],
            again["messages_skipped"]) == (0, 0, 1)
    assert again["redactions"] == []  # nothing of this run's was masked
    assert session_file.read_bytes() == before
