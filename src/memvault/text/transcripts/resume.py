"""What reading an agent's JSON-lines file on from one of its lines needs to know of the
lines before it (pure): the formats agents append to as a session goes on, besides
Claude Code's (claude_code.Resume).

Message ids come from the file (ids, or line numbers of the append-only file), so a read
of the lines from one on gives their messages the ids a read of the whole file gives,
when those lines keep their numbers and the reader is given what it keeps of the lines
before: the file's first line (Codex's session meta, Copilot's session start, Pi's and
Droid's session line), and, where entries are linked into a tree, the last entry read
before, from which the new lines must go on (a rewind to an older entry: read whole).
Cursor's transcripts name a message by its words and where said (cursor.Said): a read on
is given that small state, kept with the position, instead.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from memvault.text.transcripts.base import _objects, _str


@dataclass(frozen=True)
class Tree:
    """How a format links its entries: the id and parent keys, and which entries are
    turns (the conversation's last turn is where its branch is walked back from)."""

    id_key: str
    parent_key: str
    turn: Callable[[dict[str, Any]], bool]
    meta: str | None = None  # the type of the session's own line, not in the tree


_TREES = {
    "qwen": Tree("uuid", "parentUuid",
                 lambda e: e.get("type") in ("user", "assistant", "tool_result")),
    "pi": Tree("id", "parentId", lambda e: isinstance(e.get("id"), str), "session"),
    "droid": Tree("id", "parentId", lambda e: isinstance(e.get("id"), str), "session_start"),
}
# Line formats read on from where the last ingest stopped (Codex's by its stream reader).
LINE_FORMATS = ("codex", "copilot", "cursor", *_TREES)


def prelude(first: str, lines: int) -> str:
    """The text a format's reader is given before the lines read on from: the file's
    first line, then blank lines up to line `lines`, so the lines read keep their numbers."""
    return first.rstrip("\n") + "\n" * max(1, lines)


def leaf(text: str, fmt: str) -> tuple[int, str] | None:
    """The number (in `text`) and id of the last turn of a tree format's text: where a
    read on must start, so that its branch can be followed back to what was read."""
    tree = _TREES.get(fmt)
    if tree is None:
        return None
    found = None
    for number, obj in _objects(text, Counter()):
        if obj.get("type") != tree.meta and tree.turn(obj) and _str(obj.get(tree.id_key)):
            found = (number, obj[tree.id_key])
    return found


def goes_on(text: str, fmt: str, before: str | None) -> bool:
    """Whether the conversation in `text` (lines read on from the entry `before`) goes on
    from that entry: its last turn's branch, followed back by the links, reaches it
    without a link to a line not read. Not a tree format: always."""
    tree = _TREES.get(fmt)
    if tree is None or before is None:
        return True
    entries = [obj for _, obj in _objects(text, Counter()) if obj.get("type") != tree.meta]
    if not any(isinstance(e.get(tree.parent_key), str) for e in entries):
        return True  # not linked: the file's order is the conversation's
    where = {e[tree.id_key]: i for i, e in enumerate(entries)
             if isinstance(e.get(tree.id_key), str)}
    last = next((i for i in range(len(entries) - 1, -1, -1) if tree.turn(entries[i])), None)
    seen: set[int] = set()
    i = last
    while i is not None and i not in seen:
        if entries[i].get(tree.id_key) == before:
            return True
        seen.add(i)
        parent = entries[i].get(tree.parent_key)
        i = where.get(parent) if isinstance(parent, str) else None
    return last is None  # nothing new that is a turn: nothing to follow
