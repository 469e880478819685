"""Transcript parsers: an agent's session file in, messages out (SPEC §6, `mem ingest`).

Pure functions over the text of one file: no I/O, no vault. Each agent's file is read
the way the agent reads it back, so that what is stored is the conversation the user
saw: Claude Code's rewound branches are dropped, Codex's injected context is not taken
for the user's words, a Gemini rewind removes what it rewound. Tool calls and results
are kept as short lines, so that what the agent did stays searchable without filling
the vault with file dumps.

Agents' files are read leniently (a torn or foreign line is skipped and counted): they
are written by programs whose formats change without notice. The generic `jsonl`
format is read strictly, since a person or a script wrote it: one bad line refuses the
whole file, naming the line.

Formats, as their sources define them:
- Claude Code: ~/.claude/projects/<dir>/<session>.jsonl, one entry per line, linked
  by uuid/parentUuid (a rewind leaves the abandoned branch in the file; a compaction
  starts a new root whose logicalParentUuid points back).
- Codex CLI: ~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl, `{timestamp, type, payload}`
  lines (session_meta, response_item, event_msg, turn_context, compacted); older files
  start with a bare `{id, timestamp, instructions}` line followed by bare items.
- Gemini CLI: ~/.gemini/tmp/<hash>/chats/session-*.json (one JSON document) or
  session-*.jsonl (a metadata line, message records, `$set` and `$rewindTo` records);
  `/chat save` checkpoints (`{history: Content[]}` or a bare Content[]).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import islice
from typing import Any

from memvault.errors import DataError, UsageError
from memvault.model.records import MAX_CONTENT, MAX_TAG, ROLES, NewMessage

FORMATS = ("claude-code", "codex", "gemini", "jsonl")
SNIFF_LINES = 50
TOOL_INPUT_CHARS = 200
TOOL_OUTPUT_CHARS = 500
# The argument that says what a tool call did, under the names the agents' tools use.
TOOL_KEYS = ("command", "cmd", "file_path", "absolute_path", "notebook_path", "pattern",
             "path", "dir_path", "url", "query", "description", "prompt", "input")
SHELLS = frozenset({"bash", "sh", "zsh", "dash", "fish"})

TURN_ROLES = ("user", "assistant")
# Older Claude Code wrote the compaction summary without the isCompactSummary flag.
CLAUDE_CONTINUED = "This session is being continued from a previous conversation"

CODEX_LINES = ("session_meta", "response_item", "event_msg", "turn_context", "compacted")
CODEX_ITEMS = ("message", "reasoning", "function_call", "function_call_output",
               "local_shell_call", "custom_tool_call", "custom_tool_call_output",
               "web_search_call", "ghost_snapshot", "compaction", "compaction_summary")
# User-role messages Codex writes itself (its is_contextual_user_message), lower-cased.
CODEX_INJECTED = ("<environment_context>", "<user_instructions>",
                  "# agents.md instructions for ", "<turn_aborted>", "<context_update>",
                  "<user_shell_command>", "<skill", "<subagent_notification>")

GEMINI_TYPES = ("user", "gemini", "info", "error", "warning")
# What Gemini CLI puts at the start of a chat's history, and its compression summary.
GEMINI_SETUP = "This is the Gemini CLI. We are setting up the context for our chat."
GEMINI_ACK = "Got it. Thanks for the"
GEMINI_SNAPSHOT = "<state_snapshot>"

JSONL_FIELDS = ("id", "role", "content", "timestamp", "tags")
_UTC_SUFFIX = re.compile(r"(?:[Zz]|[+-]00:?00)$")
_WORD = re.compile(r"\S+")
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass
class Transcript:
    """What one transcript file holds, in conversation order."""

    format: str
    session_id: str | None
    messages: list[NewMessage] = field(default_factory=list)
    # Compaction summaries the agent wrote: its words about the session, not the user's.
    summaries: list[NewMessage] = field(default_factory=list)
    skipped: int = 0


def detect(text: str) -> str:
    """The transcript's format, from its first lines (or its shape, for one JSON document)."""
    return _sniff(text.removeprefix("\ufeff"))[0]


