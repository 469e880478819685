"""Codex CLI: ~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl, `{timestamp, type, payload}`
lines (session_meta, response_item, event_msg, turn_context, compacted); older files
start with a bare `{id, timestamp, instructions}` line followed by bare items. The IDE
extension's "# Context from my IDE setup:" preamble is cut down to the request.
Threads in Codex's paginated history mode also write `event_msg` lines of type
`item_completed` (`{thread_id, turn_id, item, started_at_ms, completed_at_ms}`, the
item a TurnItem tagged in PascalCase: UserMessage, AgentMessage, Plan, Reasoning,
CommandExecution, McpToolCall, DynamicToolCall, WebSearch, FileChange, ...). Most
repeat a `response_item` of the same turn: the two records of one message are paired
one to one, a user or assistant message by its role and its text (whitespace aside), a
tool call and its output by the call id (the item's id), and the later record of a
pair is ignored as "duplicate item" (the earlier one, with its line's id, is stored;
an item whose twin never comes is stored itself).
Rollouts reach gigabytes: `CodexReader` reads one line at a time, and `parse_stream`
turns lines read from a stream into batches of messages (the only format read so);
a line longer than MAX_LINE bytes is not read whole but counted as "line too long".
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memvault.model.records import NewMessage
from memvault.text.transcripts.base import (
    _NONBLANK,
    TOOL_OUTPUT_CHARS,
    TURN_ROLES,
    Format,
    Transcript,
    _Draft,
    _json,
    _squash,
    _str,
    _time,
    _tool_line,
    _unicode,
    home_place,
)

CODEX_LINES = ("session_meta", "response_item", "event_msg", "turn_context", "compacted")
CODEX_ITEMS = ("message", "reasoning", "function_call", "function_call_output",
               "local_shell_call", "custom_tool_call", "custom_tool_call_output",
               "web_search_call", "ghost_snapshot", "compaction", "compaction_summary")
# User-role messages Codex writes itself (its is_contextual_user_message), lower-cased.
CODEX_INJECTED = ("<environment_context>", "<user_instructions>",
                  "# agents.md instructions for ", "<turn_aborted>", "<context_update>",
                  "<user_shell_command>", "<skill", "<subagent_notification>")
# The IDE extension wraps the request in its context: the request follows the marker.
CODEX_IDE = "# Context from my IDE setup:"
CODEX_REQUEST = "## My request for Codex:"
# How many records still waiting for their twin (item_completed ↔ response_item) are
# remembered: twins are close in the file, and memory must not grow with it.
CODEX_PAIRING = 10_000


def sniff_line(obj: dict[str, Any]) -> bool:
    kind = obj.get("type")
    if kind in CODEX_LINES and "payload" in obj:
        return True
    return obj.get("record_type") == "state" or (
        kind in CODEX_ITEMS and ("call_id" in obj or isinstance(obj.get("content"), list)
                                 or kind == "reasoning"))


def sniff_bare(obj: dict[str, Any]) -> bool:
    """The bare session line of older rollouts (probed after every other format's lines:
    it is the least particular)."""
    return ("id" in obj and "timestamp" in obj and "role" not in obj
            and any(key in obj for key in ("instructions", "git", "cwd")))


def places(home: Path, env: Mapping[str, str]) -> list[Path]:
    # Codex moves old rollouts to archived_sessions/ (and recompresses idle ones).
    return [home_place(home, env, "CODEX_HOME", ".codex", folder)
            for folder in ("sessions", "archived_sessions")]


def _codex(text: str) -> Transcript:
    reader = CodexReader()
    start = 0
    while start < len(text):  # lazily: the lines with their newlines, as a stream gives them
        end = text.find("\n", start)
        end = len(text) if end < 0 else end + 1
        reader.feed(text[start:end])
        start = end
    return reader.finish()


class CodexReader:
    """A Codex rollout read one line at a time (the lines of a file of any size).

    feed() each line as read (with its newline, but perhaps the last: a last line without
    one is torn if it is not JSON) or skip() one that could not be read; take() the
    messages read so far, once the session's id is known (their ids derive from it, so
    none is given before); finish() at the end for the rest, the summaries and the
    counts of ignored lines. Memory holds the messages not taken yet, the summaries and
    at most CODEX_PAIRING keys of records waiting for their twin.
    """

    def __init__(self) -> None:
        self.session: str | None = None
        self.started: str | None = None
        self.ignored: Counter[str] = Counter()
        self.lines = 0  # non-blank lines fed, and lines skipped
        self.recognised = False  # whether a line was a rollout's (not another format's)
        self.messages = 0  # messages given (by take and finish)
        self._number = 0
        self._drafts: list[_Draft] = []
        self._summaries: list[_Draft] = []
        # (source, kind, key) → how many records of that source still wait for a twin.
        self._unpaired: dict[tuple[str, ...], int] = {}
        self._since: dict[tuple[str, ...], int] = {}  # → the line of the first waiting

    def skip(self, reason: str) -> None:
        """A line the caller could not read (too long, not UTF-8): counted under `reason`."""
        self._number += 1
        self.lines += 1
        self.ignored[reason] += 1

    def feed(self, line: str) -> None:
        self._number += 1
        number = self._number
        if number == 1:
            line = line.removeprefix("\ufeff")
        start = _NONBLANK.search(line)
        if start is None:
            return
        self.lines += 1
        obj: Any = None
        if line[start.start()] == "{":
            obj = _json(line)  # JSON's whitespace around it is allowed: no stripped copy
            if obj is None:
                obj = _json(line.strip())  # other Unicode spaces around it
        if not isinstance(obj, dict):
            torn = not line.endswith("\n") and _json(line.strip()) is None
            self.ignored["torn last line" if torn else "not json"] += 1
            return
        if not self.recognised:
            from memvault.text.transcripts import _sniff_line  # the formats' probe order

            self.recognised = _sniff_line(obj) == "codex"
        reason = self._line(obj, number)
        if reason:
            self.ignored[reason] += 1

    def resume_at(self, number: int) -> None:
        """Go on as if the file's lines up to `number` were read (a read on from a later
        line, after the first: the lines keep the numbers their messages' ids are made of)."""
        self._number = max(self._number, number)

    def waiting_since(self, line: int) -> int | None:
        """The first line, from `line` on, of a record still waiting for its twin: a later
        read must start there for the two to be read as one message (a record older than
        that is taken for one whose twin never comes, as older rollouts write none)."""
        return min((n for n in self._since.values() if n >= line), default=None)

    def take(self) -> list[NewMessage]:
        if self.session is None:
            return []
        drafts, self._drafts = self._drafts, []
        return self._messages(drafts)

    def finish(self) -> Transcript:
        drafts, self._drafts = self._drafts, []
        messages = self._messages(drafts)
        summaries = self._messages(self._summaries, count=False)
        self._summaries = []
        session = _unicode(self.session) if self.session is not None else None
        return Transcript("codex", session, messages, summaries, dict(self.ignored))

    def _messages(self, drafts: list[_Draft], count: bool = True) -> list[NewMessage]:
        out = []
        for draft in drafts:
            # Rollout items carry no id: their line in this (append-only) file is one.
            if self.session:
                base = f"{self.session}:{draft.line}"
                draft.message_id = base if draft.nth == 1 else f"{base}#{draft.nth}"
            draft.created_at = draft.created_at or self.started
            message = draft.message()
            if message is not None:
                message.content = _unicode(message.content)
                if message.message_id is not None:
                    message.message_id = _unicode(message.message_id)
                out.append(message)
        if count:
            self.messages += len(out)
        return out

    def _line(self, obj: dict[str, Any], number: int) -> str | None:
        """Read one line's object; why it yields nothing, else None."""
        kind = obj.get("type")
        stamp = _time(obj.get("timestamp"))
        if kind in CODEX_LINES and "payload" in obj:
            payload = obj["payload"]
            if not isinstance(payload, dict):
                return "unknown type"
            if kind == "session_meta":
                if self.session is None and _str(payload.get("id")):
                    self.session = payload["id"]
                    self.started = _time(payload.get("timestamp")) or stamp
                return None
            if kind == "compacted":
                summary = _Draft("summary", None, stamp, line=number)
                if not summary.add("", _str(payload.get("message")) or ""):
                    return "empty"
                self._summaries.append(summary)
                return None
            if kind == "response_item":
                return self._response(payload, number, stamp)
            if kind == "event_msg" and payload.get("type") == "item_completed":
                return self._completed(payload, number, stamp)
            # Other events repeat the items; turn_context is settings.
            return "event" if kind == "event_msg" else "settings"
        if "record_type" in obj:
            return "state"
        if kind is None and "role" not in obj and _str(obj.get("id")) and self.session is None:
            self.session = obj["id"]  # the bare first line of an older rollout
            self.started = stamp
            return None
        return self._response(obj, number, stamp)

    def _response(self, item: dict[str, Any], number: int, stamp: str | None) -> str | None:
        drafts: list[_Draft] = []
        reason = _codex_item(item, number, stamp, drafts)
        if reason:
            return reason
        kind = item.get("type")
        call = _str(item.get("call_id")) or _str(item.get("id"))
        key: tuple[str, ...] | None = None
        if kind == "message":
            key = _codex_said(drafts[0])
        elif call and kind in ("function_call_output", "custom_tool_call_output"):
            key = ("out", call)
        elif call and kind in ("function_call", "custom_tool_call", "local_shell_call",
                               "web_search_call"):
            key = ("call", call)
        return self._keep("response", list(zip(drafts, [key], strict=True)))

    def _completed(self, event: dict[str, Any], number: int, stamp: str | None) -> str | None:
        """An item_completed event: its TurnItem, unless it repeats a response_item."""
        item = event.get("item")
        if not isinstance(item, dict):
            return "unknown type"
        found, reason = _codex_turn_item(item)
        if reason:
            return reason
        pairs: list[tuple[_Draft, tuple[str, ...] | None]] = []
        for nth, (role, content, key) in enumerate(found, 1):
            draft = _Draft(role, None, stamp, line=number, nth=nth)
            if draft.add("", content):
                pairs.append((draft, key or _codex_said(draft)))
        return self._keep("event", pairs) if pairs else "empty"

    def _keep(self, source: str,
              pairs: list[tuple[_Draft, tuple[str, ...] | None]]) -> str | None:
        """Keep the drafts whose key has no waiting twin from the other source."""
        kept = [draft for draft, key in pairs
                if key is None or not self._pair(source, key, draft.line)]
        self._drafts += kept
        return None if kept else "duplicate item"

    def _pair(self, source: str, key: tuple[str, ...], line: int = 0) -> bool:
        """True when a record of the other source waits with this key (the two are one
        message: the twin is used up); else this record waits for its own twin."""
        twin = ("event" if source == "response" else "response", *key)
        waiting = self._unpaired.get(twin, 0)
        if waiting:
            if waiting == 1:
                del self._unpaired[twin]
                self._since.pop(twin, None)
            else:
                self._unpaired[twin] = waiting - 1
            return True
        mine = (source, *key)
        self._unpaired[mine] = self._unpaired.pop(mine, 0) + 1  # the newest goes last
        self._since.setdefault(mine, line)
        if len(self._unpaired) > CODEX_PAIRING:
            oldest = next(iter(self._unpaired))
            del self._unpaired[oldest]
            self._since.pop(oldest, None)
        return False


