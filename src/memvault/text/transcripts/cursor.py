"""Cursor's agent (the CLI, and the editor's agent): its transcripts in
~/.cursor/projects/<project>/agent-transcripts/<id>/<id>.jsonl, a subagent's beside them
in <id>/subagents/<sub>.jsonl (stored with the parent's session, each message under
channel "subagent:<sub>"). One message per line, `{role, message: {content: [blocks]}}`
(text and tool_use blocks; no ids and no times); `{type: ...}` lines (a turn's end) are
the CLI's. The user's words are marked <user_query> among what the editor adds (open
files, rules, reminders).

Its chat store: ~/.cursor/chats/<workspace hash>/<agent id>/store.db, one SQLite file per
session: `meta` (key "0": hex-encoded JSON, the agentId, latestRootBlobId, name, createdAt
in milliseconds) and `blobs` (id: the SHA-256 of `data`). A message is a JSON blob
(`{role: user|assistant|tool|system, content}`: the user's text, the assistant's text,
reasoning and tool-call blocks, a tool's tool-result blocks); the root blob lists the
conversation's blobs in order (protobuf field 1, 32 bytes each; a list may be nested).
A session is stored once, whichever of its store and its transcript is read first, and
again after the other: the agent id names both (agent-transcripts/<id>/<id>.jsonl, and
the store's agentId), so both are the session <id> (session_of); and a message is named
by what it says, in which of the user's turns, the how-manyth time in that turn its role
says it (Said), in either source, so a message the other source stored is held already
and one only this source holds (a tool's result in the store, a turn the store has not
written yet) is added. What naming the next message needs of those before is that small
state, not the lines: a grown transcript is read on from where it was read to. The store
keeps no time per message: each gets the session's start.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from memvault.errors import DataError
from memvault.model.records import NewMessage
from memvault.text.transcripts.base import (
    SAID,
    TOOL_OUTPUT_CHARS,
    Format,
    Transcript,
    _blocks,
    _Draft,
    _epoch,
    _finish,
    _json,
    _objects,
    _squash,
    _str,
    _text_of,
    _time,
    _unicode,
    _without_harness,
    home_place,
)
from memvault.text.transcripts.stores import (
    holds,
    read_store,
    table_names,
)

STORE_TABLES = frozenset({"meta", "blobs"})
MAX_BLOB = 64 << 20
MAX_DEPTH = 16  # nested lists of blobs
_AGENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")


def sniff_line(obj: dict[str, Any]) -> bool:
    return (obj.get("role") in ("user", "assistant") and isinstance(obj.get("message"), dict)
            and "type" not in obj and "content" not in obj)


def places(home: Path, env: Mapping[str, str]) -> list[Path]:
    return [home_place(home, env, None, ".cursor", "projects"),
            home_place(home, env, None, ".cursor", "chats")]


def session_of(path: Path) -> str | None:
    """The session a transcript at <p>/agent-transcripts/<id>/<id>.jsonl is: <id>, the
    agent id its chat store names too (a scan names other files by their path)."""
    agent = path.stem
    if (path.suffix == ".jsonl" and path.parent.name == agent
            and path.parent.parent.name == "agent-transcripts" and _clean_id(agent)):
        return agent
    return None


@dataclass
class Said:
    """What naming a conversation's next message needs of the messages before it: how
    many turns the user began, and how many times each thing was said in the last one
    (by a digest of its role and words). A message is SAID + "<turn>.<how-manyth>": the
    transcript and the chat store agree on the user's turns (the store only adds tool
    results within them), so each names a message alike whichever is read first, and a
    read on from the middle of a transcript names its messages as a read of it whole,
    given the state the read before ended with (kept sealed with its position)."""

    turns: int = 0
    times: Counter[str] = field(default_factory=Counter)

    def name(self, messages: list[NewMessage]) -> list[NewMessage]:
        out = []
        for m in messages:
            if m.role == "user":  # the user's words begin a turn
                self.turns += 1
                self.times.clear()
            key = hashlib.blake2b(f"{m.role}\0{_unicode(m.content)}".encode(),
                                  digest_size=12).hexdigest()  # as stored: surrogates replaced
            self.times[key] += 1
            out.append(m.evolve(message_id=f"{SAID}{self.turns}.{self.times[key]}"))
        return out

    def dump(self) -> dict[str, Any]:
        return {"turns": self.turns, "times": dict(self.times)}

    @classmethod
    def load(cls, doc: Any) -> Said | None:
        """The state `dump` gave; None when `doc` is none (a position kept before)."""
        if not isinstance(doc, dict):
            return None
        turns, times = doc.get("turns"), doc.get("times")
        if type(turns) is not int or turns < 0 or not isinstance(times, dict) or not all(
                isinstance(k, str) and type(v) is int and v > 0 for k, v in times.items()):
            return None
        return cls(turns, Counter(times))


def parse(text: str) -> Transcript:
    return parse_on(text, Said())


def parse_on(text: str, said: Said) -> Transcript:
    """A transcript's lines (the whole file, or the lines after those `said` was left by),
    its messages named on from `said`, which is left as the next read needs it."""
    ignored: Counter[str] = Counter()
    drafts: list[_Draft] = []
    for _, line in _objects(text, ignored):
        role, message = line.get("role"), line.get("message")
        if role not in ("user", "assistant") or not isinstance(message, dict):
            ignored["event" if "type" in line else "unknown type"] += 1
            continue
        stamp = _time(line.get("timestamp") or message.get("timestamp"))
        units, why = _units(role, message.get("content"))
        start = len(drafts)
        for who, content in units:
            draft = _Draft(who, SAID, stamp)
            if draft.add("", content):
                drafts.append(draft)
        if len(drafts) == start:
            ignored[why] += 1
    # Named by their words, as the chat store names the same messages.
    return Transcript("cursor", None, said.name(_finish(drafts)), [], dict(ignored))


# --- the chat store (store.db) ------------------------------------------------------------

def sniff_path(path: Path) -> bool:
    return holds(path, STORE_TABLES, "blobs", {"id", "data"})


def read(path: Path) -> Transcript:
    """One session of Cursor's chat store, in the order its root blob lists; its
    messages named by their words, as the agent's transcript of the session names them."""
    meta, blobs = read_store(path, "Cursor chat", partial(_store_rows, path))
    agent = _str(meta.get("agentId")) or path.parent.name
    session = agent if _clean_id(agent) else None
    ignored: Counter[str] = Counter()
    stamp = _epoch(meta.get("createdAt"))
    drafts: list[_Draft] = []
    for _, doc in _conversation(blobs, _str(meta.get("latestRootBlobId")), ignored):
        for who, content in _store_units(doc, ignored):
            draft = _Draft(who, SAID, stamp)
            if draft.add("", content):
                drafts.append(draft)
    return Transcript("cursor", session, Said().name(_finish(drafts)), [], dict(ignored))