def parse(text: str, fmt: str = "auto") -> Transcript:
    """Parse one transcript; DataError (one line) when it is malformed or holds no message."""
    text = text.removeprefix("\ufeff")
    doc: dict[str, Any] | list[Any] | None = None
    if fmt == "auto":
        fmt, doc = _sniff(text)
    elif fmt not in FORMATS:
        raise UsageError(f"unknown transcript format {fmt!r}: choose auto, {', '.join(FORMATS)}")
    elif not text.strip():
        raise DataError("the transcript is empty")
    if fmt == "jsonl":
        return _jsonl(text)
    if fmt == "claude-code":
        transcript = _claude(text)
    elif fmt == "codex":
        transcript = _codex(text)
    else:
        transcript = _gemini(text, doc if doc is not None else _document(text))
    if not transcript.messages and not transcript.summaries:
        raise DataError(f"no {fmt} messages in the transcript "
                        f"({transcript.skipped} lines or entries skipped)")
    return _scrub(transcript)


# --- detection -----------------------------------------------------------------------------

def _sniff(text: str) -> tuple[str, dict[str, Any] | list[Any] | None]:
    if not text.strip():
        raise DataError("the transcript is empty")
    doc = _document(text)
    if doc is not None and _gemini_document(doc):
        return "gemini", doc
    objects = 0
    for _, line in islice(_lines(text), SNIFF_LINES):
        obj = _object(line)
        if obj is None:
            continue
        objects += 1
        fmt = _sniff_line(obj)
        if fmt:
            return fmt, None
    if objects:
        return "jsonl", None  # JSON lines of no agent's shape: the generic format says why
    raise DataError("not a transcript mem can read: expected JSON lines (Claude Code, Codex, "
                    "generic jsonl) or a Gemini CLI session file")


def _sniff_line(obj: dict[str, Any]) -> str | None:
    kind = obj.get("type")
    if kind in CODEX_LINES and "payload" in obj:
        return "codex"
    if obj.get("record_type") == "state" or (
            kind in CODEX_ITEMS and ("call_id" in obj or isinstance(obj.get("content"), list)
                                     or kind == "reasoning")):
        return "codex"
    if any(key in obj for key in ("parentUuid", "leafUuid", "isSidechain")) or kind in (
            "file-history-snapshot", "queue-operation"):
        return "claude-code"
    if kind in ("user", "assistant", "system", "summary") and ("uuid" in obj
                                                                or "message" in obj):
        return "claude-code"
    if ("sessionId" in obj and "projectHash" in obj) or "$rewindTo" in obj or "$set" in obj:
        return "gemini"
    if kind in GEMINI_TYPES and "id" in obj and "content" in obj:
        return "gemini"
    if ("id" in obj and "timestamp" in obj and "role" not in obj
            and any(key in obj for key in ("instructions", "git", "cwd"))):
        return "codex"  # the bare session line of older rollouts
    return None


def _gemini_document(doc: dict[str, Any] | list[Any]) -> bool:
    if isinstance(doc, list):
        return bool(doc) and all(isinstance(turn, dict) and "role" in turn
                                 and isinstance(turn.get("parts"), list) for turn in doc)
    if isinstance(doc.get("messages"), list):
        return any(key in doc for key in ("sessionId", "projectHash", "startTime"))
    return isinstance(doc.get("history"), list)


# --- Claude Code ---------------------------------------------------------------------------

