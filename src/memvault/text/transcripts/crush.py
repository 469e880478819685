"""Crush (charmbracelet/crush): the SQLite store crush.db in each project's data folder
(.crush/ by default; Crush lists the projects it ran in, with their data folders, in
projects.json beside its global config, ~/.local/share/crush), read as its migrations
(internal/db/migrations) lay it out: `sessions` rows (id, parent_session_id: a subagent's
session names its parent, title) and `messages` rows (id, session_id, role: user,
assistant, tool or system, `parts`: a JSON list of `{type, data}`, created_at in seconds,
is_summary_message since August 2025). Part types: text (`hidden` for the continuations
Crush writes itself), reasoning, tool_call (name, input: its arguments as a JSON
string), tool_result (in a `tool` message: content, is_error), finish, image_url, binary.

Kept: the user's text, the assistant's text and tool calls, each tool's result (its
error for a failed one), a summary message as a summary; a subagent's messages in its
root session under channel "subagent:<its session>". Dropped: reasoning, hidden text,
finish parts, attachments, system messages.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from memvault.errors import DataError
from memvault.model.records import NewMessage
from memvault.text.transcripts.base import (
    TOOL_OUTPUT_CHARS,
    Format,
    Transcript,
    _clean_name,
    _epoch,
    _json,
    _squash,
    _str,
    _tool_line,
    _without_harness,
    data_home,
)
from memvault.text.transcripts.stores import (
    columns,
    holds,
    read_store,
    table_names,
)

DATABASE = "crush.db"
TABLES = frozenset({"sessions", "messages"})
MAX_RECORD = 64 << 20
MAX_PROJECTS = 1 << 20  # projects.json: a list of folders, never large


@dataclass
class _Message:
    id: str
    session: str
    role: Any
    parts: list[Any]
    created: Any
    summary: bool


def places(home: Path, env: Mapping[str, str]) -> list[Path]:
    """Each project's crush.db that Crush lists in its projects.json, and the global
    data folder's own."""
    root = data_home(home, env) / "crush"
    found = [root / DATABASE]
    try:
        listed = root / "projects.json"
        doc = _json(listed.read_text("utf-8")) if listed.stat().st_size <= MAX_PROJECTS else None
    except (OSError, UnicodeDecodeError):
        doc = None
    projects = doc.get("projects") if isinstance(doc, dict) else None
    for project in projects if isinstance(projects, list) else []:
        folder = _str(project.get("data_dir")) if isinstance(project, dict) else None
        if folder and folder.startswith("/"):
            found.append(Path(folder) / DATABASE)
    return list(dict.fromkeys(found))


def sniff_path(path: Path) -> bool:
    return holds(path, TABLES, "messages", {"parts"})


def read(path: Path) -> Transcript:
    """Every session of a crush.db, each message in its own session."""
    sessions, messages = read_store(path, "Crush", partial(_rows, path))
    return _transcript(sessions, messages)


def _rows(path: Path, db: Any) -> tuple[dict[str, str | None], list[_Message]]:
    if not TABLES <= table_names(db) or "parts" not in columns(db, "messages"):
        raise DataError(f"{path} is not a Crush database (no sessions and messages tables)")
    parent = "parent_session_id" if "parent_session_id" in columns(db, "sessions") else "NULL"
    sessions = {str(sid): _str(pid) for sid, pid in db.execute(
        f"SELECT id, {parent} FROM sessions")}  # noqa: S608
    summary = ("is_summary_message" if "is_summary_message" in columns(db, "messages")
               else "0")
    messages = []
    for mid, sid, role, parts, created, said in db.execute(
            f"SELECT id, session_id, role, parts, created_at, {summary} FROM messages "  # noqa: S608
            "ORDER BY created_at, rowid"):
        doc = _record(parts)
        messages.append(_Message(str(mid), str(sid), role,
                                 doc if isinstance(doc, list) else [], created, bool(said)))
    return sessions, messages


def _record(data: Any) -> Any:
    if isinstance(data, bytes):
        data = data.decode("utf-8", "replace")
    if not isinstance(data, str) or len(data) > MAX_RECORD:
        return None
    return _json(data)


def _transcript(sessions: dict[str, str | None], messages: list[_Message]) -> Transcript:
    ignored: Counter[str] = Counter()
    out: list[NewMessage] = []
    summaries: list[NewMessage] = []
    said_in: dict[str, str] = {}
    last: str | None = None
    for message in messages:
        root, channel = _root(message.session, sessions)
        found = list(_said(message, ignored))
        for m in found:
            if m.role == "summary":
                summaries.append(m)
            else:
                m.channel = channel
                out.append(m)
            said_in[m.message_id or ""] = root
        last = root if found else last
    return Transcript("crush", last, out, summaries, dict(ignored), said_in)


def _root(session: str, sessions: dict[str, str | None]) -> tuple[str, str | None]:
    """The session a subagent's messages belong to (its root), and their channel."""
    seen = {session}
    root = session
    while (parent := sessions.get(root)) and parent not in seen:
        seen.add(parent)
        root = parent
    if root == session:
        return session, None
    return root, f"subagent:{session}" if _clean_name(session) else "subagent"


def _said(message: _Message, ignored: Counter[str]) -> Iterator[NewMessage]:
    role = message.role
    if role == "system":
        ignored["system prompt"] += 1
        return
    if role not in ("user", "assistant", "tool"):
        ignored["unknown type"] += 1
        return
    stamp = _epoch(message.created)
    texts: list[str] = []
    results: list[str] = []
    for part in message.parts:
        kind = part.get("type") if isinstance(part, dict) else None
        data = part.get("data") if isinstance(part, dict) else None
        data = data if isinstance(data, dict) else {}
        if kind == "text":
            text = _str(data.get("text")) or ""
            words = _without_harness(text) if role == "user" else text.strip()
            if data.get("hidden") is True or (text.strip() and not words):
                ignored["harness text"] += 1  # Crush's words in the conversation
            elif words:
                texts.append(words)
        elif kind == "reasoning":
            ignored["thinking"] += 1
        elif kind == "tool_call":
            texts.append(_tool_line(data.get("name"), data.get("input")))
        elif kind == "tool_result":
            content = data.get("content")
            out = _squash(content if isinstance(content, str) else "", TOOL_OUTPUT_CHARS)
            if out:
                results.append("[error] " + out if data.get("is_error") is True else out)
            else:
                ignored["empty"] += 1
        elif kind in ("image_url", "binary"):
            ignored["attachment"] += 1
        else:
            ignored["event" if kind == "finish" else "unknown type"] += 1
    said = "summary" if message.summary else "tool" if role == "tool" else str(role)
    units = ([(said, "\n".join(texts))] if texts else []) + [("tool", r) for r in results]
    for nth, (who, content) in enumerate(units, 1):
        yield NewMessage(content=content, role=who,
                         message_id=message.id if nth == 1 else f"{message.id}#{nth}",
                         created_at=stamp)


FORMAT = Format("crush", "Crush", places, read=read, sniff_path=sniff_path)
