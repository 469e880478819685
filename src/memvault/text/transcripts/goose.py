"""Goose (block/goose): since 1.10, the SQLite store ~/.local/share/goose/sessions/sessions.db
($XDG_DATA_HOME/goose), read as its schema version 13 lays it out (its migrations, v1 to
v13): `sessions` rows (id, name, session_type: user, scheduled, sub_agent, hidden, acp)
and `messages` rows (id, session_id, role, content_json: the message's content list,
created_timestamp in seconds, metadata_json: userVisible and agentVisible, message_id
from v7). Before, each session was a JSONL file in the same folder: a metadata line
(working_dir, description, message_count), then one message per line (role, created,
content, metadata), which Goose copied into sessions.db when it first made it; so the
files are scanned only where there is no sessions.db.

Content items (`type`): text, image, toolRequest (its toolCall's name and arguments),
toolResponse (in the user's turn: its toolResult's text, or its error), thinking,
redactedThinking, toolConfirmationRequest, actionRequired, frontendToolRequest,
systemNotification. Kept: what the user saw: the user's text, the assistant's text and
tool calls, each tool's result; a compaction's summary (a user message only the agent
sees, followed by Goose's "Your context was compacted" note) as a summary. Dropped:
messages Goose marks not userVisible (its own notes to the model), reasoning, notices,
confirmations and images; a hidden session. A subagent's session (sub_agent: Goose
keeps no link to its parent) is its own session, under channel "subagent:<its id>".
Message ids are Goose's own (message_id), else msg_<session>_<index> as Goose named
them before v7.
"""

from __future__ import annotations

import re
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
    _dumps,
    _epoch,
    _json,
    _objects,
    _squash,
    _str,
    _text_of,
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

DATABASE = "sessions.db"
TABLES = frozenset({"sessions", "messages"})
COMPACTED = "Your context was compacted"  # Goose's note to the model after a summary
CALLS = ("toolRequest", "frontendToolRequest")
EVENTS = ("toolConfirmationRequest", "actionRequired", "contextLengthExceeded",
          "summarizationRequested", "conversationCompacted")
MAX_RECORD = 64 << 20
# Goose's notes in the user's place (an <info-msg> it adds to a prompt).
_INFO = re.compile(r"<info-msg>.*?</info-msg>", re.S)


@dataclass
class _Row:
    id: str
    session: str
    role: Any
    content: list[Any]
    created: Any
    metadata: dict[str, Any]


def places(home: Path, env: Mapping[str, str]) -> list[Path]:
    folder = data_home(home, env) / "goose" / "sessions"
    # The JSONL files of earlier releases are in sessions.db once it exists.
    return [folder / DATABASE] if (folder / DATABASE).is_file() else [folder]


def sniff_path(path: Path) -> bool:
    return holds(path, TABLES, "messages", {"content_json"})


def sniff_line(obj: dict[str, Any]) -> bool:
    """A line of a JSONL session of Goose's earlier releases: its metadata line, or a
    message (role, a `created` number, a content list)."""
    if isinstance(obj.get("working_dir"), str) and ("message_count" in obj
                                                    or "description" in obj):
        return True
    created = obj.get("created")
    return (obj.get("role") in ("user", "assistant") and isinstance(obj.get("content"), list)
            and isinstance(created, int) and not isinstance(created, bool))


def read(path: Path) -> Transcript:
    """Every session of Goose's sessions.db, each message in its own session."""
    sessions, rows = read_store(path, "Goose", partial(_rows, path))
    return _transcript(sessions, rows)


def parse(text: str) -> Transcript:
    """A JSONL session of Goose's earlier releases (named by its file)."""
    ignored: Counter[str] = Counter()
    rows = []
    for number, line in _objects(text, ignored):
        if "working_dir" in line and "role" not in line:
            ignored["meta"] += 1
            continue
        content = line.get("content")
        metadata = line.get("metadata")
        rows.append(_Row(_str(line.get("id")) or f"line-{number}", "", line.get("role"),
                         content if isinstance(content, list) else [],
                         line.get("created"), metadata if isinstance(metadata, dict) else {}))
    messages, summaries = _messages(rows, ignored)
    return Transcript("goose", None, messages, summaries, dict(ignored))


# --- the SQLite store ----------------------------------------------------------------------

def _rows(path: Path, db: Any) -> tuple[dict[str, str], list[_Row]]:
    if not TABLES <= table_names(db):
        raise DataError(f"{path} is not a Goose database (no sessions and messages tables)")
    kinds = columns(db, "sessions")
    kind = "session_type" if "session_type" in kinds else "'user'"
    sessions = {str(sid): str(typ) for sid, typ in db.execute(
        f"SELECT id, {kind} FROM sessions")}  # noqa: S608
    has_id = "message_id" in columns(db, "messages")
    meta = "metadata_json" if "metadata_json" in columns(db, "messages") else "NULL"
    rows = []
    index: Counter[str] = Counter()  # a message's place in its session: Goose's old ids
    for rowid, sid, role, content, created, metadata, mid in db.execute(
            f"SELECT id, session_id, role, content_json, created_timestamp, {meta}, "  # noqa: S608
            f"{'message_id' if has_id else 'NULL'} FROM messages ORDER BY id"):
        del rowid
        sid = str(sid)
        nth = index[sid]
        index[sid] += 1
        doc, info = _record(content), _record(metadata)
        rows.append(_Row(_str(mid) or f"msg_{sid}_{nth}", sid, role,
                         doc if isinstance(doc, list) else [], created,
                         info if isinstance(info, dict) else {}))
    return sessions, rows


