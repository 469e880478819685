"""The readers of the agents that keep their sessions in an SQLite store: Goose
(sessions.db, and the JSONL files of its earlier releases), Crush (crush.db) and Cursor's
chat store (store.db).

No public sample of these stores exists (../shared/bench-data/agents/ has none), so each
fixture is built here by real SQLite at test time from the agent's own published schema:
Goose's CREATE TABLE statements and migrations as of schema version 13
(crates/goose/src/session/, migrations v1-v13), Crush's migrations
(internal/db/migrations/*.sql: the initial tables, then is_summary_message), and the
layout of Cursor's store as its public readers document it (meta: hex-encoded JSON;
blobs: content-addressed JSON messages, listed by a protobuf root blob). Each holds a
user turn, an assistant turn with reasoning, a tool call and its result, text the harness
wrote that must be dropped, and a second session.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from pytest_console_scripts import ScriptRunner

from memvault.text.transcripts import FORMATS, detect, parse, read_path
from memvault.text.transcripts.base import SAID
from memvault.vault.vault import Vault
from tests.conftest import mem, one_error_line

SAMPLES = Path(__file__).resolve().parents[2] / "shared/bench-data/agents/agent-sessions"


@pytest.fixture(autouse=True)
def initialised(vault: Vault) -> Vault:
    return vault


def mem_json(script_runner: ScriptRunner, *args: str) -> Any:
    result = mem(script_runner, *args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def records(script_runner: ScriptRunner, session: str) -> list[dict[str, Any]]:
    doc = mem_json(script_runner, "list", "--type", "message", "--limit", "1000",
                   "--session", session)
    return list(doc["records"])


def said(path: Path) -> list[tuple[str, str, str | None]]:
    t = read_path(path)
    assert t is not None
    return [(m.role, m.content, m.channel) for m in t.messages]


# --- Goose ---------------------------------------------------------------------------------

# sessions.db at schema version 13: the tables Goose creates, with the columns its
# migrations v1-v13 added (crates/goose/src/session/).
GOOSE_SCHEMA = """
CREATE TABLE schema_version (version INTEGER PRIMARY KEY,
  applied_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP);
CREATE TABLE sessions (id TEXT PRIMARY KEY, name TEXT NOT NULL DEFAULT '',
  description TEXT NOT NULL DEFAULT '', user_set_name BOOLEAN DEFAULT FALSE,
  session_type TEXT NOT NULL DEFAULT 'user', working_dir TEXT NOT NULL,
  created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP, updated_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
  extension_data TEXT DEFAULT '{}', total_tokens INTEGER, input_tokens INTEGER,
  output_tokens INTEGER, accumulated_total_tokens INTEGER, accumulated_input_tokens INTEGER,
  accumulated_output_tokens INTEGER, schedule_id TEXT, recipe_json TEXT,
  user_recipe_values_json TEXT, provider_name TEXT, model_config_json TEXT,
  goose_mode TEXT NOT NULL DEFAULT 'auto', thread_id TEXT, archived_at TIMESTAMP,
  project_id TEXT, accumulated_cost REAL);
CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT,
  session_id TEXT NOT NULL REFERENCES sessions(id), role TEXT NOT NULL,
  content_json TEXT NOT NULL, created_timestamp INTEGER NOT NULL,
  timestamp TIMESTAMP DEFAULT CURRENT_TIMESTAMP, tokens INTEGER, metadata_json TEXT,
  message_id TEXT);
CREATE INDEX idx_messages_session ON messages(session_id);
CREATE INDEX idx_messages_message_id ON messages(message_id);
CREATE TABLE threads (id TEXT PRIMARY KEY, name TEXT NOT NULL DEFAULT 'New Chat',
  user_set_name BOOLEAN DEFAULT FALSE, working_dir TEXT,
  created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP, updated_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
  archived_at TIMESTAMP, metadata_json TEXT DEFAULT '{}');
CREATE TABLE thread_messages (id INTEGER PRIMARY KEY AUTOINCREMENT,
  thread_id TEXT NOT NULL REFERENCES threads(id), session_id TEXT, message_id TEXT,
  role TEXT NOT NULL, content_json TEXT NOT NULL, created_timestamp INTEGER NOT NULL,
  metadata_json TEXT DEFAULT '{}');