def _codex_said(draft: _Draft) -> tuple[str, ...]:
    """The key pairing the two records of one message: who said it, and what (without
    whitespace, which the two records join differently)."""
    text = "".join("".join(draft.parts).split())
    return ("said", draft.role, hashlib.blake2b(text.encode(errors="surrogatepass"),
                                                digest_size=16).hexdigest())


def _codex_turn_item(item: dict[str, Any]) -> tuple[list[tuple[str, str, tuple[str, ...] | None]],
                                                    str | None]:
    """The messages of an item_completed event's TurnItem as (role, content, pairing key:
    None for a message's, which is made from what it says); else why it yields none."""
    kind = "".join(c for c in str(item.get("type")) if c.isalnum()).lower()  # PascalCase
    iid = _str(item.get("id")) or _str(item.get("call_id")) or ""
    call: tuple[str, ...] | None = ("call", iid) if iid else None
    out: tuple[str, ...] | None = ("out", iid) if iid else None
    if kind == "usermessage":
        text = "".join(c["text"] for c in item.get("content") or []
                       if isinstance(c, dict) and c.get("type") == "text"
                       and isinstance(c.get("text"), str)).strip()
        if text.lower().startswith(CODEX_INJECTED):
            return [], "harness text"
        return [("user", _codex_request(text), None)], None
    if kind == "agentmessage":
        return [("assistant", "\n".join(_codex_texts(item.get("content"))), None)], None
    if kind == "plan":
        return [("assistant", _str(item.get("text")) or "", None)], None
    if kind == "reasoning":
        return [], "thinking"
    if kind == "commandexecution":
        output = next((v for k in ("aggregated_output", "formatted_output", "stdout")
                       if (v := _str(item.get(k))) is not None), "")
        code = item.get("exit_code")
        failed = item.get("status") in ("failed", "Failed") or (
            isinstance(code, int) and not isinstance(code, bool) and code != 0)
        return [("assistant", _tool_line("shell", {"command": item.get("command")}), call),
                ("tool", _failed(_squash(output, TOOL_OUTPUT_CHARS), failed), out)], None
    if kind in ("mcptoolcall", "dynamictoolcall"):
        name = "__".join(n for k in ("server", "namespace", "tool")
                         if (n := _str(item.get(k))))
        result = item.get("result")
        texts = _codex_texts(result.get("content") if isinstance(result, dict)
                             else item.get("content_items"))
        error = item.get("error")
        error = error.get("message") if isinstance(error, dict) else error
        failed = isinstance(error, str) and bool(error) or item.get("success") is False or (
            isinstance(result, dict) and result.get("isError") is True)
        said = " ".join(texts) or (error if isinstance(error, str) else "")
        return [("assistant", _tool_line(name, item.get("arguments")), call),
                ("tool", _failed(_squash(said, TOOL_OUTPUT_CHARS), failed), out)], None
    if kind == "websearch":
        query = _str(item.get("query"))
        action = item.get("action")
        args = {"query": query} if query else action if isinstance(action, dict) else None
        return [("assistant", _tool_line("web_search", args), call)], None
    if kind == "filechange":
        changes = item.get("changes")
        paths = " ".join(str(p) for p in changes) if isinstance(changes, dict) else ""
        said = " ".join(s for k in ("stdout", "stderr") if (s := _str(item.get(k))))
        return [("assistant", _tool_line("apply_patch", paths), call),
                ("tool", _failed(_squash(said, TOOL_OUTPUT_CHARS),
                                 item.get("status") in ("failed", "declined")), out)], None
    if kind == "contextcompaction":
        return [], "encrypted summary"
    return [], "event"  # hooks, images, sleeps, subagents' activity: not the conversation


