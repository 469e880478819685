"""The readers of the agents beyond Claude Code, Codex and Gemini CLI, behind the one
registry of formats: each on the public samples in ../shared/bench-data/agents/ (read in
place) and on fixtures built here from the agent's own published schema; `mem ingest
--format` and `--scan` without a folder; malformed input is one line and exit 65."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from pytest_console_scripts import ScriptRunner

from memvault.cli.agents import FORMATS as CLI_FORMATS
from memvault.errors import DataError
from memvault.text.transcripts import FORMATS, detect, parse, read_path
from memvault.vault.vault import Vault
from tests.conftest import mem, one_error_line

AGENTS = Path(__file__).resolve().parents[2] / "shared" / "bench-data" / "agents"
SESSIONS = AGENTS / "agent-sessions"
AIDER = AGENTS / "aider" / "mozgoslav.aider.chat.history.md"
needs_samples = pytest.mark.skipif(not SESSIONS.is_dir(), reason="no bench-data")


@pytest.fixture(autouse=True)
def initialised(vault: Vault) -> Vault:
    return vault


def said(path: Path) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in parse(path.read_text()).messages]


def mem_json(script_runner: ScriptRunner, *args: str) -> Any:
    result = mem(script_runner, *args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def records(script_runner: ScriptRunner, session: str | None = None) -> list[dict[str, Any]]:
    args = ["list", "--type", "message", "--limit", "1000"]
    doc = mem_json(script_runner, *args, *(["--session", session] if session else []))
    return sorted(doc["records"], key=lambda r: (r["created_at"], r["message_id"] or ""))


# --- the registry ------------------------------------------------------------------------

def test_the_command_lists_every_format_of_the_registry(script_runner: ScriptRunner) -> None:
    assert set(CLI_FORMATS) == {"auto", *FORMATS}
    help_text = " ".join(mem(script_runner, "ingest", "--help").stdout.split())
    for name in FORMATS:
        assert name in help_text
    wrong = mem(script_runner, "ingest", "x.jsonl", "--format", "windsurf")
    assert wrong.returncode == 2
    assert "opencode" in one_error_line(wrong.stderr) and "aider" in wrong.stderr


@needs_samples
@pytest.mark.parametrize(("sample", "fmt"), [
    ("qwen/019f0000-0000-7000-8000-000000000001.jsonl", "qwen"),
    ("pi/small.jsonl", "pi"), ("droid/session_store_small.jsonl", "droid"),
    ("copilot/small.jsonl", "copilot"),
    ("copilot/subdir_v1/aaaabbbb-1111-2222-3333-ccccddddeeee/events.jsonl", "copilot"),
    ("cursor/small.jsonl", "cursor"), ("cursor/subagent/parent.jsonl", "cursor")])
def test_each_sample_is_detected_as_its_agent(sample: str, fmt: str) -> None:
    assert detect((SESSIONS / sample).read_text()) == fmt


@needs_samples
def test_aider_is_detected_and_older_formats_still_are() -> None:
    assert detect(AIDER.read_text()) == "aider"
    codex_bare = '{"id": "s1", "timestamp": "2025-01-01T00:00:00Z", "instructions": ""}\n'
    assert detect(codex_bare) == "codex"
    claude = '{"type": "user", "uuid": "u1", "parentUuid": null, "message": {}}\n'
    assert detect(claude) == "claude-code"


# --- Qwen Code ----------------------------------------------------------------------------

@needs_samples
def test_qwen_keeps_the_users_words_without_the_hooks_context() -> None:
    t = parse((SESSIONS / "qwen/019f0000-0000-7000-8000-000000000001.jsonl").read_text())
    assert t.session_id == "019f0000-0000-7000-8000-000000000001"
    assert [(m.role, m.content) for m in t.messages] == [
        ("user", "Inspect the synthetic fixture."),
        ("assistant", "[tool read_file] /tmp/as-qwen-fixture/project/README.md"),
        ("tool", "Synthetic file contents."),
        ("assistant", "The synthetic fixture is valid.")]
    assert all(m.created_at for m in t.messages)
    assert "hook context" not in " ".join(m.content for m in t.messages)
    assert t.ignored["notice"] == 1  # the background notification is the CLI's


def test_qwen_context_parts_are_dropped_without_a_display_text() -> None:
    # Built from Qwen Code's record shape: no systemPayload, the context as its own part.
    line = {"uuid": "u1", "parentUuid": None, "sessionId": "s", "type": "user",
            "timestamp": "2026-01-01T00:00:00Z",
            "message": {"role": "user", "parts": [
                {"text": "fix the login bug"},
                {"text": "<qwen:user-prompt-submit-context>\nbranch main\n"
                         "</qwen:user-prompt-submit-context>"}]}}
    t = parse(json.dumps(line) + "\n")
    assert [m.content for m in t.messages] == ["fix the login bug"]


# --- Copilot CLI, Pi, Droid, Cursor -------------------------------------------------------

@needs_samples
def test_copilot_keeps_turns_tools_and_results() -> None:
    path = SESSIONS / "copilot/subdir_v1/aaaabbbb-1111-2222-3333-ccccddddeeee/events.jsonl"
    t = parse(path.read_text())
    assert t.session_id == "aaaabbbb-1111-2222-3333-ccccddddeeee"
    assert [(m.role, m.content) for m in t.messages] == [
        ("user", "List the files"), ("assistant", "[tool bash] ls"), ("tool", "file1 file2"),
        ("assistant", "The directory contains file1 and file2.")]
    small = parse((SESSIONS / "copilot/small.jsonl").read_text())
    assert ("assistant", "Listing the files.\n[tool shell] ls") in [
        (m.role, m.content) for m in small.messages]
    subagent = [m for m in small.messages if m.channel]
    assert subagent and all(m.channel.startswith("subagent") for m in subagent)
    ids = [m.message_id for m in small.messages]
    assert len(ids) == len(set(ids))  # repeated ids in the file never merge two messages
    assert small.ignored["thinking"] == 1 and small.ignored["system prompt"] == 1


@needs_samples
def test_pi_and_droid_keep_the_branch_and_the_summaries() -> None:
    pi = parse((SESSIONS / "pi/small.jsonl").read_text())
    assert [m.role for m in pi.messages] == ["user", "assistant", "user", "assistant"]
    assert len(pi.summaries) == 2 and pi.session_id == "019e19b4-eb48-746a-aa6b-8dfcfa37954b"
    droid = parse((SESSIONS / "droid/session_store_small.jsonl").read_text())
    assert [(m.role, m.content) for m in droid.messages] == [
        ("user", "Run a command"), ("assistant", "[tool Execute] ls /nope"),
        ("tool", "Error: Command failed (exit code: 1) ls: /nope: No such file or directory")]


def test_pi_drops_an_abandoned_branch() -> None:
    # Built from Pi's session format (version 3): a rewind makes a second child of "a".
    lines = [{"type": "session", "version": 3, "id": "s", "timestamp": "2026-01-01T00:00:00Z"},
             {"type": "message", "id": "a", "parentId": None, "timestamp": "2026-01-01T00:00:01Z",
              "message": {"role": "user", "content": "first question"}},
             {"type": "message", "id": "b", "parentId": "a", "timestamp": "2026-01-01T00:00:02Z",
              "message": {"role": "assistant", "content": [{"type": "text", "text": "old"}]}},
             {"type": "message", "id": "c", "parentId": "a", "timestamp": "2026-01-01T00:00:03Z",
              "message": {"role": "assistant", "content": [
                  {"type": "thinking", "thinking": "hmm"}, {"type": "text", "text": "new"},
                  {"type": "toolCall", "id": "t", "name": "bash",
                   "arguments": {"command": "ls"}}]}},
             {"type": "message", "id": "d", "parentId": "c", "timestamp": "2026-01-01T00:00:04Z",
              "message": {"role": "toolResult", "toolCallId": "t", "isError": True,
                          "content": [{"type": "text", "text": "denied"}]}}]
    t = parse("".join(json.dumps(line) + "\n" for line in lines))
    assert [(m.role, m.content) for m in t.messages] == [
        ("user", "first question"), ("assistant", "new\n[tool bash] ls"),
        ("tool", "[error] denied")]
    assert t.ignored["abandoned branch"] == 1


@needs_samples
def test_cursor_reads_the_user_query_and_tool_calls() -> None:
    assert said(SESSIONS / "cursor/small.jsonl") == [
        ("user", "List the files."), ("assistant", "Here are the files."), ("user", "Run ls."),
        ("assistant", "Running ls.\n[tool Bash] ls")]
    line = {"role": "user", "message": {"content": [{"type": "text", "text": (
        "<attached_files>a.py</attached_files>\n<user_query>\nwhy does it fail?\n"
        "</user_query>\n<system_reminder>be brief</system_reminder>")}]}}
    assert [m.content for m in parse(json.dumps(line) + "\n").messages] == ["why does it fail?"]


@needs_samples
def test_a_cursor_subagent_is_stored_with_its_parent(script_runner: ScriptRunner,
                                                     tmp_path: Path) -> None:
    doc = mem_json(script_runner, "ingest", str(SESSIONS / "cursor/subagent/parent.jsonl"))
    assert doc["format"] == "cursor" and doc["messages_added"] == 4
    stored = records(script_runner, doc["session_id"])
    assert [r.get("channel") for r in stored].count("subagent:child") == 2
    # The subagent's file on its own (a scan finds it) goes to the same session, once.
    again = mem_json(script_runner, "ingest",
                     str(SESSIONS / "cursor/subagent/subagents/child.jsonl"))
    assert again["session_id"] == doc["session_id"] and again["messages_added"] == 0


# --- Aider --------------------------------------------------------------------------------

@needs_samples
def test_aider_history_is_split_in_sessions_without_harness_or_thinking() -> None:
    t = parse(AIDER.read_text())
    sessions = sorted(set(t.said_in.values()))
    assert sessions == ["aider-2026-04-22T224012", "aider-2026-04-22T224047",
                        "aider-2026-04-22T231303"]
    users = [m.content for m in t.messages if m.role == "user"]
    assert users[:3] == ["hi", "hi", "Про что проект мозгослав и на каком этапе сейчас RAG?"]
    text = "\n".join(m.content for m in t.messages)
    for harness in ("thinking-content", "Add file to the chat", "^C", "Tokens:", "Aider v0"):
        assert harness not in text
    long_prompt = next(u for u in users if "Analyzer Agent" in u)
    assert "Root Cause Analysis" in long_prompt  # the continuation lines are its own
    assert all(m.created_at for m in t.messages)
    # Read again once grown, every message keeps its id.
    head = AIDER.read_text()[:AIDER.read_text().index("# aider chat started at 2026-04-22 23:13")]
    before = {m.message_id: m.content for m in parse(head).messages}
    after = {m.message_id: m.content for m in t.messages}
    assert all(after[k] == v for k, v in before.items())


def test_an_aider_reply_cut_by_ctrl_c_keeps_what_was_shown() -> None:
    text = ("# aider chat started at 2026-01-02 10:00:00\n\n#### explain main.py  \n\n"
            "<think>\nthe user wants\n</think>\nmain.py starts the server and\n\n"
            "> ^C again to exit  \n\n#### /add main.py  \n> Added main.py to the chat  \n")
    t = parse(text)
    assert [(m.role, m.content) for m in t.messages] == [
        ("user", "explain main.py"), ("assistant", "main.py starts the server and"),
        ("user", "/add main.py")]


# --- Cline --------------------------------------------------------------------------------

def cline_task(folder: Path) -> Path:
    # Built from Cline's ClineMessage type (src/shared/ExtensionMessage.ts): say/ask, ts.
    folder.mkdir(parents=True)
    ui = [{"ts": 1735689600000, "type": "say", "say": "task", "text": "Rename the CLI flag"},
          {"ts": 1735689601000, "type": "say", "say": "api_req_started", "text": "{}"},
          {"ts": 1735689602000, "type": "say", "say": "reasoning", "text": "think"},
          {"ts": 1735689603000, "type": "say", "say": "text", "text": "I will search."},
          {"ts": 1735689604000, "type": "ask", "ask": "command", "text": "rg --flag"},
          {"ts": 1735689605000, "type": "say", "say": "command_output", "text": "cli.py:3"},
          {"ts": 1735689606000, "type": "say", "say": "tool",
           "text": json.dumps({"tool": "editedExistingFile", "path": "cli.py", "diff": "x"})},
          {"ts": 1735689607000, "type": "ask", "ask": "followup",
           "text": json.dumps({"question": "Keep the old name as an alias?", "options": []})},
          {"ts": 1735689608000, "type": "say", "say": "user_feedback", "text": "yes, keep it"},
          {"ts": 1735689609000, "type": "say", "say": "completion_result", "text": "Done."}]
    (folder / "ui_messages.json").write_text(json.dumps(ui))
    api = [{"role": "user", "content": [{"type": "text", "text": "<task>\nRename the CLI flag"
            "\n</task>"}, {"type": "text", "text": "<environment_details>\nfiles\n"
                                                  "</environment_details>"}]}]
    (folder / "api_conversation_history.json").write_text(json.dumps(api))
    return folder


def test_cline_task_folder_is_what_the_user_saw(tmp_path: Path) -> None:
    folder = cline_task(tmp_path / "tasks" / "1735689600000")
    t = read_path(folder)
    assert t is not None and t.session_id == "1735689600000"
    assert [(m.role, m.content) for m in t.messages] == [
        ("user", "Rename the CLI flag"), ("assistant", "I will search."),
        ("assistant", "[tool execute_command] rg --flag"), ("tool", "cli.py:3"),
        ("assistant", "[tool editedExistingFile] cli.py"),
        ("assistant", "Keep the old name as an alias?"), ("user", "yes, keep it"),
        ("assistant", "Done.")]
    assert t.messages[0].created_at == "2025-01-01T00:00:00.000Z"
    (folder / "ui_messages.json").unlink()  # the API history alone
    api = read_path(folder)
    assert api is not None and [(m.role, m.content) for m in api.messages] == [
        ("user", "Rename the CLI flag")]


# --- OpenCode -----------------------------------------------------------------------------

@needs_samples
def test_opencode_legacy_storage(script_runner: ScriptRunner) -> None:
    t = read_path(SESSIONS / "opencode" / "storage_v2")
    assert t is not None
    by_session: dict[str, list[tuple[str, str]]] = {}
    for m in t.messages:
        by_session.setdefault(t.said_in[m.message_id or ""], []).append((m.role, m.content))
    assert by_session["s_stage0_small"] == [
        ("user", "Hello"), ("assistant", "[tool bash] ls\nFound 2 files."),
        ("tool", "a.txt b.txt")]
    large = by_session["s_stage0_large"]
    assert ("tool", "ls: /non-existent-directory: No such file or directory") in large
    assert "Command failed with exit code 1." not in str(large)  # OpenCode's own (synthetic)
    assert t.ignored["thinking"] == 1
    doc = mem_json(script_runner, "ingest", str(SESSIONS / "opencode" / "storage_v2"))
    assert doc["format"] == "opencode" and doc["messages_added"] == len(t.messages)
    assert len(records(script_runner, "s_stage0_small")) == 3


# OpenCode's tables as its migration creates them (packages/opencode/migration, 1.2).
OPENCODE_SCHEMA = """
CREATE TABLE project (id text PRIMARY KEY, worktree text NOT NULL, time_created integer,
  time_updated integer);