def _record(data: Any) -> Any:
    if isinstance(data, bytes):
        data = data.decode("utf-8", "replace")
    if not isinstance(data, str) or len(data) > MAX_RECORD:
        return None
    return _json(data)


def _transcript(sessions: dict[str, str], rows: list[_Row]) -> Transcript:
    ignored: Counter[str] = Counter()
    by_session: dict[str, list[_Row]] = {}
    for row in rows:
        if sessions.get(row.session) == "hidden":
            ignored["hidden session"] += 1
        else:
            by_session.setdefault(row.session, []).append(row)
    out: list[NewMessage] = []
    summaries: list[NewMessage] = []
    said_in: dict[str, str] = {}
    last: tuple[float, int, str] | None = None
    for n, (sid, session_rows) in enumerate(by_session.items()):
        channel = ((f"subagent:{sid}" if _clean_name(sid) else "subagent")
                   if sessions.get(sid) == "sub_agent" else None)
        messages, said = _messages(session_rows, ignored)
        for m in messages:
            m.channel = channel
        for m in (*messages, *said):
            said_in[m.message_id or ""] = sid
        out += messages
        summaries += said
        if messages:
            stamp = _seconds(session_rows[-1].created)
            if last is None or (stamp, n) >= last[:2]:
                last = (stamp, n, sid)
    out.sort(key=lambda m: m.created_at or "")  # sessions in time, each in its own order
    return Transcript("goose", last[2] if last else None, out, summaries, dict(ignored),
                      said_in)


def _seconds(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        else 0.0


# --- messages ------------------------------------------------------------------------------

def _messages(rows: list[_Row], ignored: Counter[str]) -> tuple[list[NewMessage],
                                                               list[NewMessage]]:
    """One session's messages in order, and its compaction summaries."""
    out: list[NewMessage] = []
    summaries: list[NewMessage] = []
    for i, row in enumerate(rows):
        if row.metadata.get("userVisible") is False:
            # Goose's words to the model; a summary is a user message it wrote, followed
            # by its note that the context was compacted.
            following = rows[i + 1] if i + 1 < len(rows) else None
            if (row.role == "user" and following is not None
                    and following.metadata.get("userVisible") is False
                    and _text(following).lstrip().startswith(COMPACTED) and _text(row)):
                summaries.append(NewMessage(content=_text(row), role="summary",
                                            message_id=row.id,
                                            created_at=_epoch(row.created)))
            else:
                ignored["harness text"] += 1
            continue
        out += _said(row, ignored)
    return out, summaries


def _text(row: _Row) -> str:
    return "\n".join(t for item in row.content if isinstance(item, dict)
                     and item.get("type") == "text" and (t := _str(item.get("text"))))


def _said(row: _Row, ignored: Counter[str]) -> Iterator[NewMessage]:
    if row.role not in ("user", "assistant"):
        ignored["unknown type"] += 1
        return
    stamp = _epoch(row.created)
    parts: list[str] = []
    results: list[str] = []
    found = False
    for item in row.content:
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "text" and isinstance(item, dict):
            text = _str(item.get("text")) or ""
            words = _without_harness(_INFO.sub("", text)) if row.role == "user" else text
            if words.strip():
                parts.append(words.strip())
            elif text.strip():
                ignored["harness text"] += 1
                found = True
        elif kind in CALLS and isinstance(item, dict):
            call = item.get("toolCall")
            value = call.get("value") if isinstance(call, dict) else None
            value = value if isinstance(value, dict) else {}
            parts.append(_tool_line(value.get("name"), value.get("arguments")))
        elif kind == "toolResponse" and isinstance(item, dict):
            out = _result(item.get("toolResult"))
            if out:
                results.append(out)
            else:
                ignored["empty"] += 1
                found = True
        elif kind in ("thinking", "redactedThinking", "reasoning"):
            ignored["thinking"] += 1
            found = True
        elif kind == "image":
            ignored["attachment"] += 1
            found = True
        elif kind == "systemNotification":
            ignored["notice"] += 1
            found = True
        else:
            ignored["event" if kind in EVENTS else "unknown type"] += 1
            found = True
    units = ([(str(row.role), "\n".join(parts))] if parts else []) + [
        ("tool", r) for r in results]
    for nth, (role, content) in enumerate(units, 1):
        yield NewMessage(content=content, role=role,
                         message_id=row.id if nth == 1 else f"{row.id}#{nth}",
                         created_at=stamp)
    if not units and not found:
        ignored["empty"] += 1


def _result(result: Any) -> str:
    """A toolResult's text: `{status: success, value}` (the content list, or in later
    releases `{content, isError}`) or `{status: error, error}`; "[error] " for a failure."""
    if not isinstance(result, dict):
        return ""
    if result.get("status") == "error":
        error = result.get("error")
        out = _squash(error if isinstance(error, str) else _dumps(error), TOOL_OUTPUT_CHARS)
        return "[error] " + out if out else ""
    value = result.get("value")
    failed = isinstance(value, dict) and value.get("isError") is True
    content = value.get("content") if isinstance(value, dict) else value
    out = _squash(_text_of(content), TOOL_OUTPUT_CHARS)
    return "[error] " + out if failed and out else out


FORMAT = Format("goose", "Goose", places, parse=parse, read=read, sniff_line=sniff_line,
                sniff_path=sniff_path)