def _claude(text: str) -> Transcript:
    entries: list[dict[str, Any]] = []
    where: dict[str, int] = {}  # uuid → index in entries
    skipped = 0
    for _, line in _lines(text):
        obj = _object(line)
        uuid = obj.get("uuid") if obj is not None else None
        if obj is None or (isinstance(uuid, str) and uuid in where):
            skipped += 1  # garbage, or an entry written twice
            continue
        if isinstance(uuid, str):
            where[uuid] = len(entries)
        entries.append(obj)
    chain, leaf = _claude_chain(entries, where)

    drafts: list[_Draft] = []
    by_message: dict[str, _Draft] = {}  # API message id → its draft, to merge split lines
    summaries: list[NewMessage] = []
    for i, entry in enumerate(entries):
        if (i not in chain or not _claude_turn(entry) or entry.get("isMeta")
                or entry.get("isApiErrorMessage")):
            skipped += 1
            continue
        message: dict[str, Any] = entry["message"]
        uuid = entry["uuid"]
        stamp = _time(entry.get("timestamp"))
        if entry["type"] == "assistant":
            if message.get("model") == "<synthetic>":  # Claude Code's words, not the model's
                skipped += 1
                continue
            mid = _str(message.get("id")) or uuid
            draft = by_message.get(mid)
            if draft is None:
                draft = by_message[mid] = _Draft("assistant", mid, stamp)
                drafts.append(draft)
            added = [draft.add(key, part) for key, part in _claude_blocks(message.get("content"))]
            skipped += not any(added)
            continue
        texts, results = _claude_user_blocks(message.get("content"))
        said = "\n".join(t.strip() for t in texts if t.strip())
        units: list[tuple[str, str]] = []
        first = 1
        if said and (entry.get("isCompactSummary") or said.startswith(CLAUDE_CONTINUED)):
            summaries.append(NewMessage(content=said, role="summary", message_id=uuid,
                                        created_at=stamp))
            first = 2  # the line's uuid is the summary's
        elif said:
            units.append(("user", said))
        units += [("tool", r) for r in results]
        skipped += not units and first == 1
        drafts.extend(_unit(uuid, stamp, units, first))

    session = None
    if leaf is not None:
        session = _str(entries[leaf].get("sessionId"))
    if session is None:
        session = next((s for i in sorted(chain) if (s := _str(entries[i].get("sessionId")))),
                       None)
    return Transcript("claude-code", session, _finish(drafts), summaries, skipped)


def _claude_turn(entry: dict[str, Any]) -> bool:
    return (entry.get("type") in TURN_ROLES and isinstance(entry.get("uuid"), str)
            and isinstance(entry.get("message"), dict) and not entry.get("isSidechain"))


def _claude_chain(entries: list[dict[str, Any]],
                  where: dict[str, int]) -> tuple[set[int], int | None]:
    """The entries on the path from the last turn back to the root, and that last turn.

    A rewind or an edited prompt leaves the abandoned branch in the file: only what leads
    to the last turn is the conversation. A compaction boundary has no parent but names
    the pre-compaction leaf as its logicalParentUuid. A parent whose line is torn or
    missing is bridged to the nearest earlier entry rather than losing all before it.
    """
    leaf = next((i for i in range(len(entries) - 1, -1, -1) if _claude_turn(entries[i])), None)
    chain: set[int] = set()
    i = leaf
    while i is not None and i not in chain:
        chain.add(i)
        parent = entries[i].get("parentUuid") or entries[i].get("logicalParentUuid")
        if not isinstance(parent, str):
            break
        if parent in where:
            i = where[parent]
        else:
            i = next((j for j in range(i - 1, -1, -1)
                      if isinstance(entries[j].get("uuid"), str)
                      and not entries[j].get("isSidechain")), None)
    return chain, leaf


def _claude_blocks(content: Any) -> Iterator[tuple[str, str]]:
    """An assistant line's parts, each with a key that spots a block written twice."""
    if isinstance(content, str):
        yield "text:" + content, content
        return
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            yield "text:" + block["text"], block["text"]
        elif kind in ("tool_use", "server_tool_use"):  # thinking blocks are dropped
            line = _tool_line(block.get("name"), block.get("input"))
            yield "tool:" + (_str(block.get("id")) or line), line


def _claude_user_blocks(content: Any) -> tuple[list[str], list[str]]:
    """A user line's text, and its tool results (shortened)."""
    if isinstance(content, str):
        return [content], []
    texts: list[str] = []
    results: list[str] = []
    for block in content if isinstance(content, list) else []:
        if isinstance(block, str):
            texts.append(block)
        elif not isinstance(block, dict):
            continue
        elif block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif block.get("type") == "tool_result":
            out = _squash(_text_of(block.get("content")), TOOL_OUTPUT_CHARS)
            if out:
                results.append("[error] " + out if block.get("is_error") is True else out)
    return texts, results


# --- Codex CLI -----------------------------------------------------------------------------

