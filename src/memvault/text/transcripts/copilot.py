"""GitHub Copilot CLI: ~/.copilot/session-state/<id>/events.jsonl (the flat <id>.jsonl of
earlier releases, in session-state/ too; $COPILOT_HOME instead of ~/.copilot), one event
per line: `{type, data, id, timestamp, parentId}`. `user.message` is what the user
typed (`content`; `transformedContent` is it with what the CLI added), `assistant.message`
the model's text and its `toolRequests`, `tool.execution_complete` a tool's result
(`success` false: a failure). An event with `parentToolCallId` is a subagent's, stored
with the session under channel "subagent:<that call's id>". Reasoning, the system
prompt, the session's own events (start, model changes, usage, shutdown, truncation),
hooks' events and the CLI's notices are not the conversation.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memvault.text.transcripts.base import (
    TOOL_OUTPUT_CHARS,
    Format,
    Transcript,
    _clean_name,
    _Draft,
    _dumps,
    _objects,
    _squash,
    _str,
    _text_of,
    _time,
    _tool_line,
    _without_harness,
    home_place,
)

IGNORED = {"assistant.reasoning": "thinking", "system.message": "system prompt",
           "system.notification": "harness text", "abort": "notice"}


def sniff_line(obj: dict[str, Any]) -> bool:
    kind = obj.get("type")
    return (isinstance(kind, str) and isinstance(obj.get("data"), dict)
            and kind.split(".", 1)[0] in ("session", "user", "assistant", "tool", "hook",
                                           "system", "subagent"))


def places(home: Path, env: Mapping[str, str]) -> list[Path]:
    return [home_place(home, env, "COPILOT_HOME", ".copilot", "session-state")]


def parse(text: str) -> Transcript:
    ignored: Counter[str] = Counter()
    drafts: list[_Draft] = []
    channels: dict[int, str] = {}  # draft → its subagent's channel
    session = None
    ids: set[str] = set()
    for number, event in _objects(text, ignored):
        kind, data = event.get("type"), event.get("data")
        if not isinstance(kind, str) or not isinstance(data, dict):
            ignored["unknown type"] += 1
            continue
        if kind == "session.start":
            session = session or _str(data.get("sessionId"))
        # The event's id, unless it has none or repeats one (then its line: the file only
        # grows); a message split over several events is stored as its pieces were shown.
        mid = _str(event.get("id"))
        mid = f"line-{number}" if mid is None or mid in ids else mid
        ids.add(mid)
        stamp = _time(event.get("timestamp"))
        sub = _str(data.get("parentToolCallId"))
        before = len(drafts)
        if kind == "user.message":
            draft = _Draft("user", mid, stamp)
            said = data.get("content")
            if draft.add("", _without_harness(said) if isinstance(said, str) else ""):
                drafts.append(draft)
            else:
                ignored["harness text" if said else "empty"] += 1
        elif kind == "assistant.message":
            draft = _Draft("assistant", mid, stamp)
            if isinstance(data.get("content"), str):
                draft.add("", data["content"])
            for request in data.get("toolRequests") or []:
                if isinstance(request, dict):
                    draft.add("tool:" + (_str(request.get("toolCallId")) or ""),
                              _tool_line(request.get("name"), request.get("arguments")))
            if draft.parts:
                drafts.append(draft)
            else:
                ignored["thinking" if data.get("reasoningText") else "empty"] += 1
        elif kind == "tool.execution_complete":
            result = data.get("result")
            body = result.get("content") if isinstance(result, dict) else result
            if isinstance(data.get("error"), dict | str) and not body:
                body = data["error"]
            text_ = body if isinstance(body, str) else (_text_of(body) or (
                _dumps(body) if isinstance(body, dict) else ""))
            out = _squash(text_, TOOL_OUTPUT_CHARS)
            draft = _Draft("tool", mid, stamp)
            if draft.add("", "[error] " + out if out and data.get("success") is False else out):
                drafts.append(draft)
            else:
                ignored["empty"] += 1
        else:
            ignored[IGNORED.get(kind, "event")] += 1
        if sub and len(drafts) > before:
            channels[before] = f"subagent:{sub}" if _clean_name(sub) else "subagent"
    messages = []
    for n, draft in enumerate(drafts):
        message = draft.message()
        if message is not None:
            message.channel = channels.get(n)
            messages.append(message)
    return Transcript("copilot", session, messages, [], dict(ignored))


FORMAT = Format("copilot", "GitHub Copilot CLI", places, parse=parse, sniff_line=sniff_line)