INSERT INTO schema_version (version) VALUES (13);
"""
T0 = 1767225600  # 2026-01-01T00:00:00Z
VISIBLE = {"userVisible": True, "agentVisible": True}
AGENT_ONLY = {"userVisible": False, "agentVisible": True}


def text(words: str) -> dict[str, Any]:
    return {"type": "text", "text": words}


GOOSE_CONVERSATION: list[tuple[str, str, int, list[dict[str, Any]], dict[str, Any]]] = [
    ("20260101_1", "user", T0, [text("Why is the build red?\n<info-msg>It is 10:00.</info-msg>")],
     VISIBLE),
    ("20260101_1", "assistant", T0 + 1, [
        {"type": "thinking", "thinking": "look at ci", "signature": "s"},
        text("Checking CI."),
        {"type": "toolRequest", "id": "call_1", "toolCall": {"status": "success", "value": {
            "name": "developer__shell", "arguments": {"command": "make ci"}}}}], VISIBLE),
    ("20260101_1", "user", T0 + 2, [
        {"type": "toolResponse", "id": "call_1", "toolResult": {"status": "success", "value": {
            "content": [text("lint: E501 line too long")], "isError": True}}}], VISIBLE),
    ("20260101_1", "assistant", T0 + 3, [text("The lint step fails on a long line.")], VISIBLE),
    ("20260101_1", "user", T0 + 4, [text("Summary: the build fails on lint.")], AGENT_ONLY),
    ("20260101_1", "assistant", T0 + 4, [text(
        "Your context was compacted. The previous message contains a summary.")], AGENT_ONLY),
    ("20260101_2", "user", T0 + 10, [text("Count the tests.")], VISIBLE),
    ("20260101_2", "assistant", T0 + 11, [
        {"type": "systemNotification", "notificationType": "inlineMessage", "msg": "…"},
        text("There are 12 tests.")], VISIBLE),
    ("20260101_3", "user", T0 + 20, [text("Name this session")], VISIBLE),
]


def goose_db(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path)
    db.executescript(GOOSE_SCHEMA)
    db.executemany("INSERT INTO sessions (id, name, session_type, working_dir) "
                   "VALUES (?, ?, ?, '/w')",
                   [("20260101_1", "build", "user"), ("20260101_2", "tests", "sub_agent"),
                    ("20260101_3", "namer", "hidden")])
    for n, (sid, role, at, content, meta) in enumerate(GOOSE_CONVERSATION, 1):
        db.execute("INSERT INTO messages (session_id, role, content_json, created_timestamp,"
                   " metadata_json, message_id) VALUES (?, ?, ?, ?, ?, ?)",
                   (sid, role, json.dumps(content), at, json.dumps(meta), f"msg_{sid}_{n}"))
    db.commit()
    db.close()
    return path


def add_goose(db: sqlite3.Connection) -> None:
    db.execute("INSERT INTO messages (session_id, role, content_json, created_timestamp, "
               "metadata_json, message_id) VALUES ('20260101_1', 'user', ?, ?, '{}', 'late')",
               (json.dumps([text("one more thing")]), T0 + 100))


def test_goose_keeps_what_the_user_saw(tmp_path: Path) -> None:
    path = goose_db(tmp_path / "sessions.db")
    t = read_path(path)
    assert t is not None and t.format == "goose" and t.session_id == "20260101_2"
    assert [(m.role, m.content, m.channel) for m in t.messages] == [
        ("user", "Why is the build red?", None),
        ("assistant", "Checking CI.\n[tool developer__shell] make ci", None),
        ("tool", "[error] lint: E501 line too long", None),
        ("assistant", "The lint step fails on a long line.", None),
        ("user", "Count the tests.", "subagent:20260101_2"),
        ("assistant", "There are 12 tests.", "subagent:20260101_2")]
    assert [m.created_at for m in t.messages][:3] == [
        "2026-01-01T00:00:00.000Z", "2026-01-01T00:00:01.000Z", "2026-01-01T00:00:02.000Z"]
    assert {t.said_in[m.message_id or ""] for m in t.messages[:4]} == {"20260101_1"}
    assert [s.content for s in t.summaries] == ["Summary: the build fails on lint."]
    # Goose's note to the model, reasoning, its notice and the hidden session: not kept.
    assert t.ignored["harness text"] == 1 and t.ignored["thinking"] == 1
    assert t.ignored["notice"] == 1 and t.ignored["hidden session"] == 1
    assert "compacted" not in str([m.content for m in t.messages])


def test_goose_jsonl_of_earlier_releases_is_detected_and_read(script_runner: ScriptRunner,
                                                              tmp_path: Path) -> None:
    lines = [{"working_dir": "/w", "description": "build", "message_count": 3}]
    for _, role, at, content, meta in GOOSE_CONVERSATION[:4]:
        lines.append({"id": None, "role": role, "created": at, "content": content,
                      "metadata": meta})
    path = tmp_path / "20250301_1.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert detect(path.read_text()) == "goose"
    t = parse(path.read_text())
    assert [m.role for m in t.messages] == ["user", "assistant", "tool", "assistant"]
    assert t.messages[1].content == "Checking CI.\n[tool developer__shell] make ci"
    doc = mem_json(script_runner, "ingest", str(path))
    assert doc["format"] == "goose" and doc["session_id"] == "20250301_1"
    assert doc["messages_added"] == 4
    assert {r.get("agent") for r in records(script_runner, "20250301_1")} == {"goose"}


# --- Crush ---------------------------------------------------------------------------------

# internal/db/migrations: 20250424200609_initial.sql (sessions, files, messages and their
# triggers), then the summary flag Crush added to messages.
CRUSH_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY, parent_session_id TEXT,
  title TEXT NOT NULL, message_count INTEGER NOT NULL DEFAULT 0 CHECK (message_count >= 0),
  prompt_tokens INTEGER NOT NULL DEFAULT 0 CHECK (prompt_tokens >= 0),
  completion_tokens INTEGER NOT NULL DEFAULT 0 CHECK (completion_tokens>= 0),
  cost REAL NOT NULL DEFAULT 0.0 CHECK (cost >= 0.0), updated_at INTEGER NOT NULL,
  created_at INTEGER NOT NULL);
CREATE TRIGGER IF NOT EXISTS update_sessions_updated_at AFTER UPDATE ON sessions
BEGIN UPDATE sessions SET updated_at = strftime('%s', 'now') WHERE id = new.id; END;
CREATE TABLE IF NOT EXISTS files (id TEXT PRIMARY KEY, session_id TEXT NOT NULL,
  path TEXT NOT NULL, content TEXT NOT NULL, version INTEGER NOT NULL DEFAULT 0,
  created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL,
  FOREIGN KEY (session_id) REFERENCES sessions (id) ON DELETE CASCADE,
  UNIQUE(path, session_id, version));
CREATE TABLE IF NOT EXISTS messages (id TEXT PRIMARY KEY, session_id TEXT NOT NULL,
  role TEXT NOT NULL, parts BLOB NOT NULL default '[]', model TEXT,
  created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL, finished_at INTEGER,
  FOREIGN KEY (session_id) REFERENCES sessions (id) ON DELETE CASCADE);
CREATE INDEX IF NOT EXISTS idx_messages_session_id ON messages (session_id);
CREATE TRIGGER IF NOT EXISTS update_session_message_count_on_insert AFTER INSERT ON messages
BEGIN UPDATE sessions SET message_count = message_count + 1 WHERE id = new.session_id; END;
ALTER TABLE messages ADD COLUMN provider TEXT;
ALTER TABLE messages ADD COLUMN is_summary_message INTEGER DEFAULT 0 NOT NULL;
"""


