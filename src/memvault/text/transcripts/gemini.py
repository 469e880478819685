"""Gemini CLI: ~/.gemini/tmp/<hash>/chats/session-*.json (one JSON document) or
session-*.jsonl (a metadata line, message records, `$set` and `$rewindTo` records;
`type` "gemini" or "model" is the model's); `/chat save` checkpoints
(`{history: Content[]}` or a bare Content[]), whose first turn is Gemini CLI's
environment (`<session_context>…`, or older "This is the Gemini CLI…" and the
model's "Got it" reply): not stored. `logs.json` (the prompts typed, without the
replies) and subagent logs are NotTranscript.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memvault.errors import NotTranscript
from memvault.model.records import NewMessage
from memvault.text.transcripts.base import (
    TOOL_OUTPUT_CHARS,
    Format,
    Transcript,
    _document,
    _Draft,
    _dumps,
    _finish,
    _objects,
    _squash,
    _str,
    _time,
    _tool_line,
    _unit,
)

GEMINI_TYPES = ("user", "gemini", "model", "info", "error", "warning")
GEMINI_MODEL = ("gemini", "model")
# What Gemini CLI puts at the start of a chat's history, and its compression summary.
GEMINI_SETUP = "This is the Gemini CLI. We are setting up the context for our chat."
GEMINI_CONTEXT = "<session_context>"
GEMINI_ACK = "Got it. Thanks for the"
GEMINI_SNAPSHOT = "<state_snapshot>"
# The keys of a logs.json entry (Gemini CLI's list of prompts typed).
GEMINI_LOG_KEYS = frozenset({"sessionId", "messageId", "message"})
_SESSION_CONTEXT = re.compile(r"<session_context>.*?</session_context>", re.S)


def sniff_line(obj: dict[str, Any]) -> bool:
    if ("sessionId" in obj and "projectHash" in obj) or "$rewindTo" in obj or "$set" in obj:
        return True
    return obj.get("type") in GEMINI_TYPES and "id" in obj and "content" in obj


def places(home: Path, env: Mapping[str, str]) -> list[Path]:
    return [home / ".gemini" / "tmp"]


def parse(text: str) -> Transcript:
    return _gemini(text, _document(text))


def _gemini_document(doc: dict[str, Any] | list[Any]) -> bool:
    if isinstance(doc, list):
        return bool(doc) and all(isinstance(turn, dict) and "role" in turn
                                 and isinstance(turn.get("parts"), list) for turn in doc)
    if isinstance(doc.get("messages"), list):
        return any(key in doc for key in ("sessionId", "projectHash", "startTime"))
    return isinstance(doc.get("history"), list)


def _refuse_gemini_log(doc: dict[str, Any] | list[Any]) -> None:
    """Gemini CLI's logs.json lists the prompts typed, without the replies: not a chat."""
    if isinstance(doc, list) and doc and all(
            isinstance(entry, dict) and GEMINI_LOG_KEYS <= entry.keys() for entry in doc):
        raise NotTranscript("a Gemini CLI prompt log (logs.json), not a transcript: it lists "
                            "the prompts typed, without the replies")


def _gemini(text: str, doc: dict[str, Any] | list[Any] | None) -> Transcript:
    if doc is not None:
        _refuse_gemini_log(doc)
    if isinstance(doc, list):
        return _gemini_history(doc)
    if isinstance(doc, dict) and isinstance(doc.get("messages"), list):
        return _gemini_records(doc, doc["messages"], Counter())
    if isinstance(doc, dict) and isinstance(doc.get("history"), list):
        return _gemini_history(doc["history"])
    # A session log: replay it as Gemini CLI does (a record written again is an update).
    meta: dict[str, Any] = {}
    records: dict[str, dict[str, Any]] = {}
    ignored: Counter[str] = Counter()
    for _, obj in _objects(text, ignored):
        if isinstance(obj.get("$rewindTo"), str):
            ids = list(records)
            cut = ids.index(obj["$rewindTo"]) if obj["$rewindTo"] in ids else 0
            for rid in ids[cut:]:
                del records[rid]
            if len(ids) > cut:
                ignored["abandoned branch"] += len(ids) - cut
        elif isinstance(obj.get("id"), str):
            records[obj["id"]] = obj
        elif isinstance(obj.get("$set"), dict):
            meta.update(obj["$set"])
        elif isinstance(obj.get("sessionId"), str):
            meta.update(obj)
        else:
            ignored["unknown type"] += 1
    listed = meta.get("messages")
    chosen = list(records.values()) or (listed if isinstance(listed, list) else [])
    return _gemini_records(meta, chosen, ignored)