def _codex(text: str) -> Transcript:
    session: str | None = None
    started: str | None = None
    drafts: list[_Draft] = []
    summaries: list[_Draft] = []
    skipped = 0
    for number, line in _lines(text):
        obj = _object(line)
        if obj is None:
            skipped += 1
            continue
        kind = obj.get("type")
        stamp = _time(obj.get("timestamp"))
        if kind in CODEX_LINES and "payload" in obj:
            payload = obj["payload"]
            if not isinstance(payload, dict):
                skipped += 1
            elif kind == "session_meta":
                if session is None and _str(payload.get("id")):
                    session = payload["id"]
                    started = _time(payload.get("timestamp")) or stamp
            elif kind == "compacted":
                summary = _Draft("summary", None, stamp, line=number)
                if summary.add("", _str(payload.get("message")) or ""):
                    summaries.append(summary)
                else:
                    skipped += 1
            elif kind == "response_item":
                skipped += not _codex_item(payload, number, stamp, drafts)
            else:  # event_msg repeats the items; turn_context is settings
                skipped += 1
        elif "record_type" in obj:
            skipped += 1
        elif kind is None and "role" not in obj and _str(obj.get("id")) and session is None:
            session = obj["id"]  # the bare first line of an older rollout
            started = stamp
        else:
            skipped += not _codex_item(obj, number, stamp, drafts)
    for draft in (*drafts, *summaries):
        # Rollout items carry no id: their line in this (append-only) file is one.
        draft.message_id = f"{session}:{draft.line}" if session else None
        draft.created_at = draft.created_at or started
    return Transcript("codex", session, _finish(drafts), _finish(summaries), skipped)


def _codex_item(item: dict[str, Any], number: int, stamp: str | None,
                drafts: list[_Draft]) -> bool:
    """Add what one response item says; False when it says nothing worth keeping."""
    kind = item.get("type")
    role = "assistant"
    if kind == "message":
        texts = [t.strip() for t in _codex_texts(item.get("content")) if t.strip()]
        if (item.get("role") not in TURN_ROLES
                or any(t.lower().startswith(CODEX_INJECTED) for t in texts)):
            return False  # developer/system prompts and Codex's own context messages
        role = str(item["role"])
        content = "\n".join(texts)
    elif kind == "function_call":
        content = _tool_line(item.get("name"), item.get("arguments"))
    elif kind == "custom_tool_call":
        content = _tool_line(item.get("name"), item.get("input"))
    elif kind == "local_shell_call":
        action = item.get("action")
        content = _tool_line("shell", action if isinstance(action, dict) else None)
    elif kind == "web_search_call":
        action = item.get("action")
        content = _tool_line("web_search", action if isinstance(action, dict) else None)
    elif kind in ("function_call_output", "custom_tool_call_output"):
        role = "tool"
        content = _codex_output(item.get("output"))
    else:  # reasoning, snapshots, encrypted compaction
        return False
    draft = _Draft(role, None, stamp, line=number)
    if not draft.add("", content):
        return False
    drafts.append(draft)
    return True


def _codex_texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    return [c["text"] for c in content if isinstance(c, dict) and isinstance(c.get("text"), str)
            ] if isinstance(content, list) else []


def _codex_output(output: Any) -> str:
    failed = False
    text = ""
    if isinstance(output, str):
        text = output
        doc = _json(output) if output.lstrip().startswith("{") else None
        if isinstance(doc, dict) and isinstance(doc.get("output"), str):
            text = doc["output"]  # {"output": ..., "metadata": {"exit_code": ...}}
            meta = doc.get("metadata")
            code = meta.get("exit_code") if isinstance(meta, dict) else None
            failed = isinstance(code, int) and not isinstance(code, bool) and code != 0
    elif isinstance(output, list):
        text = " ".join(_codex_texts(output))
    elif isinstance(output, dict):
        text = _str(output.get("content")) or ""
        failed = output.get("success") is False
    out = _squash(text, TOOL_OUTPUT_CHARS)
    return "[error] " + out if out and failed else out


# --- Gemini CLI ----------------------------------------------------------------------------

