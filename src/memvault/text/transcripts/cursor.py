"""Cursor's agent (the CLI, and the editor's agent): its transcripts in
~/.cursor/projects/<project>/agent-transcripts/<id>/<id>.jsonl, a subagent's beside them
in <id>/subagents/<sub>.jsonl (stored with the parent's session, each message under
channel "subagent:<sub>"). One message per line, `{role, message: {content: [blocks]}}`
(text and tool_use blocks; no ids and no times: a message's id is its line, the file
being written in order); `{type: ...}` lines (a turn's end) are the CLI's. The user's
words are marked <user_query> among what the editor adds (open files, rules, reminders).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memvault.text.transcripts.base import (
    Format,
    Transcript,
    _blocks,
    _Draft,
    _finish,
    _objects,
    _str,
    _time,
    _without_harness,
    home_place,
)


def sniff_line(obj: dict[str, Any]) -> bool:
    return (obj.get("role") in ("user", "assistant") and isinstance(obj.get("message"), dict)
            and "type" not in obj and "content" not in obj)


def places(home: Path, env: Mapping[str, str]) -> list[Path]:
    return [home_place(home, env, None, ".cursor", "projects")]


def parse(text: str) -> Transcript:
    ignored: Counter[str] = Counter()
    drafts: list[_Draft] = []
    for number, line in _objects(text, ignored):
        role, message = line.get("role"), line.get("message")
        if role not in ("user", "assistant") or not isinstance(message, dict):
            ignored["event" if "type" in line else "unknown type"] += 1
            continue
        mid = _str(line.get("id")) or f"line-{number}"
        stamp = _time(line.get("timestamp") or message.get("timestamp"))
        said = _blocks(message.get("content"))
        texts = [t.strip() for t in said.texts if t.strip()]
        start = len(drafts)
        if role == "user":
            words = _without_harness("\n".join(texts))
            units = ([("user", words)] if words else []) + [("tool", r) for r in said.results]
        else:
            lines = texts + said.calls
            units = [("assistant", "\n".join(lines))] if lines else []
        for nth, (who, content) in enumerate(units, 1):
            draft = _Draft(who, mid if nth == 1 else f"{mid}#{nth}", stamp)
            if draft.add("", content):
                drafts.append(draft)
        if len(drafts) == start:
            ignored["harness text" if role == "user" and texts else
                    "thinking" if said.thinking else "empty"] += 1
    return Transcript("cursor", None, _finish(drafts), [], dict(ignored))


FORMAT = Format("cursor", "Cursor agent", places, parse=parse, sniff_line=sniff_line)