def part(kind: str, **data: Any) -> dict[str, Any]:
    return {"type": kind, "data": data}


CRUSH_CONVERSATION: list[tuple[str, str, str, int, list[dict[str, Any]], int]] = [
    ("m1", "s_main", "user", T0, [part("text", text="Why is the build red?"),
                                  part("finish", reason="stop", time=T0)], 0),
    ("m2", "s_main", "assistant", T0 + 1, [
        part("reasoning", thinking="look at ci", signature=""),
        part("text", text="Checking CI."),
        part("tool_call", id="c1", name="bash", input='{"command": "make ci"}', finished=True),
        part("finish", reason="tool_use", time=T0 + 1)], 0),
    ("m3", "s_main", "tool", T0 + 2, [part("tool_result", tool_call_id="c1", name="bash",
                                           content="exit 2", metadata="", is_error=True)], 0),
    ("m4", "s_task", "assistant", T0 + 3, [part("text", text="Subagent found the typo.")], 0),
    ("m5", "s_main", "user", T0 + 4, [part("text", text="Continue.", hidden=True)], 0),
    ("m6", "s_main", "system", T0 + 4, [part("text", text="You are Crush.")], 0),
    ("m7", "s_main", "assistant", T0 + 5, [part("text", text="Summary: lint fails.")], 1),
    ("m8", "s_other", "user", T0 + 60, [part("text", text="Another project question.")], 0),
]


