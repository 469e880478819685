"""OpenCode: since 1.2, the SQLite store ~/.local/share/opencode/opencode.db
($XDG_DATA_HOME/opencode): `session` rows (id, parent_id: a subagent's session names
its parent), `message` rows (id, session_id, time_created, `data`: the message's JSON
without its ids: role, time, summary) and `part` rows (id, message_id, session_id,
`data`: text, reasoning, tool, file, step-start, ...). Before, the same records were
JSON files under storage/: session/<project>/<session>.json, message/<session>/<message>.json,
part/<message>/<part>.json. One store holds every session: each message names its own
(`said_in`); a subagent's messages go to its root session under channel
"subagent:<its session>". Kept: the user's text, the assistant's text and tool calls,
each tool's output (its error for a failed one), and a compaction's summary (an
assistant message marked `summary`). Dropped: reasoning, text OpenCode writes itself
(parts marked `synthetic` or `ignored`), steps, snapshots, patches and attachments.

The database is read as stores.py reads every agent's: read-only and immutable, never
locking or writing it while OpenCode runs, with what is still in its write-ahead log.
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
    _Draft,
    _epoch,
    _json,
    _squash,
    _str,
    _tool_line,
    data_home,
)
from memvault.text.transcripts.stores import columns, is_sqlite, read_store, table_names, tables

DATABASE = "opencode.db"
TABLES = frozenset({"session", "message", "part"})
EVENTS = ("step-start", "step-finish", "snapshot", "patch", "compaction", "retry", "agent",
          "subtask")
MAX_RECORD = 64 << 20


@dataclass
class _Message:
    id: str
    session: str
    data: dict[str, Any]
    created: Any
    parts: list[dict[str, Any]]


def places(home: Path, env: Mapping[str, str]) -> list[Path]:
    root = data_home(home, env) / "opencode"
    return [root / DATABASE, root / "storage"]


def sniff_path(path: Path) -> bool:
    if path.is_dir():
        return (path / "session").is_dir() and (path / "message").is_dir()
    return is_sqlite(path) and TABLES <= tables(path)


def read(path: Path) -> Transcript:
    """The sessions of an OpenCode store: its database, or its legacy storage folder."""
    if path.is_dir():
        sessions, messages = _storage(path)
    else:
        sessions, messages = _database(path)
    return _transcript(sessions, messages)


# --- the SQLite store ----------------------------------------------------------------------

def _database(path: Path) -> tuple[dict[str, dict[str, Any]], list[_Message]]:
    return read_store(path, "OpenCode", partial(_rows, path))


def _rows(path: Path, db: Any) -> tuple[dict[str, dict[str, Any]], list[_Message]]:
    if not TABLES <= table_names(db):
        raise DataError(f"{path} is not an OpenCode database (no session, message and "
                        "part tables)")
    parent = "parent_id" if "parent_id" in columns(db, "session") else "NULL"
    sessions = {sid: {"id": sid, "parentID": pid, "title": title}
                for sid, pid, title in db.execute(
                    f"SELECT id, {parent}, title FROM session")}  # noqa: S608
    parts: dict[str, list[dict[str, Any]]] = {}
    for pid, mid, data in db.execute(
            "SELECT id, message_id, data FROM part ORDER BY message_id, id"):
        part = _record(data)
        if part is not None:
            parts.setdefault(mid, []).append({**part, "id": pid})
    messages = []
    for mid, sid, created, data in db.execute(
            "SELECT id, session_id, time_created, data FROM message "
            "ORDER BY time_created, id"):
        info = _record(data) or {}
        messages.append(_Message(mid, sid, info, created, parts.pop(mid, [])))
    return sessions, messages


def _record(data: Any) -> dict[str, Any] | None:
    if isinstance(data, bytes):
        data = data.decode("utf-8", "replace")
    if not isinstance(data, str) or len(data) > MAX_RECORD:
        return None
    doc = _json(data)
    return doc if isinstance(doc, dict) else None


# --- the legacy storage folder -------------------------------------------------------------

def _storage(root: Path) -> tuple[dict[str, dict[str, Any]], list[_Message]]:
    sessions: dict[str, dict[str, Any]] = {}
    for file in sorted((root / "session").rglob("*.json")):
        doc = _file(file)
        if doc is not None and _str(doc.get("id")):
            sessions[doc["id"]] = doc
    messages = []
    for folder in sorted(p for p in (root / "message").iterdir() if p.is_dir()):
        for file in sorted(folder.glob("*.json")):
            info = _file(file)
            if info is None:
                continue
            mid = _str(info.get("id")) or file.stem
            parts = [{**doc, "id": _str(doc.get("id")) or f.stem}
                     for f in sorted((root / "part" / mid).glob("*.json"))
                     if (doc := _file(f)) is not None]
            created = info.get("time", {}).get("created") if isinstance(
                info.get("time"), dict) else None
            messages.append(_Message(mid, _str(info.get("sessionID")) or folder.name, info,
                                     created, parts))
    messages.sort(key=lambda m: (_number(m.created), m.id))
    return sessions, messages


def _file(path: Path) -> dict[str, Any] | None:
    try:
        if path.stat().st_size > MAX_RECORD:
            return None
        return _record(path.read_bytes())
    except OSError:
        return None


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        else 0.0


# --- messages ------------------------------------------------------------------------------

def _transcript(sessions: dict[str, dict[str, Any]], messages: list[_Message]) -> Transcript:
    ignored: Counter[str] = Counter()
    out: list[NewMessage] = []
    summaries: list[NewMessage] = []
    said_in: dict[str, str] = {}
    last: tuple[float, str] | None = None
    for message in messages:
        root, channel = _root(message.session, sessions)
        stamp = _epoch(_created(message))
        found = list(_said(message, stamp, ignored))
        for m in found:
            if m.role == "summary":
                summaries.append(m)
            else:
                m.channel = channel
                out.append(m)
            if m.message_id:
                said_in[m.message_id] = root
        if found and (last is None or _number(_created(message)) >= last[0]):
            last = (_number(_created(message)), root)
    return Transcript("opencode", last[1] if last else None, out, summaries, dict(ignored),
                      said_in)


def _created(message: _Message) -> Any:
    time = message.data.get("time")
    created = time.get("created") if isinstance(time, dict) else None
    return created if created is not None else message.created


def _root(session: str, sessions: dict[str, dict[str, Any]]) -> tuple[str, str | None]:
    """The session a subagent's messages belong to (its root), and their channel."""
    seen = {session}
    root = session
    while (parent := _str(sessions.get(root, {}).get("parentID"))) and parent not in seen:
        seen.add(parent)
        root = parent
    if root == session:
        return session, None
    return root, f"subagent:{session}" if _clean_name(session) else "subagent"