def _gemini(text: str, doc: dict[str, Any] | list[Any] | None) -> Transcript:
    if isinstance(doc, list):
        return _gemini_history(doc)
    if isinstance(doc, dict) and isinstance(doc.get("messages"), list):
        return _gemini_records(doc, doc["messages"], 0)
    if isinstance(doc, dict) and isinstance(doc.get("history"), list):
        return _gemini_history(doc["history"])
    # A session log: replay it as Gemini CLI does (a record written again is an update).
    meta: dict[str, Any] = {}
    records: dict[str, dict[str, Any]] = {}
    skipped = 0
    for _, line in _lines(text):
        obj = _object(line)
        if obj is None:
            skipped += 1
        elif isinstance(obj.get("$rewindTo"), str):
            ids = list(records)
            cut = ids.index(obj["$rewindTo"]) if obj["$rewindTo"] in ids else 0
            for rid in ids[cut:]:
                del records[rid]
            skipped += len(ids) - cut
        elif isinstance(obj.get("id"), str):
            records[obj["id"]] = obj
        elif isinstance(obj.get("$set"), dict):
            meta.update(obj["$set"])
        elif isinstance(obj.get("sessionId"), str):
            meta.update(obj)
        else:
            skipped += 1
    listed = meta.get("messages")
    chosen = list(records.values()) or (listed if isinstance(listed, list) else [])
    return _gemini_records(meta, chosen, skipped)


def _gemini_records(meta: dict[str, Any], records: list[Any], skipped: int) -> Transcript:
    session = _str(meta.get("sessionId"))
    if meta.get("kind") == "subagent":
        raise DataError("a Gemini CLI subagent transcript: its work is recorded in the "
                        "parent session")
    drafts: list[_Draft] = []
    summaries: list[NewMessage] = []
    for record in records:
        if not isinstance(record, dict) or record.get("type") not in ("user", "gemini"):
            skipped += 1  # info, error and warning notices are the CLI's, not the chat's
            continue
        mid = _str(record.get("id"))
        stamp = _time(record.get("timestamp"))
        if record["type"] == "user":
            # What the user typed, rather than the prompt with @-files expanded.
            shown = record.get("displayContent")
            texts, _, _ = _gemini_parts(shown if shown else record.get("content"))
            said = "\n".join(t.strip() for t in texts if t.strip())
            if said.startswith(GEMINI_SNAPSHOT):
                summaries.append(NewMessage(content=said, role="summary", message_id=mid,
                                            created_at=stamp))
                continue
            draft = _Draft("user", mid, stamp)
            if draft.add("", said):
                drafts.append(draft)
            else:
                skipped += 1
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
            skipped += 1
        drafts += [reply, *results] if reply.parts else results
    return Transcript("gemini", session, _finish(drafts), summaries, skipped)


def _gemini_history(history: list[Any]) -> Transcript:
    """A `/chat save` checkpoint: the model's Content[] history, without ids or times."""
    drafts: list[_Draft] = []
    summaries: list[NewMessage] = []
    skipped = 0
    setup = False  # the turn before was Gemini CLI's own set-up, which the model acknowledges
    for n, turn in enumerate(history, 1):
        base = f"turn-{n}"
        was_setup, setup = setup, False
        if not isinstance(turn, dict):
            skipped += 1
            continue
        texts, calls, responses = _gemini_parts(turn.get("parts"))
        said = "\n".join(t.strip() for t in texts if t.strip())
        units: list[tuple[str, str]] = []
        summarised = False
        if turn.get("role") == "user":
            if said.startswith(GEMINI_SETUP):
                said, setup = "", True
            elif said.startswith(GEMINI_SNAPSHOT):
                summaries.append(NewMessage(content=said, role="summary", message_id=base))
                said, setup, summarised = "", True, True
            if said:
                units.append(("user", said))
            units += [("tool", out) for r in responses if (out := _function_response(r))]
        elif turn.get("role") == "model":
            if was_setup and not calls and said.startswith(GEMINI_ACK):
                said = ""
            lines = [said] if said else []
            lines += [_tool_line(c.get("name"), c.get("args")) for c in calls]
            if lines:
                units.append(("assistant", "\n".join(lines)))
        skipped += not units and not summarised
        drafts.extend(_unit(base, None, units))
    return Transcript("gemini", None, _finish(drafts), summaries, skipped)


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


# --- generic jsonl (SPEC §6) ---------------------------------------------------------------