CREATE TABLE session (id text PRIMARY KEY, project_id text NOT NULL, parent_id text,
  slug text NOT NULL, directory text NOT NULL, title text NOT NULL, version text NOT NULL,
  time_created integer NOT NULL, time_updated integer NOT NULL);
CREATE TABLE message (id text PRIMARY KEY, session_id text NOT NULL, time_created integer
  NOT NULL, time_updated integer NOT NULL, data text NOT NULL);
CREATE TABLE part (id text PRIMARY KEY, message_id text NOT NULL, session_id text NOT NULL,
  time_created integer NOT NULL, time_updated integer NOT NULL, data text NOT NULL);
"""


def opencode_db(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path)
    db.executescript(OPENCODE_SCHEMA)
    db.executemany("INSERT INTO session VALUES (?, 'p', ?, 's', '/w', 't', '1.2.0', 1, 1)",
                   [("ses_main", None), ("ses_sub", "ses_main")])

    def message(mid: str, sid: str, at: int, data: dict[str, Any],
                parts: list[dict[str, Any]]) -> None:
        db.execute("INSERT INTO message VALUES (?, ?, ?, ?, ?)",
                   (mid, sid, at, at, json.dumps(data)))
        for n, part in enumerate(parts):
            db.execute("INSERT INTO part VALUES (?, ?, ?, ?, ?, ?)",
                       (f"prt_{mid}_{n}", mid, sid, at, at, json.dumps(part)))

    message("msg_1", "ses_main", 1767225600000, {"role": "user", "time": {
        "created": 1767225600000}}, [{"type": "text", "text": "Why is the build red?"},
                                     {"type": "text", "text": "<file>...</file>",
                                      "synthetic": True}])
    message("msg_2", "ses_main", 1767225601000, {"role": "assistant", "time": {
        "created": 1767225601000}}, [
            {"type": "reasoning", "text": "look at ci"},
            {"type": "tool", "tool": "bash", "callID": "c1", "state": {
                "status": "error", "input": {"command": "make ci"}, "error": "exit 2"}},
            {"type": "text", "text": "The lint step fails."}])
    message("msg_3", "ses_sub", 1767225602000, {"role": "assistant", "time": {
        "created": 1767225602000}}, [{"type": "text", "text": "Subagent found the typo."}])
    message("msg_4", "ses_main", 1767225603000, {"role": "assistant", "summary": True,
                                                 "time": {"created": 1767225603000}},
            [{"type": "text", "text": "Summary: the build fails on lint."}])
    db.commit()
    db.execute("PRAGMA journal_mode=DELETE")
    db.close()
    return path


def test_opencode_database_is_read_without_writing_it(tmp_path: Path,
                                                      script_runner: ScriptRunner) -> None:
    path = opencode_db(tmp_path / "opencode" / "opencode.db")
    before = (path.read_bytes(), path.stat().st_mtime_ns, sorted(path.parent.iterdir()))
    path.chmod(0o444)
    path.parent.chmod(0o555)  # a store mem could not write even if it tried
    try:
        t = read_path(path)
        doc = mem_json(script_runner, "ingest", str(path))
    finally:
        path.parent.chmod(0o755)
        path.chmod(0o644)
    assert (path.read_bytes(), path.stat().st_mtime_ns, sorted(path.parent.iterdir())) == before
    assert t is not None and [(m.role, m.content, m.channel) for m in t.messages] == [
        ("user", "Why is the build red?", None),
        ("assistant", "[tool bash] make ci\nThe lint step fails.", None),
        ("tool", "[error] exit 2", None),
        ("assistant", "Subagent found the typo.", "subagent:ses_sub")]
    assert {t.said_in[m.message_id or ""] for m in t.messages} == {"ses_main"}
    assert [s.content for s in t.summaries] == ["Summary: the build fails on lint."]
    assert doc["messages_added"] == 4 and doc["summaries_added"] == 1
    assert t.messages[0].created_at == "2026-01-01T00:00:00.000Z"


def test_opencode_database_being_written_is_read_with_its_log(tmp_path: Path) -> None:
    path = opencode_db(tmp_path / "opencode.db")
    writer = sqlite3.connect(path)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute("INSERT INTO message VALUES ('msg_9', 'ses_main', 1767225700000, 1, ?)",
                   (json.dumps({"role": "user"}),))
    writer.execute("INSERT INTO part VALUES ('prt_9', 'msg_9', 'ses_main', 1, 1, ?)",
                   (json.dumps({"type": "text", "text": "one more thing"}),))
    writer.commit()  # in the log only, the agent still running
    try:
        t = read_path(path)
        assert t is not None and t.messages[-1].content == "one more thing"
    finally:
        writer.close()


# --- scan without a folder; malformed input -----------------------------------------------

@needs_samples
def test_scan_without_a_folder_reads_every_agents_places(script_runner: ScriptRunner,
                                                         tmp_path: Path) -> None:
    home = tmp_path / "home"
    opencode_db(home / ".local" / "share" / "opencode" / "opencode.db")
    qwen = home / ".qwen" / "tmp" / "abc" / "chats"
    qwen.mkdir(parents=True)
    (qwen / "s.jsonl").write_bytes(
        (SESSIONS / "qwen/019f0000-0000-7000-8000-000000000001.jsonl").read_bytes())
    cline_task(home / ".cline" / "data" / "tasks" / "1735689600000")
    first = mem(script_runner, "ingest", "--scan", "--json")
    assert first.returncode == 0, first.stderr
    doc = json.loads(first.stdout)
    assert doc["files_scanned"] == 3 and doc["files_ingested"] == 3
    assert doc["messages_added"] == 4 + 4 + 8 and not doc["errors"]
    again = mem_json(script_runner, "ingest", "--scan")
    assert again["files_unchanged"] == 3 and again["messages_added"] == 0
    said_where = mem(script_runner, "ingest", "--scan")
    assert ".qwen" in said_where.stderr and "opencode.db" in said_where.stderr


def test_scan_of_a_folder_reads_stores_whole(script_runner: ScriptRunner,
                                             tmp_path: Path) -> None:
    root = tmp_path / "tasks"
    cline_task(root / "1735689600000")
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / ".aider.chat.history.md").write_text(
        "# aider chat started at 2026-01-02 10:00:00\n\n#### hello  \n\nHi there.\n")
    doc = mem_json(script_runner, "ingest", "--scan", str(root))
    assert doc["files_scanned"] == 1 and doc["messages_added"] == 8  # not its two files
    aider = mem_json(script_runner, "ingest", "--scan", str(tmp_path / "repo"))
    assert aider["messages_added"] == 2
    assert records(script_runner, "aider-2026-01-02T100000")[0]["content"] == "hello"


@pytest.mark.parametrize(("name", "content", "fmt"), [
    ("ui_messages.json", "[{\"ts\": 1, \"type\": \"say\", ", "cline"),
    ("opencode.db", "SQLite format 3\x00" + "x" * 200, "opencode"),
    ("t.jsonl", "{\"type\": \"session.start\", \"data\": [}\n", "copilot"),
    ("t.md", "just some notes\n", "aider")])
def test_malformed_input_is_one_line_and_exit_65(script_runner: ScriptRunner, tmp_path: Path,
                                                 name: str, content: str, fmt: str) -> None:
    path = tmp_path / "in" / name
    path.parent.mkdir()
    path.write_text(content)
    result = mem(script_runner, "ingest", str(path), "--format", fmt)
    assert result.returncode == 65, result.stderr
    one_error_line(result.stderr)
    assert not list((tmp_path / "vault").rglob("*.jsonl"))  # nothing stored


def test_a_text_reader_refuses_what_is_not_its_format() -> None:
    with pytest.raises(DataError):
        parse("{\"role\": \"user\", \"message\": 3}\n", "cursor")
    with pytest.raises(DataError):
        parse("plain words\n", "aider")