def _said(message: _Message, stamp: str | None, ignored: Counter[str]) -> Iterator[NewMessage]:
    role = message.data.get("role")
    if role not in ("user", "assistant"):
        ignored["unknown type"] += 1
        return
    summary = role == "assistant" and message.data.get("summary") is True
    draft = _Draft("summary" if summary else str(role), message.id, stamp)
    results: list[NewMessage] = []
    for part in message.parts:
        kind = part.get("type")
        if kind == "text":
            text = _str(part.get("text")) or ""
            if part.get("synthetic") is True or part.get("ignored") is True:
                ignored["harness text"] += 1  # OpenCode's words in the conversation
            elif not draft.add("", text):
                ignored["empty"] += 1
        elif kind == "reasoning":
            ignored["thinking"] += 1
        elif kind == "tool":
            state: dict[str, Any] = part["state"] if isinstance(part.get("state"), dict) else {}
            draft.add("tool:" + (_str(part.get("callID")) or str(part.get("id"))),
                      _tool_line(part.get("tool"), state.get("input")))
            failed = state.get("status") == "error"
            output = state.get("error") if failed else state.get("output")
            out = _squash(output if isinstance(output, str) else "", TOOL_OUTPUT_CHARS)
            if out:
                time: dict[str, Any] = state["time"] if isinstance(state.get("time"), dict) else {}
                results.append(NewMessage(content="[error] " + out if failed else out,
                                          role="tool", message_id=str(part.get("id")),
                                          created_at=_epoch(time.get("end")) or stamp))
        elif kind == "file":
            ignored["attachment"] += 1
        else:
            ignored["event" if kind in EVENTS else "unknown type"] += 1
    if draft.parts:
        yield NewMessage(content="\n".join(draft.parts), role=draft.role,
                         message_id=draft.message_id, created_at=stamp)
    elif not message.parts:
        ignored["empty"] += 1
    yield from results


FORMAT = Format("opencode", "OpenCode", places, read=read, sniff_path=sniff_path)
