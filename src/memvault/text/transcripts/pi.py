"""Pi (pi-coding-agent): ~/.pi/agent/sessions/<cwd>/<time>_<id>.jsonl ($PI_CODING_AGENT_DIR
instead of ~/.pi/agent), one entry per line: a `session` line (its id), then entries
linked by id/parentId into a tree (a branch or a rewind leaves the other branch in the
file: the conversation is the path from the last entry to the root). `message` entries
hold the user's, the assistant's (text, thinking, toolCall blocks) and tool results
(`toolResult`, with isError); a `bashExecution` is a command the user ran (`!cmd`) and
its output. `compaction` and `branch_summary` entries are Pi's summaries; model and
thinking-level changes, labels and an extension's own entries are settings, not the
conversation, and an extension's `custom_message` is the harness's text.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memvault.model.records import NewMessage
from memvault.text.transcripts.base import (
    TOOL_OUTPUT_CHARS,
    Format,
    Transcript,
    _blocks,
    _branch,
    _Draft,
    _finish,
    _objects,
    _squash,
    _str,
    _time,
    _when,
    _without_harness,
    home_place,
)

SUMMARIES = ("compaction", "branch_summary")
SETTINGS = ("model_change", "thinking_level_change", "label", "custom", "session_info")


def sniff_line(obj: dict[str, Any]) -> bool:
    kind = obj.get("type")
    if kind == "session":
        return "id" in obj and "version" in obj
    return kind in ("message", "compaction") and "parentId" in obj and (
        kind == "compaction" or _pi_message(obj))


def _pi_message(obj: dict[str, Any]) -> bool:
    message = obj.get("message")
    return isinstance(message, dict) and message.get("role") in (
        "user", "assistant", "toolResult", "bashExecution", "custom")


def places(home: Path, env: Mapping[str, str]) -> list[Path]:
    return [home_place(home, env, "PI_CODING_AGENT_DIR", ".pi/agent", "sessions")]


def parse(text: str) -> Transcript:
    return read_tree(text, "pi", "session")


def read_tree(text: str, fmt: str, session_type: str) -> Transcript:
    """A session file of linked entries (Pi's, Factory Droid's): the branch that leads to
    the last entry, in file order."""
    ignored: Counter[str] = Counter()
    entries = [obj for _, obj in _objects(text, ignored)]
    session = next((_str(e.get("id")) for e in entries if e.get("type") == session_type
                    and _str(e.get("id"))), None)
    tree = [e for e in entries if e.get("type") != session_type]
    ignored["meta"] += len(entries) - len(tree)
    branch = _branch(tree, "id", "parentId", lambda e: isinstance(e.get("id"), str))
    drafts: list[_Draft] = []
    summaries: list[NewMessage] = []
    for i, entry in enumerate(tree):
        kind = entry.get("type")
        if branch is not None and i not in branch:
            ignored["abandoned branch"] += 1
            continue
        mid = _str(entry.get("id"))
        stamp = _time(entry.get("timestamp"))
        if kind in SUMMARIES:
            body = _str(entry.get("summary"))
            if body and body.strip():
                summaries.append(NewMessage(content=body.strip(), role="summary",
                                            message_id=mid, created_at=stamp))
            else:
                ignored["empty"] += 1
            continue
        if kind != "message" or not isinstance(entry.get("message"), dict):
            ignored["settings" if kind in SETTINGS else "unknown type"] += 1
            continue
        message: dict[str, Any] = entry["message"]
        stamp = stamp or _when(message.get("timestamp"))
        reason = _message(message, mid, stamp, drafts)
        if reason:
            ignored[reason] += 1
    return Transcript(fmt, session, _finish(drafts), summaries, dict(ignored))


def _message(message: dict[str, Any], mid: str | None, stamp: str | None,
             drafts: list[_Draft]) -> str | None:
    """Add what one message says; why it says nothing worth keeping, else None."""
    role = message.get("role")
    said = _blocks(message.get("content"))
    start = len(drafts)

    def unit(role: str, content: str) -> None:
        nth = len(drafts) - start + 1
        draft = _Draft(role, None if mid is None else mid if nth == 1 else f"{mid}#{nth}",
                       stamp)
        if draft.add("", content):
            drafts.append(draft)

    if role == "user":
        words = _without_harness("\n".join(t.strip() for t in said.texts if t.strip()))
        if words:
            unit("user", words)
        for result in said.results:  # Anthropic's shape: results come in the user's turn
            unit("tool", result)
        if len(drafts) == start:
            return "harness text" if said.texts else "empty"
        return None
    if role == "assistant":
        lines = [t.strip() for t in said.texts if t.strip()] + said.calls
        if lines:
            unit("assistant", "\n".join(lines))
        return None if lines else "thinking" if said.thinking else "empty"
    if role == "toolResult":
        out = _squash("\n".join(said.texts), TOOL_OUTPUT_CHARS)
        if out:
            unit("tool", "[error] " + out if message.get("isError") is True else out)
        return None if out else "empty"
    if role == "bashExecution":
        command = _str(message.get("command"))
        if command:
            unit("user", "!" + command)
        out = _squash(_str(message.get("output")) or "", TOOL_OUTPUT_CHARS)
        if out:
            unit("tool", out)
        return None if command or out else "empty"
    return "harness text" if role == "custom" else "unknown type"


FORMAT = Format("pi", "Pi", places, parse=parse, sniff_line=sniff_line)