def _clean_id(agent: str) -> bool:
    return _AGENT_ID.fullmatch(agent) is not None


def _store_rows(path: Path, db: Any) -> tuple[dict[str, Any], dict[str, bytes]]:
    if not STORE_TABLES <= table_names(db):
        raise DataError(f"{path} is not a Cursor chat store (no meta and blobs tables)")
    meta: dict[str, Any] = {}
    for key, value in db.execute("SELECT key, value FROM meta"):
        doc = _hex_json(value)
        if str(key) == "0" and isinstance(doc, dict):
            meta = doc
    blobs = {}
    for blob_id, data in db.execute("SELECT id, data FROM blobs"):
        if isinstance(data, str):
            data = data.encode("utf-8", "surrogatepass")
        if isinstance(blob_id, str) and isinstance(data, bytes) and len(data) <= MAX_BLOB:
            blobs[blob_id.lower()] = data
    return meta, blobs


def _hex_json(value: Any) -> Any:
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    if not isinstance(value, str):
        return None
    try:
        return _json(bytes.fromhex(value).decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return _json(value)  # written as JSON itself


def _conversation(blobs: dict[str, bytes], root: str | None,
                  ignored: Counter[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The message blobs the root lists, depth first, in order."""
    if root is None or root.lower() not in blobs:
        if blobs:
            ignored["no root"] += 1
        return
    order: list[str] = []
    visiting: set[str] = set()

    def walk(blob_id: str, depth: int) -> None:
        data = blobs.get(blob_id)
        if data is None:
            ignored["missing blob"] += 1
            return
        if data[:1] == b"{":
            order.append(blob_id)
            return
        if depth > MAX_DEPTH or blob_id in visiting:
            ignored["not a message"] += 1
            return
        visiting.add(blob_id)
        for child in _children(data):
            walk(child, depth + 1)
        visiting.discard(blob_id)

    walk(root.lower(), 0)
    for blob_id in order:
        doc = _json(blobs[blob_id].decode("utf-8", "replace"))
        if isinstance(doc, dict):
            yield blob_id, doc
        else:
            ignored["not json"] += 1


def _children(data: bytes) -> list[str]:
    """The blob ids a list blob holds: its protobuf field 1 values of 32 bytes."""
    out: list[str] = []
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        if key is None:
            break
        wire = key & 7
        if wire == 0:
            _, i = _varint(data, i)
        elif wire == 2:
            size, i = _varint(data, i)
            if size is None or i + size > len(data):
                break
            if key >> 3 == 1 and size == 32:
                out.append(data[i:i + size].hex())
            i += size
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            break
    return out


def _varint(data: bytes, i: int) -> tuple[int | None, int]:
    value = shift = 0
    while i < len(data) and shift < 64:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i
        shift += 7
    return None, len(data)


def _store_units(doc: dict[str, Any], ignored: Counter[str]) -> list[tuple[str, str]]:
    """The messages one blob of the store says: (role, content)."""
    role, content = doc.get("role"), doc.get("content")
    if role == "system":
        ignored["system prompt"] += 1
        return []
    if role == "tool":
        results = []
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool-result":
                body = block.get("result", block.get("output"))
                out = _squash(_text_of(body), TOOL_OUTPUT_CHARS)
                if out:
                    results.append(("tool", "[error] " + out if block.get("isError") is True
                                    else out))
        if not results:
            ignored["empty"] += 1
        return results
    if role not in ("user", "assistant"):
        ignored["unknown type"] += 1
        return []
    units, why = _units(role, content)
    if not units:
        ignored[why] += 1
    return units


def _units(role: str, content: Any) -> tuple[list[tuple[str, str]], str]:
    """What a user or assistant message said, as (role, text) units (the user's words and
    each tool result; the assistant's text and calls in one), in a transcript or the
    chat store alike; and why, if it keeps nothing, it keeps nothing."""
    said = _blocks(content)
    texts = [t.strip() for t in said.texts if t.strip()]
    if role == "user":
        words = _without_harness("\n".join(texts))
        units = ([("user", words)] if words else []) + [("tool", r) for r in said.results]
    else:
        lines = texts + said.calls
        units = [("assistant", "\n".join(lines))] if lines else []
    why = ("harness text" if role == "user" and texts else
           "thinking" if said.thinking else "empty")
    return units, why


FORMAT = Format("cursor", "Cursor agent", places, parse=parse, read=read,
                sniff_line=sniff_line, sniff_path=sniff_path)