def _jsonl(text: str) -> Transcript:
    messages: list[NewMessage] = []
    ids: dict[str, int] = {}
    for number, line in _lines(text):
        where = f"line {number}"
        try:
            obj = _load(line)
        except ValueError:
            raise DataError(f"{where}: not valid JSON") from None
        if not isinstance(obj, dict):
            raise DataError(f"{where}: expected a JSON object with role and content")
        unknown = sorted(set(obj) - set(JSONL_FIELDS))
        if unknown:
            raise DataError(f"{where}: unknown field {unknown[0]!r} "
                            f"(fields: {', '.join(JSONL_FIELDS)})")
        role, content = obj.get("role"), obj.get("content")
        if not isinstance(role, str) or not role.strip():
            raise DataError(f"{where}: 'role' must be a non-empty string")
        if role not in ROLES:
            raise DataError(f"{where}: role {role!r} is not one of {', '.join(ROLES)}")
        if not isinstance(content, str) or not content.strip():
            raise DataError(f"{where}: 'content' must be a non-empty string")
        if not _encodable(content):
            raise DataError(f"{where}: 'content' is not valid Unicode")
        if len(content.encode()) > MAX_CONTENT:
            raise DataError(f"{where}: 'content' is larger than {MAX_CONTENT // 1024} KiB")
        mid = obj.get("id")
        if mid is not None:
            if not isinstance(mid, str) or not mid.strip() or not _encodable(mid):
                raise DataError(f"{where}: 'id' must be a non-empty string")
            if mid in ids:
                raise DataError(f"{where}: id {mid!r} is already used on line {ids[mid]}")
            ids[mid] = number
        stamp = obj.get("timestamp")
        created = None
        if stamp is not None:
            created = _time(stamp)
            if created is None:
                raise DataError(f"{where}: 'timestamp' must be an ISO-8601 date and time, "
                                "e.g. 2026-05-01T09:30:00Z")
        tags = obj.get("tags")
        if tags is None:
            tags = []
        if not isinstance(tags, list) or not all(_good_tag(t) for t in tags):
            raise DataError(f"{where}: 'tags' must be a list of tags of 1-{MAX_TAG} "
                            "characters without spaces")
        messages.append(NewMessage(content=content, role=role, message_id=mid,
                                   created_at=created, tags=[t.strip() for t in tags]))
    if not messages:
        raise DataError("the transcript is empty")
    return Transcript("jsonl", None, messages, [], 0)


def _good_tag(tag: Any) -> bool:
    return (isinstance(tag, str) and 0 < len(tag.strip()) <= MAX_TAG and _encodable(tag)
            and not any(c.isspace() for c in tag.strip()))


# --- shared pieces -------------------------------------------------------------------------

@dataclass
class _Draft:
    """A message being assembled from one or more lines of the source."""

    role: str
    message_id: str | None
    created_at: str | None
    line: int = 0
    parts: list[str] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)

    def add(self, key: str, part: str) -> bool:
        """Append a part unless empty or (with a key) already added; True if appended."""
        part = part.strip()
        if not part or (key and key in self.seen):
            return False
        self.seen.add(key)
        self.parts.append(part)
        return True

    def message(self) -> NewMessage | None:
        if not self.parts:
            return None
        return NewMessage(content="\n".join(self.parts), role=self.role,
                          message_id=self.message_id, created_at=self.created_at)


def _unit(base: str, stamp: str | None, items: list[tuple[str, str]],
          first: int = 1) -> list[_Draft]:
    """Drafts for the messages one source entry yields: ids base, base#2, base#3, ..."""
    drafts = []
    for k, (role, content) in enumerate(items, first):
        draft = _Draft(role, base if k == 1 else f"{base}#{k}", stamp)
        draft.add("", content)
        drafts.append(draft)
    return drafts


def _finish(drafts: list[_Draft]) -> list[NewMessage]:
    return [m for d in drafts if (m := d.message()) is not None]


def _scrub(transcript: Transcript) -> Transcript:
    """Replace lone surrogates (JSON allows them; UTF-8 does not) in what agents wrote."""
    for m in (*transcript.messages, *transcript.summaries):
        m.content = _unicode(m.content)
        m.message_id = _unicode(m.message_id) if m.message_id is not None else None
    if transcript.session_id is not None:
        transcript.session_id = _unicode(transcript.session_id)
    return transcript


