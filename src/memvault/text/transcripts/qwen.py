"""Qwen Code: ~/.qwen/tmp/<project hash>/chats/<session>.jsonl, one record per line in
Claude Code's envelope (uuid, parentUuid, sessionId, timestamp, type) around a Gemini
Content (`message.parts`). `user` records are the user's words, but a hook's context
arrives inside them as parts of its own (`<qwen:user-prompt-submit-context>…`, also
given apart in `systemPayload.hookContext`): the harness's, dropped; where the record
says what the user saw (`systemPayload.displayText`), that is what is kept. A `user`
record with a subtype (a background notification) is the harness's too. `assistant`
records hold the model's text (its `thought` parts dropped) and function calls,
`tool_result` records the function responses; `system` records are telemetry and
settings. Records are linked by parentUuid: the branch that leads to the last record
is the conversation.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memvault.model.records import NewMessage
from memvault.text.transcripts.base import (
    TOOL_OUTPUT_CHARS,
    Format,
    Transcript,
    _branch,
    _Draft,
    _finish,
    _objects,
    _squash,
    _str,
    _time,
    _tool_line,
    _without_harness,
    home_place,
)
from memvault.text.transcripts.gemini import _function_response, _gemini_parts

# A part that is one block of a tagged context the CLI added (<qwen:…-context>…).
_CONTEXT_PART = re.compile(r"^\s*<([A-Za-z][\w.-]*:[\w.-]+)(?:\s[^>]*)?>.*</\1>\s*$", re.S)
COMPRESSION = ("chat_compression", "compression", "summary")


def sniff_line(obj: dict[str, Any]) -> bool:
    message = obj.get("message")
    return ("parentUuid" in obj and "sessionId" in obj and isinstance(message, dict)
            and isinstance(message.get("parts"), list))


def places(home: Path, env: Mapping[str, str]) -> list[Path]:
    return [home_place(home, env, None, ".qwen", "tmp")]


def parse(text: str) -> Transcript:
    ignored: Counter[str] = Counter()
    records = [obj for _, obj in _objects(text, ignored)]
    branch = _branch(records, "uuid", "parentUuid",
                     lambda r: r.get("type") in ("user", "assistant", "tool_result"))
    drafts: list[_Draft] = []
    summaries: list[NewMessage] = []
    session = None
    for i, record in enumerate(records):
        session = _str(record.get("sessionId")) or session
        kind = record.get("type")
        if branch is not None and i not in branch:
            ignored["abandoned branch"] += 1
            continue
        message = record.get("message")
        parts = message.get("parts") if isinstance(message, dict) else None
        uuid = _str(record.get("uuid"))
        stamp = _time(record.get("timestamp"))
        texts, calls, responses = _gemini_parts(parts)
        if kind == "system":
            summary = _summary(record)
            if summary:
                summaries.append(NewMessage(content=summary, role="summary", message_id=uuid,
                                            created_at=stamp))
            else:
                ignored["system"] += 1
            continue
        if kind == "user":
            if record.get("subtype"):
                ignored["notice"] += 1  # a background notification: the CLI's words
                continue
            said = _user_words(record, texts)
            draft = _Draft("user", uuid, stamp)
            if draft.add("", said):
                drafts.append(draft)
            else:
                ignored["harness text" if texts else "empty"] += 1
            continue
        if kind == "assistant":
            draft = _Draft("assistant", uuid, stamp)
            for t in texts:
                draft.add("", t)
            for call in calls:
                draft.add("tool:" + (_str(call.get("id")) or ""),
                          _tool_line(call.get("name"), call.get("args")))
            if draft.parts:
                drafts.append(draft)
            else:
                ignored["thinking" if parts else "empty"] += 1
            continue
        if kind == "tool_result":
            outs = [out for r in responses if (out := _function_response(r))]
            result = record.get("toolCallResult")
            if not outs and isinstance(result, dict):
                shown = result.get("resultDisplay")
                out = _squash(shown, TOOL_OUTPUT_CHARS) if isinstance(shown, str) else ""
                if out:
                    outs = ["[error] " + out if result.get("status") == "error" else out]
            draft = _Draft("tool", uuid, stamp)
            if draft.add("", "\n".join(outs)):
                drafts.append(draft)
            else:
                ignored["empty"] += 1
            continue
        ignored["unknown type"] += 1
    return Transcript("qwen", session, _finish(drafts), summaries, dict(ignored))


def _user_words(record: dict[str, Any], texts: list[str]) -> str:
    """What the user typed: what the CLI showed them, else the parts that are not a
    block of context a hook or the CLI added."""
    payload = record.get("systemPayload")
    shown = payload.get("displayText") if isinstance(payload, dict) else None
    if isinstance(shown, str) and shown.strip():
        return _without_harness(shown)
    context = payload.get("hookContext") if isinstance(payload, dict) else None
    kept = [t for t in texts if not _CONTEXT_PART.match(t)
            and not (isinstance(context, str) and context.strip() and t.strip() in (
                context.strip(),))]
    return _without_harness("\n".join(t.strip() for t in kept if t.strip()))


def _summary(record: dict[str, Any]) -> str:
    """The summary a chat compression wrote, if the record is one."""
    if record.get("subtype") not in COMPRESSION:
        return ""
    payload = record.get("systemPayload")
    for source in (payload, record):
        if isinstance(source, dict):
            for key in ("summary", "compressedSummary", "text"):
                if isinstance(source.get(key), str) and source[key].strip():
                    return str(source[key]).strip()
    return ""


FORMAT = Format("qwen", "Qwen Code", places, parse=parse, sniff_line=sniff_line)