def crush_db(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path)
    db.executescript(CRUSH_SCHEMA)
    db.executemany("INSERT INTO sessions (id, parent_session_id, title, updated_at, created_at)"
                   " VALUES (?, ?, 't', ?, ?)",
                   [("s_main", None, T0, T0), ("s_task", "s_main", T0, T0),
                    ("s_other", None, T0, T0)])
    for mid, sid, role, at, parts, summary in CRUSH_CONVERSATION:
        db.execute("INSERT INTO messages (id, session_id, role, parts, model, created_at, "
                   "updated_at, is_summary_message) VALUES (?, ?, ?, ?, 'm', ?, ?, ?)",
                   (mid, sid, role, json.dumps(parts), at, at, summary))
    db.commit()
    db.close()
    return path


def add_crush(db: sqlite3.Connection) -> None:
    db.execute("INSERT INTO messages (id, session_id, role, parts, created_at, updated_at) "
               "VALUES ('m9', 's_other', 'user', ?, ?, ?)",
               (json.dumps([part("text", text="one more thing")]), T0 + 100, T0 + 100))


def test_crush_keeps_what_the_user_saw(tmp_path: Path) -> None:
    path = crush_db(tmp_path / ".crush" / "crush.db")
    t = read_path(path)
    assert t is not None and t.format == "crush" and t.session_id == "s_other"
    assert [(m.role, m.content, m.channel) for m in t.messages] == [
        ("user", "Why is the build red?", None),
        ("assistant", "Checking CI.\n[tool bash] make ci", None),
        ("tool", "[error] exit 2", None),
        ("assistant", "Subagent found the typo.", "subagent:s_task"),
        ("user", "Another project question.", None)]
    assert [t.said_in[m.message_id or ""] for m in t.messages] == ["s_main"] * 4 + ["s_other"]
    assert t.messages[0].created_at == "2026-01-01T00:00:00.000Z"
    assert [s.content for s in t.summaries] == ["Summary: lint fails."]
    assert t.ignored["harness text"] == 1 and t.ignored["system prompt"] == 1
    assert t.ignored["thinking"] == 1


# --- Cursor's chat store -------------------------------------------------------------------

def blob(data: bytes) -> tuple[str, bytes]:
    return hashlib.sha256(data).hexdigest(), data


CURSOR_MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are an AI coding assistant."},
    {"role": "user", "content": "<user_info>OS: linux</user_info>\n\n<user_query>\n"
                                "Why is the build red?\n</user_query>"},
    {"id": "1", "role": "assistant", "content": [
        {"type": "reasoning", "text": "look at ci", "signature": "x"},
        {"type": "text", "text": "Checking CI."},
        {"type": "tool-call", "toolCallId": "toolu_1", "toolName": "Shell",
         "args": {"command": "make ci"}}]},
    {"role": "tool", "id": "toolu_1", "content": [
        {"type": "tool-result", "toolName": "Shell", "toolCallId": "toolu_1",
         "result": "exit 2", "isError": True}]},
    {"id": "1", "role": "assistant", "content": [{"type": "text", "text": "Lint fails."}]},
    {"role": "user", "content": "<user_query>\nthanks\n</user_query>"},
    {"role": "user", "content": "<user_query>\nthanks\n</user_query>"},  # said again
]