def _gemini_records(meta: dict[str, Any], records: list[Any],
                    ignored: Counter[str]) -> Transcript:
    session = _str(meta.get("sessionId"))
    if meta.get("kind") == "subagent":
        raise NotTranscript("a Gemini CLI subagent transcript: its work is recorded in the "
                            "parent session")
    drafts: list[_Draft] = []
    summaries: list[NewMessage] = []
    for record in records:
        kind = record.get("type") if isinstance(record, dict) else None
        if kind not in ("user", *GEMINI_MODEL) or not isinstance(record, dict):
            # info, error and warning notices are the CLI's, not the chat's
            ignored["notice" if kind in GEMINI_TYPES else "unknown type"] += 1
            continue
        mid = _str(record.get("id"))
        stamp = _time(record.get("timestamp"))
        if kind == "user":
            # What the user typed, rather than the prompt with @-files expanded.
            shown = record.get("displayContent")
            texts, _, _ = _gemini_parts(shown if shown else record.get("content"))
            said = "\n".join(t.strip() for t in texts if t.strip())
            if said.startswith(GEMINI_SNAPSHOT):
                summaries.append(NewMessage(content=said, role="summary", message_id=mid,
                                            created_at=stamp))
                continue
            draft = _Draft("user", mid, stamp)
            if not draft.add("", _SESSION_CONTEXT.sub("", said)):
                ignored["harness text" if said else "empty"] += 1
            else:
                drafts.append(draft)
            continue
        texts, calls, _ = _gemini_parts(record.get("content"))
        listed = record.get("toolCalls")
        tool_calls = [c for c in listed if isinstance(c, dict)] if isinstance(listed, list) else []
        reply = _Draft("assistant", mid, stamp)
        for t in texts:
            reply.add("", t)
        for call in tool_calls:
            line = _tool_line(call.get("name"), call.get("args"))
            reply.add("tool:" + (_str(call.get("id")) or line), line)
        for call in calls:  # the same calls again, once history was synced into the record
            line = _tool_line(call.get("name"), call.get("args"))
            if line not in reply.parts:
                reply.add("tool:" + (_str(call.get("id")) or line), line)
        results: list[_Draft] = []
        for k, call in enumerate(tool_calls, 1):
            result = _Draft("tool", _str(call.get("id")) or (f"{mid}#tool{k}" if mid else None),
                            _time(call.get("timestamp")) or stamp)
            if result.add("", _gemini_result(call)):
                results.append(result)
        if not reply.parts and not results:
            ignored["thinking" if record.get("thoughts") else "empty"] += 1
        drafts += [reply, *results] if reply.parts else results
    return Transcript("gemini", session, _finish(drafts), summaries, dict(ignored))


def _gemini_history(history: list[Any]) -> Transcript:
    """A `/chat save` checkpoint: the model's Content[] history, without ids or times."""
    drafts: list[_Draft] = []
    summaries: list[NewMessage] = []
    ignored: Counter[str] = Counter()
    setup = False  # the turn before was Gemini CLI's own set-up, which the model acknowledges
    for n, turn in enumerate(history, 1):
        base = f"turn-{n}"
        was_setup, setup = setup, False
        if not isinstance(turn, dict):
            ignored["unknown type"] += 1
            continue
        texts, calls, responses = _gemini_parts(turn.get("parts"))
        said = "\n".join(t.strip() for t in texts if t.strip())
        units: list[tuple[str, str]] = []
        reason = "empty"
        if turn.get("role") == "user":
            if said.startswith(GEMINI_SETUP):
                said, setup, reason = "", True, "harness text"
            elif said.startswith(GEMINI_CONTEXT):  # the environment, then maybe the prompt
                said, setup, reason = _SESSION_CONTEXT.sub("", said).strip(), True, "harness text"
            elif said.startswith(GEMINI_SNAPSHOT):
                summaries.append(NewMessage(content=said, role="summary", message_id=base))
                said, setup, reason = "", True, ""
            if said:
                units.append(("user", said))
            units += [("tool", out) for r in responses if (out := _function_response(r))]
        elif turn.get("role") == "model":
            if was_setup and not calls and said.startswith(GEMINI_ACK):
                said, reason = "", "harness text"
            lines = [said] if said else []
            lines += [_tool_line(c.get("name"), c.get("args")) for c in calls]
            if lines:
                units.append(("assistant", "\n".join(lines)))
        else:
            reason = "unknown type"
        if not units and reason:
            ignored[reason] += 1
        drafts.extend(_unit(base, None, units))
    return Transcript("gemini", None, _finish(drafts), summaries, dict(ignored))


def _gemini_parts(content: Any) -> tuple[list[str], list[dict[str, Any]], list[dict[str, Any]]]:
    """The text, function calls and function responses of a Gemini PartListUnion."""
    parts = [content] if isinstance(content, str | dict) else content
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    responses: list[dict[str, Any]] = []
    for part in parts if isinstance(parts, list) else []:
        if isinstance(part, str):
            texts.append(part)
        elif not isinstance(part, dict) or part.get("thought") is True:
            continue
        elif isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif isinstance(part.get("functionCall"), dict):
            calls.append(part["functionCall"])
        elif isinstance(part.get("functionResponse"), dict):
            responses.append(part["functionResponse"])
    return texts, calls, responses


def _gemini_result(call: dict[str, Any]) -> str:
    _, _, responses = _gemini_parts(call.get("result"))
    outs = [out for r in responses if (out := _function_response(r))]
    if outs:
        return "\n".join(outs)
    for key in ("error", "resultDisplay"):
        if isinstance(call.get(key), str) and call[key].strip():
            out = _squash(call[key], TOOL_OUTPUT_CHARS)
            return "[error] " + out if call.get("status") == "error" else out
    return ""


def _function_response(response: dict[str, Any]) -> str:
    body = response.get("response")
    failed = False
    if isinstance(body, dict):
        if isinstance(body.get("output"), str):
            text = body["output"]
        elif isinstance(body.get("error"), str):
            text, failed = body["error"], True
        else:
            text = _dumps(body) if body else ""
    else:
        text = body if isinstance(body, str) else ""
    out = _squash(text, TOOL_OUTPUT_CHARS)
    return "[error] " + out if out and failed else out


FORMAT = Format("gemini", "Gemini CLI", places, parse=parse, sniff_line=sniff_line)