def _unicode(text: str) -> str:
    return text if _encodable(text) else _SURROGATE.sub("\ufffd", text)


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _tool_line(name: Any, args: Any) -> str:
    """`[tool NAME] what it was asked`: the command, path or pattern, else its arguments."""
    label = " ".join(name.split()) if isinstance(name, str) and name.strip() else "?"
    detail = _tool_detail(args)
    return f"[tool {label}] {detail}" if detail else f"[tool {label}]"


def _tool_detail(args: Any) -> str:
    if isinstance(args, str):  # Codex passes arguments as a JSON string
        parsed = _json(args) if args.lstrip().startswith("{") else None
        if not isinstance(parsed, dict):
            return _squash(args, TOOL_INPUT_CHARS)
        args = parsed
    if isinstance(args, dict):
        for key in TOOL_KEYS:
            value = args.get(key)
            if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
                value = _argv(value)
            if isinstance(value, str) and value.strip():
                return _squash(value, TOOL_INPUT_CHARS)
    if not args:
        return ""
    return _squash(_dumps(args), TOOL_INPUT_CHARS)


def _argv(argv: list[str]) -> str:
    """A command line: the script of `bash -lc SCRIPT`, else the words joined."""
    if (len(argv) >= 3 and argv[0].rsplit("/", 1)[-1] in SHELLS
            and argv[1] in ("-c", "-lc", "-ic")):
        return argv[2]
    return " ".join(argv)


def _text_of(content: Any) -> str:
    """The text of a tool result: a string, or the text blocks of a list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(b if isinstance(b, str) else b["text"] for b in content
                        if isinstance(b, str) or (isinstance(b, dict)
                                                  and isinstance(b.get("text"), str)))
    return ""


def _squash(text: str, limit: int) -> str:
    """Whitespace collapsed, cut to `limit` characters at a word's end (an ellipsis marks
    the cut)."""
    words: list[str] = []
    size = -1
    for match in _WORD.finditer(text):  # lazily: a tool's output may be megabytes
        words.append(match.group())
        size += len(words[-1]) + 1
        if size > limit:
            break
    out = " ".join(words)
    if len(out) <= limit:
        return out
    cut = out[: limit - 1]
    if out[limit - 1] != " ":  # never keep part of a word: a token cut short (a secret's
        cut = cut[: cut.rfind(" ") + 1]  # prefix) no longer matches its redaction rule
    return cut.rstrip() + "…"


def _time(value: Any) -> str | None:
    """An ISO-8601 time as given, with a UTC offset written as Z; None when not a time.

    A time without an offset is taken as UTC, as the rest of mem does (records.parse_time).
    """
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    try:
        dt = datetime.fromisoformat(text[:-1] + "+00:00" if text[-1] in "Zz" else text)
    except ValueError:
        return None
    if dt.tzinfo is None:
        return dt.replace(tzinfo=UTC).isoformat().replace("+00:00", "Z")
    if dt.utcoffset():
        return text  # another offset: as given
    if _UTC_SUFFIX.search(text):
        return _UTC_SUFFIX.sub("Z", text)
    return dt.isoformat().replace("+00:00", "Z")


def _lines(text: str) -> Iterator[tuple[int, str]]:
    """Non-blank lines with their 1-based numbers (split on \\n only: JSON strings may hold
    U+2028 and other characters str.splitlines() would split on)."""
    start, number = 0, 0
    while start <= len(text):  # lazily: detection reads a few lines of a large file
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        number += 1
        line = text[start:end].strip()
        if line:
            yield number, line
        start = end + 1


def _document(text: str) -> dict[str, Any] | list[Any] | None:
    """The text as one JSON object or array, if it is one."""
    if not text.lstrip().startswith(("{", "[")):
        return None
    doc = _json(text)
    return doc if isinstance(doc, dict | list) else None


def _object(line: str) -> dict[str, Any] | None:
    if not line.startswith("{"):
        return None
    obj = _json(line)
    return obj if isinstance(obj, dict) else None


def _json(text: str) -> Any:
    try:
        return _load(text)
    except ValueError:
        return None


def _load(text: str) -> Any:
    """json.loads, with nesting too deep for the parser reported as invalid JSON."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def _dumps(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (ValueError, TypeError, RecursionError):
        return ""


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