def cursor_store(path: Path, messages: list[dict[str, Any]] | None = None,
                 agent: str | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    agent = agent or path.parent.name
    db = sqlite3.connect(path)
    db.executescript("CREATE TABLE blobs (id TEXT PRIMARY KEY, data BLOB);"
                     "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);")
    write_conversation(db, agent, messages if messages is not None else CURSOR_MESSAGES)
    db.commit()
    db.close()
    return path


def write_conversation(db: sqlite3.Connection, agent: str,
                       messages: list[dict[str, Any]]) -> None:
    ids = []
    for message in messages:
        blob_id, data = blob(json.dumps(message).encode())
        db.execute("INSERT OR IGNORE INTO blobs VALUES (?, ?)", (blob_id, data))
        ids.append(blob_id)
    # The root: field 1 (32 bytes) for each message in order, and a field of its own.
    root = b"".join(b"\x0a\x20" + bytes.fromhex(i) for i in ids) + b"\x10\x07"
    root_id, root = blob(root)
    db.execute("INSERT OR REPLACE INTO blobs VALUES (?, ?)", (root_id, root))
    meta = {"agentId": agent, "latestRootBlobId": root_id, "name": "build",
            "mode": "auto-run", "createdAt": T0 * 1000, "lastUsedModel": "m"}
    db.execute("INSERT OR REPLACE INTO meta VALUES ('0', ?)", (json.dumps(meta).encode().hex(),))


def add_cursor(db: sqlite3.Connection) -> None:
    agent = json.loads(bytes.fromhex(db.execute(
        "SELECT value FROM meta WHERE key='0'").fetchone()[0]))["agentId"]
    write_conversation(db, agent, [*CURSOR_MESSAGES,
                                   {"role": "user", "content": "one more thing"}])


AGENT_ID = "5f0c2b1e-1111-4222-8333-444455556666"


def test_cursor_store_is_what_the_user_saw(tmp_path: Path) -> None:
    path = cursor_store(tmp_path / ".cursor" / "chats" / "abc123" / AGENT_ID / "store.db")
    t = read_path(path)
    assert t is not None and t.format == "cursor" and t.session_id == AGENT_ID
    assert [(m.role, m.content) for m in t.messages] == [
        ("user", "Why is the build red?"),
        ("assistant", "Checking CI.\n[tool Shell] make ci"),
        ("tool", "[error] exit 2"),
        ("assistant", "Lint fails."),
        ("user", "thanks"), ("user", "thanks")]
    # Each named by its words, in which of the user's turns and the how-manyth time in
    # it: "thanks" twice is two turns, two messages.
    ids = [(m.role, m.content, m.message_id) for m in t.messages]
    assert len(set(ids)) == len(ids)
    assert [m.message_id for m in t.messages] == [SAID + w for w in (
        "1.1", "1.1", "1.1", "1.1", "2.1", "3.1")]
    assert {m.created_at for m in t.messages} == {"2026-01-01T00:00:00.000Z"}
    assert t.ignored["system prompt"] == 1
    assert "look at ci" not in str([m.content for m in t.messages])  # reasoning


# The agent transcript of CURSOR_MESSAGES' session as Cursor's CLI writes it (one line a
# message, tool_use blocks, a turn's end, no ids, no times), and a last answer the store
# has not written yet; the store alone holds the tool's result.
CURSOR_LINES: list[dict[str, Any]] = [
    {"role": "user", "message": {"content": [{"type": "text", "text":
        "<user_info>OS: linux</user_info>\n\n<user_query>\nWhy is the build red?\n"
        "</user_query>"}]}},
    {"role": "assistant", "message": {"content": [
        {"type": "text", "text": "Checking CI."},
        {"type": "tool_use", "name": "Shell", "input": {"command": "make ci"}}]}},
    {"role": "assistant", "message": {"content": [{"type": "text", "text": "Lint fails."}]}},
    {"role": "user", "message": {"content": [{"type": "text", "text":
        "<user_query>\nthanks\n</user_query>"}]}},
    {"type": "turn_ended", "status": "success"},
    {"role": "user", "message": {"content": [{"type": "text", "text":
        "<user_query>\nthanks\n</user_query>"}]}},
    {"role": "assistant", "message": {"content": [{"type": "text",
                                                   "text": "You are welcome."}]}},
]
# Every message either source holds, once: the store's six and the transcript's last.
CURSOR_UNION = sorted([
    ("user", "Why is the build red?"), ("assistant", "Checking CI.\n[tool Shell] make ci"),
    ("tool", "[error] exit 2"), ("assistant", "Lint fails."), ("user", "thanks"),
    ("user", "thanks"), ("assistant", "You are welcome.")])


def jsonl(lines: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(line) + "\n" for line in lines)


def cursor_session(home: Path, lines: list[dict[str, Any]],
                   messages: list[dict[str, Any]] | None = None) -> tuple[Path, Path]:
    """A session in both Cursor's chat store and its agent transcript, under `home`."""
    cursor = home / ".cursor"
    store = cursor_store(cursor / "chats" / "abc123" / AGENT_ID / "store.db", messages)
    transcript = cursor / "projects" / "p" / "agent-transcripts" / AGENT_ID / f"{AGENT_ID}.jsonl"
    transcript.parent.mkdir(parents=True)
    transcript.write_text(jsonl(lines))
    return store, transcript


def held_once(script_runner: ScriptRunner) -> list[tuple[str, str]]:
    """Every message the user holds, in the one session both sources name."""
    every = mem_json(script_runner, "list", "--type", "message", "--limit", "1000")
    assert {r["session_id"] for r in every["records"]} == {AGENT_ID}
    return sorted((r["role"], r["content"]) for r in every["records"])


@pytest.mark.parametrize("order", [
    ("store", "transcript", "store", "transcript"),
    ("transcript", "store", "transcript", "store"),
    ("scan-projects", "store", "transcript"),
    ("store", "scan-projects", "scan"),
    ("scan", "store", "transcript"),
])
def test_a_cursor_session_in_its_store_and_its_transcript_is_stored_once_in_any_order(
        script_runner: ScriptRunner, tmp_path: Path, order: tuple[str, ...]) -> None:
    # Before, the store deferred to its transcript only when the transcript was there as
    # it was read: a store read first (or a transcript scanned under its path's name)
    # left every message twice, once under the store's ids and once under the lines'.
    store, transcript = cursor_session(tmp_path / "home", CURSOR_LINES)
    for step in order:
        args = {"store": [str(store)], "transcript": [str(transcript)],
                "scan": ["--scan"],
                "scan-projects": ["--scan", str(tmp_path / "home" / ".cursor" / "projects")]}
        mem_json(script_runner, "ingest", *args[step])
        got = held_once(script_runner)
        assert len(got) == len(set(got)) + 1  # "thanks" twice, all else once
    assert got == CURSOR_UNION
    again = mem_json(script_runner, "ingest", str(store))
    assert again["messages_added"] == 0 and again["session_id"] == AGENT_ID


def test_a_grown_cursor_transcript_adds_what_was_said_again(
        script_runner: ScriptRunner, tmp_path: Path) -> None:
    store, transcript = cursor_session(tmp_path / "home", CURSOR_LINES)
    aside = transcript.rename(tmp_path / "not yet")  # the store is there first
    mem_json(script_runner, "ingest", str(store))
    aside.rename(transcript)
    mem_json(script_runner, "ingest", str(transcript))
    with transcript.open("a") as fh:  # the user thanks a third time, then the store too
        fh.write(jsonl(CURSOR_LINES[3:4]))
    doc = mem_json(script_runner, "ingest", str(transcript))
    assert doc["messages_added"] == 1
    assert mem_json(script_runner, "ingest", str(transcript))["messages_added"] == 0
    with closing(sqlite3.connect(store)) as db:
        write_conversation(db, AGENT_ID, [*CURSOR_MESSAGES, CURSOR_MESSAGES[-1]])
        db.commit()
    assert mem_json(script_runner, "ingest", str(store))["messages_added"] == 0
    assert held_once(script_runner).count(("user", "thanks")) == 3


def _as_store(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A transcript's turns as the chat store keeps them: `{role, content}` blobs, a
    tool call as `tool-call` (toolName, args), and a result after each call."""
    out: list[dict[str, Any]] = []
    for line in lines:
        if "role" not in line:
            continue
        blocks = [{"type": "tool-call", "toolCallId": f"t{len(out)}", "toolName": b["name"],
                   "args": b["input"]} if b["type"] == "tool_use" else b
                  for b in line["message"]["content"]]
        out.append({"role": line["role"], "content": blocks})
        out += [{"role": "tool", "content": [{"type": "tool-result", "toolCallId": b["toolCallId"],
                                              "result": "a.txt b.txt"}]}
                for b in blocks if b["type"] == "tool-call"]
    return out


@pytest.mark.skipif(not SAMPLES.is_dir(), reason=f"no samples in {SAMPLES}")
@pytest.mark.parametrize("first", ["store", "transcript"])
def test_the_public_cursor_sample_and_its_store_are_one_session(
        script_runner: ScriptRunner, tmp_path: Path, first: str) -> None:
    lines = [json.loads(x) for x in (SAMPLES / "cursor" / "small.jsonl").read_text().splitlines()
             if x.strip()]
    store, transcript = cursor_session(tmp_path / "home", lines, _as_store(lines))
    paths = {"store": store, "transcript": transcript}
    for step in (first, *(p for p in paths if p != first), first):
        mem_json(script_runner, "ingest", str(paths[step]))
    assert held_once(script_runner) == sorted([
        ("user", "List the files."), ("assistant", "Here are the files."),
        ("user", "Run ls."), ("assistant", "Running ls.\n[tool Bash] ls"),
        ("tool", "a.txt b.txt")])


# --- every store: through mem ingest, read-only, its log, damage ---------------------------

STORES: list[tuple[str, str, Callable[[Path], Path], Callable[[sqlite3.Connection], None],
                   str, int]] = [
    ("goose", "sessions.db", goose_db, add_goose, "20260101_1", 4),
    ("crush", "crush.db", crush_db, add_crush, "s_main", 4),
    ("cursor", "store.db", cursor_store, add_cursor, AGENT_ID, 6),
]


def store_path(tmp_path: Path, name: str) -> Path:
    return tmp_path / "agent" / AGENT_ID / name


@pytest.mark.parametrize(("fmt", "name", "build", "add", "session", "count"), STORES)
def test_ingest_detects_the_store_and_stores_its_agent(
        script_runner: ScriptRunner, tmp_path: Path, fmt: str, name: str,
        build: Callable[[Path], Path], add: Any, session: str, count: int) -> None:
    path = build(store_path(tmp_path, name))
    assert fmt in FORMATS
    assert fmt in " ".join(mem(script_runner, "ingest", "--help").stdout.split())
    doc = mem_json(script_runner, "ingest", str(path))
    assert doc["format"] == fmt
    stored = records(script_runner, session)
    assert len(stored) == count and {r.get("agent") for r in stored} == {fmt}
    again = mem_json(script_runner, "ingest", str(path))
    assert again["messages_added"] == 0  # the same ids: nothing twice
    scan = mem_json(script_runner, "ingest", "--scan", str(tmp_path / "agent"))
    assert scan["files_scanned"] == 1 and scan["messages_added"] == 0 and not scan["errors"]


@pytest.mark.parametrize(("fmt", "name", "build", "add", "session", "count"), STORES)
def test_a_scan_of_a_folder_finds_the_store(script_runner: ScriptRunner, tmp_path: Path,
                                            fmt: str, name: str,
                                            build: Callable[[Path], Path], add: Any,
                                            session: str, count: int) -> None:
    build(tmp_path / "projects" / "one" / AGENT_ID / name)
    doc = mem_json(script_runner, "ingest", "--scan", str(tmp_path / "projects"))
    assert doc["files_scanned"] == 1 and doc["files_ingested"] == 1 and not doc["errors"]
    assert len(records(script_runner, session)) == count


def test_a_scan_without_a_folder_reads_goose_crush_and_cursor_places(
        script_runner: ScriptRunner, tmp_path: Path) -> None:
    home = tmp_path / "home"
    goose_db(home / ".local" / "share" / "goose" / "sessions" / "sessions.db")
    project = tmp_path / "repo" / ".crush"
    crush_db(project / "crush.db")
    listed = home / ".local" / "share" / "crush" / "projects.json"
    listed.parent.mkdir(parents=True)
    listed.write_text(json.dumps({"projects": [{"path": str(project.parent),
                                                "data_dir": str(project),
                                                "last_accessed": "2026-01-01T00:00:00Z"}]}))
    cursor_store(home / ".cursor" / "chats" / "abc123" / AGENT_ID / "store.db")
    result = mem(script_runner, "ingest", "--scan")
    assert result.returncode == 0, result.stderr
    for where in ("sessions.db", "crush.db", ".cursor"):
        assert where in result.stderr
    doc = mem_json(script_runner, "ingest", "--scan")
    assert doc["files_scanned"] == 3 and doc["files_unchanged"] == 3
    assert len(records(script_runner, "s_main")) == 4
    assert len(records(script_runner, AGENT_ID)) == 6


@pytest.mark.parametrize(("fmt", "name", "build", "add", "session", "count"), STORES)
def test_the_store_is_never_written_nor_locked(script_runner: ScriptRunner, tmp_path: Path,
                                               fmt: str, name: str,
                                               build: Callable[[Path], Path], add: Any,
                                               session: str, count: int) -> None:
    path = build(store_path(tmp_path, name))
    folder = path.parent
    before = (path.read_bytes(), path.stat().st_mtime_ns, sorted(folder.iterdir()))
    # The agent holds a write lock all along: the reader neither waits on it nor takes one.
    agent = sqlite3.connect(path, timeout=0)
    agent.execute("BEGIN IMMEDIATE")
    try:
        t = read_path(path)
        doc = mem_json(script_runner, "ingest", str(path))
    finally:
        agent.rollback()
    assert t is not None and len(t.messages) >= count
    assert doc["messages_added"] == len(t.messages)
    agent.execute("BEGIN EXCLUSIVE")  # nothing of the reader's is left holding it
    agent.rollback()
    agent.close()
    assert (path.read_bytes(), path.stat().st_mtime_ns, sorted(folder.iterdir())) == before


@pytest.mark.parametrize(("fmt", "name", "build", "add", "session", "count"), STORES)
def test_a_store_being_written_is_read_with_its_log(tmp_path: Path, fmt: str, name: str,
                                                    build: Callable[[Path], Path],
                                                    add: Callable[[sqlite3.Connection], None],
                                                    session: str, count: int) -> None:
    path = build(store_path(tmp_path, name))
    writer = sqlite3.connect(path)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("PRAGMA wal_autocheckpoint=0")
    add(writer)
    writer.commit()  # in the log only: the agent is still running
    try:
        assert path.with_name(name + "-wal").stat().st_size > 0
        wal = path.with_name(name + "-wal").read_bytes()
        t = read_path(path)
        assert t is not None and "one more thing" in [m.content for m in t.messages]
        assert path.with_name(name + "-wal").read_bytes() == wal  # the log untouched
    finally:
        writer.close()


@pytest.mark.parametrize(("fmt", "name", "build", "add", "session", "count"), STORES)
def test_a_damaged_store_is_one_line_and_exit_65(script_runner: ScriptRunner, tmp_path: Path,
                                                 fmt: str, name: str,
                                                 build: Callable[[Path], Path], add: Any,
                                                 session: str, count: int) -> None:
    """Named with --format (found by its shape, a damaged one is no store): SQLite's
    reason, in one line, not a suggestion to give the path that was given."""
    label = {"goose": "Goose", "crush": "Crush", "cursor": "Cursor chat"}[fmt]
    garbage = tmp_path / "in" / name
    garbage.parent.mkdir()
    garbage.write_bytes(b"SQLite format 3\x00" + b"x" * 200)
    truncated = build(tmp_path / "cut" / name)
    truncated.write_bytes(truncated.read_bytes()[:4096 + 100])
    for path in (garbage, truncated):
        result = mem(script_runner, "ingest", str(path), "--format", fmt)
        assert result.returncode == 65, result.stderr
        assert f"cannot read the {label} database" in one_error_line(result.stderr)
    assert not list((tmp_path / "vault").rglob("*.jsonl"))  # nothing stored


@pytest.mark.parametrize(("fmt", "name", "build", "add", "session", "count"), STORES)
def test_a_new_store_still_all_in_its_log_is_recognised(tmp_path: Path, fmt: str, name: str,
                                                        build: Callable[[Path], Path],
                                                        add: Any, session: str,
                                                        count: int) -> None:
    """An agent that has just made its database may hold every table in the write-ahead
    log: the store is recognised and read as the agent sees it."""
    made = sqlite3.connect(build(store_path(tmp_path / "made", name)))
    path = store_path(tmp_path / "new", name)
    path.parent.mkdir(parents=True)
    writer = sqlite3.connect(path)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("PRAGMA wal_autocheckpoint=0")
    for statement in made.iterdump():
        if statement not in ("BEGIN TRANSACTION;", "COMMIT;"):
            writer.execute(statement)
    writer.commit()
    made.close()
    try:
        assert path.with_name(name + "-wal").stat().st_size > 0
        assert not tables_on_disk(path)
        t = read_path(path)
        assert t is not None and len(t.messages) >= count
    finally:
        writer.close()


def tables_on_disk(path: Path) -> set[str]:
    """The tables of the main file alone (immutable: the log unread)."""
    uri = f"file:{path}?mode=ro&immutable=1"
    with closing(sqlite3.connect(uri, uri=True)) as db:
        return {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