def _failed(out: str, failed: bool) -> str:
    return "[error] " + out if out and failed else out


def _codex_item(item: dict[str, Any], number: int, stamp: str | None,
                drafts: list[_Draft]) -> str | None:
    """Add what one response item says; why it says nothing worth keeping, else None."""
    kind = item.get("type")
    role = "assistant"
    if kind == "message":
        texts = [t.strip() for t in _codex_texts(item.get("content")) if t.strip()]
        if item.get("role") not in TURN_ROLES:
            return "system prompt"  # developer and system messages
        if any(t.lower().startswith(CODEX_INJECTED) for t in texts):
            return "harness text"  # Codex's own context messages
        role = str(item["role"])
        if role == "user":
            texts = [_codex_request(t) for t in texts]
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
    elif kind == "reasoning":
        return "thinking"
    elif kind == "ghost_snapshot":
        return "snapshot"
    elif kind in ("compaction", "compaction_summary"):
        return "encrypted summary"
    else:
        return "unknown type"
    draft = _Draft(role, None, stamp, line=number)
    if not draft.add("", content):
        return "empty"
    drafts.append(draft)
    return None


def _codex_request(text: str) -> str:
    """The user's request, without the context the IDE extension puts before it."""
    if text.startswith(CODEX_IDE) and CODEX_REQUEST in text:
        return text.split(CODEX_REQUEST, 1)[1].strip()
    return text


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


FORMAT = Format("codex", "Codex CLI", places, parse=_codex, sniff_line=sniff_line)
