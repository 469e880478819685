"""Transcript parsers: an agent's session file in, messages out (SPEC §6, `mem ingest`).

Pure functions over the text of one file: no I/O, no vault. Each agent's file is read
the way the agent reads it back, so that what is stored is the conversation the user
saw: Claude Code's rewound branches are dropped, Codex's injected context is not taken
for the user's words, a Gemini rewind removes what it rewound. Tool calls and results
are kept as short lines, so that what the agent did stays searchable without filling
the vault with file dumps.

Agents' files are read leniently: they are written by programs whose formats change
without notice, and often while mem reads them. A line that yields no message is never
dropped silently: it is counted in `Transcript.ignored` under a short reason ("not
json", "torn last line", "abandoned branch", "harness text", "thinking", "meta", ...),
and `Transcript.skipped` is their total. The last line of a file being written may be
torn (no newline yet, not valid JSON): it is ignored as "torn last line", and read once
it is whole. Message ids come from the file itself (uuids, API message ids, record ids,
line numbers of append-only files), never from what was read so far: parsing a prefix
of a file and then the whole file gives the same message the same id (its content may
have grown, when later lines of one API message were merged in).

The generic `jsonl` format is read strictly, since a person or a script wrote it: one
bad line refuses the whole file, naming the line.

A session with nothing to keep (an agent's session opened and quit: its metadata, the
harness's own text, the context a hook added; or an empty file) is no error: it parses
to a Transcript without messages. A file that yields no message and is not recognisably
of the format asked for (a Codex rollout read as Claude Code's) is: DataError.

Formats, as their sources define them:
- Claude Code: ~/.claude/projects/<dir>/<session>.jsonl, one entry per line, linked
  by uuid/parentUuid (a rewind leaves the abandoned branch in the file; a compaction
  starts a new root whose logicalParentUuid points back). The conversation is the
  branch from the last turn back to the root, plus the results of its tool calls:
  the lines of one API message share its message id and are merged into one message,
  and the results of a batch of parallel tool calls each chain to their own tool_use
  line, off that branch, so a tool_result line is kept when its tool_use_id is one of
  the branch's tool_use blocks (file order is kept). A file whose entries carry no
  parentUuid/logicalParentUuid at all (another tool writing Claude Code's shape) is
  read whole, in file order.
  <session>/subagents/agent-<id>.jsonl (every entry isSidechain) is a subagent's
  conversation: its messages belong to the parent session (the entries' sessionId)
  with channel "subagent:<agentId>". Claude Code's compaction agent (its prompt asks
  for a summary of the conversation so far) only restates the session: NotTranscript.
  Harness text in user lines is not the user's words: `[Request interrupted by user…]`
  lines, `<system-reminder>`, `<task-notification>` (with its "Read the output file…"
  line), `<command-message>` and `<local-command-caveat>` blocks are removed (the rest
  of the line is kept) and a line left empty is ignored as "harness text". A slash
  command (`<command-name>/x</command-name>` + `<command-args>a</command-args>`) is
  the user message "/x a"; a bash-mode command (`<bash-input>`) is "!cmd"; what the
  user saw (`<local-command-stdout>`, `-stderr>`, `<bash-stdout>`, `<bash-stderr>`) is
  a tool message, shortened like a tool result ("(no content)" is no content).
  Claude Code 2.x writes local commands as `system` entries (subtype local_command):
  they are read the same way. A compaction summary is stored without Claude Code's
  preamble ("This session is being continued…") and closing instructions ("If you
  need specific details…", "Please continue the conversation…"), with its own time.
- Codex CLI: ~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl, `{timestamp, type, payload}`
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
- Gemini CLI: ~/.gemini/tmp/<hash>/chats/session-*.json (one JSON document) or
  session-*.jsonl (a metadata line, message records, `$set` and `$rewindTo` records;
  `type` "gemini" or "model" is the model's); `/chat save` checkpoints
  (`{history: Content[]}` or a bare Content[]), whose first turn is Gemini CLI's
  environment (`<session_context>…`, or older "This is the Gemini CLI…" and the
  model's "Got it" reply): not stored. `logs.json` (the prompts typed, without the
  replies) and subagent logs are NotTranscript.
- jsonl (generic): `{"id"?, "role", "name"?, "content", "timestamp"?, "tags"?}` per
  line. `name` is the speaker, as in OpenAI's chat format, `speaker` an alias (a string
  of 1-128 characters without control characters); a line with a name and no role is
  the user's.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import islice
from typing import Any

from memvault.errors import DataError, NotTranscript, UsageError
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
# The closing lines Claude Code adds after a compaction summary: instructions, not summary.
CLAUDE_SUMMARY_TAIL = ("If you need specific details from before compaction",
                       "Please continue the conversation from where we left",
                       "Continue the conversation from where it left off",
                       "Recent messages are preserved verbatim.")
# The task Claude Code gives its compaction agent (agent-acompact-*.jsonl).
CLAUDE_COMPACT_PROMPT = "Your task is to create a detailed summary of the conversation so far"
# Entries that are Claude Code's bookkeeping, not turns, with the reason they are ignored.
CLAUDE_NOISE = {"progress": "progress", "file-history-snapshot": "file history",
                "file-history-delta": "file history", "queue-operation": "queue",
                "summary": "title", "custom-title": "title", "system": "system"}
CLAUDE_NO_OUTPUT = "(no content)"

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
# Reading a stream: the longest line read whole (a longer one, a tool's output of tens of
# MB, is skipped and counted), and how many messages a batch holds.
MAX_LINE = 16 << 20
STREAM_BATCH = 5000

GEMINI_TYPES = ("user", "gemini", "model", "info", "error", "warning")
GEMINI_MODEL = ("gemini", "model")
# What Gemini CLI puts at the start of a chat's history, and its compression summary.
GEMINI_SETUP = "This is the Gemini CLI. We are setting up the context for our chat."
GEMINI_CONTEXT = "<session_context>"
GEMINI_ACK = "Got it. Thanks for the"
GEMINI_SNAPSHOT = "<state_snapshot>"
# The keys of a logs.json entry (Gemini CLI's list of prompts typed).
GEMINI_LOG_KEYS = frozenset({"sessionId", "messageId", "message"})

# The keys that say a line is meant as generic JSONL (the format then says what is wrong).
JSONL_SHAPE = frozenset({"role", "content"})
JSONL_FIELDS = ("id", "role", "name", "speaker", "content", "timestamp", "tags")
MAX_NAME = 128
_UTC_SUFFIX = re.compile(r"(?:[Zz]|[+-]00:?00)$")
_WORD = re.compile(r"\S+")
_NONBLANK = re.compile(r"\S")
_SURROGATE = re.compile("[\ud800-\udfff]")

# Claude Code's harness text inside user lines (see the module docstring).
_HARNESS_BLOCK = re.compile(
    r"<(system-reminder|task-notification|command-message|local-command-caveat)>.*?</\1>"
    r"(?:\s*Read the output file to retrieve the result:[^\n]*)?", re.S)
_HARNESS_LINE = re.compile(
    r"^[ \t]*(?:\[Request interrupted by user[^\]\n]*\]|Caveat: The messages below were "
    r"generated by the user while running local commands\.[^\n]*)[ \t]*$", re.M)
_COMMAND_TAG = re.compile(
    r"<(command-name|command-args|bash-input|local-command-stdout|local-command-stderr|"
    r"bash-stdout|bash-stderr)>(.*?)</\1>", re.S)
_CONTINUED = re.compile(
    re.escape(CLAUDE_CONTINUED) + r" that ran out of context\.[ \t]*(?:The conversation is "
    r"summarized below:|The summary below covers the earlier portion of the conversation\.)?")
_SESSION_CONTEXT = re.compile(r"<session_context>.*?</session_context>", re.S)


@dataclass
class Transcript:
    """What one transcript file holds, in conversation order.

    `ignored` counts the lines or entries that yielded no message, by reason: "not json",
    "torn last line" (the file is being written: read it again later), "duplicate line",
    "abandoned branch" (rewound), "sidechain", "meta", "synthetic", "harness text"
    (the agent's words in the user's place), "thinking", "empty", "system prompt"; the
    agents' bookkeeping: "progress", "file history", "queue", "title", "system", "event",
    "settings", "state", "snapshot", "encrypted summary", "notice"; and "unknown type".
    """

    format: str
    session_id: str | None
    messages: list[NewMessage] = field(default_factory=list)
    # Compaction summaries the agent wrote: its words about the session, not the user's.
    summaries: list[NewMessage] = field(default_factory=list)
    # Lines or entries that yielded no message, by reason ("not json": 2, ...).
    ignored: dict[str, int] = field(default_factory=dict)
    # The session each message (and summary) was said in, by message id, where the
    # transcript names one per line (Claude Code: a resumed session's file goes on from
    # its predecessor's lines, which keep their sessionId). Unlike `session_id` (the last
    # turn's), a line's session never changes as the file grows.
    said_in: dict[str, str] = field(default_factory=dict)

    @property
    def skipped(self) -> int:
        """How many lines or entries yielded no message (the total of `ignored`)."""
        return sum(self.ignored.values())


def detect(text: str) -> str:
    """The transcript's format, from its first lines (or its shape, for one JSON document)."""
    return _sniff(text.removeprefix("\ufeff"))[0]


def parse(text: str, fmt: str = "auto") -> Transcript:
    """Parse one transcript; DataError (one line) when it is malformed, or yields no
    message and is not of the format `fmt`; NotTranscript when it is a file of an
    agent's that is not a conversation to store. A session with nothing to keep (and an
    empty file) is a Transcript without messages."""
    text = text.removeprefix("\ufeff")
    doc: dict[str, Any] | list[Any] | None = None
    if fmt != "auto" and fmt not in FORMATS:
        raise UsageError(f"unknown transcript format {fmt!r}: choose auto, {', '.join(FORMATS)}")
    if not text.strip():
        return Transcript(fmt, None)  # nothing written yet: nothing to keep
    if fmt == "auto":
        fmt, doc = _sniff(text)
    if fmt == "jsonl":
        return _jsonl(text)
    if fmt == "claude-code":
        transcript = _claude(text)
    elif fmt == "codex":
        transcript = _codex(text)
    else:
        transcript = _gemini(text, doc if doc is not None else _document(text))
    if not transcript.messages and not transcript.summaries and not _recognised(text, fmt):
        raise DataError(_nothing(fmt, transcript))  # not this format: say what was read
    return _scrub(transcript)


def _recognised(text: str, fmt: str) -> bool:
    """Whether a text that yielded no message is of the format `fmt` all the same (a
    session with nothing to keep), as the format's detection tells."""
    try:
        return _sniff(text)[0] == fmt
    except NotTranscript:
        return False


# --- streaming (Codex rollouts reach gigabytes) ----------------------------------------------

@dataclass(frozen=True)
class LongLine:
    """A line of a stream longer than MAX_LINE bytes, which the reader skipped instead of
    holding it in memory: counted as "line too long", never parsed."""

    size: int


def detect_stream(lines: Iterable[str]) -> str | None:
    """"codex" when the first lines of a file show a Codex rollout (the format read as a
    stream: see parse_stream), else None: the whole text is needed (detect, parse).

    Takes the lines lazily, up to the first that tells (at most SNIFF_LINES non-blank
    ones), and agrees with detect(): a file whose first line opens a JSON document spread
    over several lines is left to detect()."""
    seen = 0
    for line in lines:
        text = line.removeprefix("\ufeff").strip() if not seen else line.strip()
        if not text:
            continue
        seen += 1
        obj = _object(text)
        if obj is None:
            if seen == 1 and text.startswith(("{", "[")) and _json(text) is None:
                return None  # one JSON document over several lines (Gemini's session file)
        elif (fmt := _sniff_line(obj)) is not None:
            return "codex" if fmt == "codex" and not _gemini_document(obj) else None
        if seen >= SNIFF_LINES:
            return None
    return None


def parse_stream(lines: Iterable[bytes | LongLine],
                 batch: int | None = None) -> Iterator[Transcript]:
    """A Codex rollout parsed as it is read, in Transcripts of at most `batch` (default
    STREAM_BATCH) messages in file order; the last one (perhaps without messages) has the
    summaries and the counts of the lines ignored, the others none. Every message has its
    final id: none is yielded before the session's id is known (in the first lines).

    `lines` are the lines of the file as read (UTF-8 bytes, each with its newline but
    perhaps the last), a LongLine for one the reader skipped. Memory holds one line and one
    batch, whatever the size of the file. A line that is not UTF-8 is ignored as "not
    utf-8" (the stream has been read and stored from already: the file is not refused).
    DataError at the end when the file held no message and no line of a rollout, like
    parse(); a rollout with nothing to keep (or no line) ends in a Transcript without
    messages."""
    batch = batch or STREAM_BATCH
    reader = CodexReader()
    ready: list[NewMessage] = []
    for raw in lines:
        if isinstance(raw, LongLine):
            reader.skip("line too long")
            continue
        try:
            # A torn last line may end inside a character: it is torn, not foreign.
            line = raw.decode("utf-8", "strict" if raw.endswith(b"\n") else "replace")
        except UnicodeDecodeError:
            reader.skip("not utf-8")
            continue
        del raw  # a long line is held once, not twice
        reader.feed(line)
        del line
        ready += reader.take()
        while len(ready) >= batch:
            session = _unicode(reader.session) if reader.session is not None else None
            yield Transcript("codex", session, ready[:batch])
            ready = ready[batch:]
    last = reader.finish()
    if reader.lines and not reader.messages and not last.summaries and not reader.recognised:
        raise DataError(_nothing("codex", last))
    yield Transcript("codex", last.session_id, [*ready, *last.messages], last.summaries,
                     last.ignored)


def _nothing(fmt: str, transcript: Transcript) -> str:
    """Why a transcript is refused: it has no message (and what its lines were)."""
    why = ", ".join(f"{n} {reason}" for reason, n in
                    sorted(transcript.ignored.items(), key=lambda kv: (-kv[1], kv[0])))
    return (f"no {fmt} messages in the transcript ({transcript.skipped} lines or entries "
            f"skipped{': ' if why else ''}{why})")


# --- detection -----------------------------------------------------------------------------

def _sniff(text: str) -> tuple[str, dict[str, Any] | list[Any] | None]:
    if not text.strip():
        raise DataError("the transcript is empty")
    doc = _document(text)
    if doc is not None:
        _refuse_gemini_log(doc)
        if _gemini_document(doc):
            return "gemini", doc
    first: dict[str, Any] | None = None
    for _, line in islice(_lines(text), SNIFF_LINES):
        obj = _object(line)
        if obj is None:
            continue
        first = obj if first is None else first
        fmt = _sniff_line(obj)
        if fmt:
            return fmt, None
    if first is not None and first.keys() & JSONL_SHAPE:
        return "jsonl", None  # meant as generic JSON lines: the format says what is wrong
    # Another program's JSON (settings, a prompt history): a scan passes over it.
    raise NotTranscript("not a transcript mem can read: expected JSON lines (Claude Code, "
                        "Codex, generic jsonl) or a Gemini CLI session file")


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


def _refuse_gemini_log(doc: dict[str, Any] | list[Any]) -> None:
    """Gemini CLI's logs.json lists the prompts typed, without the replies: not a chat."""
    if isinstance(doc, list) and doc and all(
            isinstance(entry, dict) and GEMINI_LOG_KEYS <= entry.keys() for entry in doc):
        raise NotTranscript("a Gemini CLI prompt log (logs.json), not a transcript: it lists "
                            "the prompts typed, without the replies")


# --- Claude Code ---------------------------------------------------------------------------

def _claude(text: str) -> Transcript:
    ignored: Counter[str] = Counter()
    entries: list[dict[str, Any]] = []
    where: dict[str, int] = {}  # uuid → index in entries
    for _, obj in _objects(text, ignored):
        uuid = obj.get("uuid")
        if isinstance(uuid, str):
            if uuid in where:
                ignored["duplicate line"] += 1  # an entry written twice
                continue
            where[uuid] = len(entries)
        entries.append(obj)
    # A subagent's own file: every turn is a sidechain (of the parent session).
    turns = [e for e in entries if _claude_turn(e)]
    sub = bool(turns) and all(e.get("isSidechain") is True for e in turns)
    channel = None
    if sub:
        agent = next((a for e in entries if (a := _str(e.get("agentId")))), None)
        if (agent or "").startswith("acompact") or _claude_compaction_agent(turns):
            raise NotTranscript("a Claude Code compaction agent transcript: it only restates "
                                "its session to summarise it")
        channel = f"subagent:{agent}" if agent and _clean_name(agent) else "subagent"
    # Other tools write Claude Code's shape without links: their file order is the order.
    linked = any(isinstance(e.get("parentUuid"), str) or isinstance(e.get("logicalParentUuid"),
                                                                      str) for e in entries)
    if linked:
        branch, leaf = _claude_branch(entries, where, sub)
    else:
        branch = set(range(len(entries)))
        leaf = next((i for i in range(len(entries) - 1, -1, -1)
                     if _claude_turn(entries[i])), None)

    drafts: list[_Draft] = []
    by_message: dict[str, _Draft] = {}  # API message id → its draft, to merge split lines
    summaries: list[NewMessage] = []
    said_in: dict[str, str] = {}  # message id → the sessionId of its (first) line
    for i, entry in enumerate(entries):
        reason = _claude_ignored(entry, i in branch, sub)
        if reason:
            ignored[reason] += 1
            continue
        uuid = _str(entry.get("uuid"))
        stamp = _time(entry.get("timestamp"))
        if (said := _str(entry.get("sessionId"))) is not None:
            if uuid is not None:
                said_in.setdefault(uuid, said)
            if (mid := _claude_message_id(entry)) is not None:
                said_in.setdefault(mid, said)
        if entry.get("type") == "system":  # a local command (Claude Code 2.x)
            shown = _claude_said(entry["content"])
            if not shown:
                ignored["harness text" if entry["content"].strip() else "empty"] += 1
            drafts.extend(_unit(uuid, stamp, shown))
            continue
        message: dict[str, Any] = entry["message"]
        if entry["type"] == "assistant":
            mid = _str(message.get("id")) or uuid
            draft = by_message.get(mid) if mid else None
            if draft is None:
                draft = _Draft("assistant", mid, stamp)
                drafts.append(draft)
                if mid:
                    by_message[mid] = draft
            reason = _claude_assistant(draft, message.get("content"))
            if reason:
                ignored[reason] += 1
            continue
        texts, results = _claude_user_blocks(message.get("content"))
        said = "\n".join(t.strip() for t in texts if t.strip())
        compacted = bool(said) and (entry.get("isCompactSummary") is True
                                    or said.startswith(CLAUDE_CONTINUED))
        units: list[tuple[str, str]] = []
        body = _claude_summary(said) if compacted else ""
        if body:
            summaries.append(NewMessage(content=body, role="summary", message_id=uuid,
                                        created_at=stamp))
        elif said and not compacted:
            units = _claude_said(said)
        units += [("tool", r) for r in results]
        if not units and not body:
            ignored["harness text" if said and not compacted else "empty"] += 1
        drafts.extend(_unit(uuid, stamp, units, 2 if compacted else 1))  # #1: the summary

    session = None
    if leaf is not None:
        session = _str(entries[leaf].get("sessionId"))
    if session is None:
        session = next((s for i in sorted(branch) if (s := _str(entries[i].get("sessionId")))),
                       None)
    messages = _finish(drafts)
    for m in messages:
        m.channel = channel
    # A line's second, third, ... message (base#2) was said where the line was.
    said_in = {m.message_id: said for m in [*messages, *summaries] if m.message_id and (
        said := said_in.get(m.message_id) or said_in.get(m.message_id.rpartition("#")[0]))}
    return Transcript("claude-code", session, messages, summaries, dict(ignored), said_in)


def _claude_turn(entry: dict[str, Any]) -> bool:
    """A user or assistant line, or a local command's line (what the user typed or saw)."""
    kind = entry.get("type")
    if kind in TURN_ROLES:
        return isinstance(entry.get("message"), dict)
    return (kind == "system" and entry.get("subtype") == "local_command"
            and isinstance(entry.get("content"), str))


def _claude_ignored(entry: dict[str, Any], on_branch: bool, sub: bool) -> str | None:
    """Why an entry yields no message, or None when it may yield one."""
    if not _claude_turn(entry):
        kind = entry.get("type")
        return CLAUDE_NOISE.get(kind, "unknown type") if isinstance(kind, str) else "unknown type"
    if (entry.get("isSidechain") is True) != sub:
        return "sidechain"  # a subagent's turns written into the parent's file (Claude Code 1.x)
    if entry.get("isMeta"):
        return "meta"  # expanded skills and commands, hook context: Claude Code's words
    message = entry.get("message")
    if entry.get("isApiErrorMessage") or (isinstance(message, dict)
                                          and message.get("model") == "<synthetic>"):
        return "synthetic"  # Claude Code's words, not the model's
    return None if on_branch else "abandoned branch"


def _claude_compaction_agent(turns: list[dict[str, Any]]) -> bool:
    """Whether the first prompt a subagent was given is Claude Code's compaction task."""
    for entry in turns:
        if entry.get("type") == "user" and not entry.get("isMeta"):
            texts, _ = _claude_user_blocks(entry["message"].get("content"))
            return "\n".join(texts).lstrip().startswith(CLAUDE_COMPACT_PROMPT)
    return False


def _claude_branch(entries: list[dict[str, Any]], where: dict[str, int],
                   sub: bool) -> tuple[set[int], int | None]:
    """The entries of the conversation, and its last turn.

    A rewind or an edited prompt leaves the abandoned branch in the file: only what leads
    to the last turn is the conversation. A compaction boundary has no parent but names
    the pre-compaction leaf as its logicalParentUuid. A parent whose line is torn or
    missing is bridged to the nearest earlier entry rather than losing all before it.
    The branch is then completed along the tool-use graph: Claude Code chains each line
    of a parallel batch of tool calls to the one before, and each result to its own
    tool_use line, so the path from the last turn passes through only the last result.
    """
    def live(j: int) -> bool:
        return (entries[j].get("isSidechain") is True) == sub

    leaf = next((i for i in range(len(entries) - 1, -1, -1)
                 if _claude_turn(entries[i]) and live(i)), None)
    branch: set[int] = set()
    i = leaf
    while i is not None and i not in branch:
        branch.add(i)
        parent = entries[i].get("parentUuid") or entries[i].get("logicalParentUuid")
        if not isinstance(parent, str):
            break
        if parent in where:
            i = where[parent]
        else:
            i = next((j for j in range(i - 1, -1, -1)
                      if isinstance(entries[j].get("uuid"), str) and live(j)), None)
    # Every line of an API message on the branch (its other tool_use lines), ...
    messages = {mid for i in branch if (mid := _claude_message_id(entries[i]))}
    uses: set[str] = set()
    answered: set[str] = set()
    for j, entry in enumerate(entries):
        if j in branch or (live(j) and _claude_message_id(entry) in messages):
            branch.add(j)
            uses.update(_claude_ids(entry, "assistant", "tool_use", "id"))
            answered.update(_claude_ids(entry, "user", "tool_result", "tool_use_id"))
    # ... and the result of each of their tool calls not answered on the branch itself.
    waiting = uses - answered
    for j, entry in enumerate(entries):
        if j not in branch and live(j) and waiting:
            results = _claude_ids(entry, "user", "tool_result", "tool_use_id")
            if results & waiting:
                branch.add(j)
                waiting -= results
    return branch, leaf


def _claude_message_id(entry: dict[str, Any]) -> str | None:
    message = entry.get("message")
    if entry.get("type") != "assistant" or not isinstance(message, dict):
        return None
    return _str(message.get("id"))


def _claude_ids(entry: dict[str, Any], kind: str, block: str, key: str) -> set[str]:
    """The ids (`key`) of the `block` blocks of a `kind` line."""
    message = entry.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if entry.get("type") != kind or not isinstance(content, list):
        return set()
    return {b[key] for b in content
            if isinstance(b, dict) and b.get("type") == block and _str(b.get(key))}


def _claude_assistant(draft: _Draft, content: Any) -> str | None:
    """Add an assistant line's parts to its message; why it added nothing, else None."""
    if isinstance(content, str):
        return None if draft.add("text:" + content, content) else "empty"
    added = thinking = repeated = False
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        key = part = ""
        if kind == "text" and isinstance(block.get("text"), str):
            key, part = "text:" + block["text"], block["text"]
        elif kind in ("tool_use", "server_tool_use"):
            part = _tool_line(block.get("name"), block.get("input"))
            key = "tool:" + (_str(block.get("id")) or part)
        elif kind in ("thinking", "redacted_thinking"):
            thinking = True  # the model's private reasoning: not the conversation
            continue
        if draft.add(key, part):
            added = True
        elif key in draft.seen:
            repeated = True
    if added:
        return None
    return "duplicate line" if repeated else "thinking" if thinking else "empty"


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


def _claude_said(text: str) -> list[tuple[str, str]]:
    """What a user line (or a local command's line) says, as (role, content) units in
    order, without Claude Code's harness text."""
    text = _HARNESS_LINE.sub("", _HARNESS_BLOCK.sub("", text)).strip()
    units: list[tuple[str, str]] = []
    command: int | None = None  # the unit of the last slash command, for its arguments

    def plain(piece: str) -> None:
        if piece.strip():
            units.append(("user", piece.strip()))

    start = 0
    for match in _COMMAND_TAG.finditer(text):
        plain(text[start:match.start()])
        start = match.end()
        tag, body = match.group(1), match.group(2).strip()
        if tag == "command-name" and body:
            units.append(("user", body if body.startswith("/") else "/" + body))
            command = len(units) - 1
        elif tag == "command-args":
            if body and command is not None:
                units[command] = ("user", f"{units[command][1]} {body}")
        elif tag == "bash-input" and body:
            units.append(("user", "!" + body))
        elif tag.endswith(("stdout", "stderr")):
            out = _squash(body, TOOL_OUTPUT_CHARS)
            if out and out != CLAUDE_NO_OUTPUT:
                units.append(("tool", out))
    plain(text[start:])
    return units


def _claude_summary(text: str) -> str:
    """A compaction summary without Claude Code's preamble and closing instructions."""
    match = _CONTINUED.match(text)
    lines = (text[match.end():] if match else text).strip().split("\n")
    while lines and lines[-1].strip().startswith(CLAUDE_SUMMARY_TAIL):
        lines.pop()
        while lines and not lines[-1].strip():
            lines.pop()
    return "\n".join(lines).strip()


# --- Codex CLI -----------------------------------------------------------------------------

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
            self.recognised = _sniff_line(obj) == "codex"
        reason = self._line(obj, number)
        if reason:
            self.ignored[reason] += 1

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
        kept = [draft for draft, key in pairs if key is None or not self._pair(source, key)]
        self._drafts += kept
        return None if kept else "duplicate item"

    def _pair(self, source: str, key: tuple[str, ...]) -> bool:
        """True when a record of the other source waits with this key (the two are one
        message: the twin is used up); else this record waits for its own twin."""
        twin = ("event" if source == "response" else "response", *key)
        waiting = self._unpaired.get(twin, 0)
        if waiting:
            if waiting == 1:
                del self._unpaired[twin]
            else:
                self._unpaired[twin] = waiting - 1
            return True
        mine = (source, *key)
        self._unpaired[mine] = self._unpaired.pop(mine, 0) + 1  # the newest goes last
        if len(self._unpaired) > CODEX_PAIRING:
            del self._unpaired[next(iter(self._unpaired))]
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


# --- Gemini CLI ----------------------------------------------------------------------------

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
        name = _jsonl_name(obj, where)
        if role is None and name is not None:
            role = "user"  # a chat's member: one of the people, not the assistant
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
                                   created_at=created, tags=[t.strip() for t in tags],
                                   name=name))
    return Transcript("jsonl", None, messages)  # none: an empty file, nothing to keep


def _jsonl_name(obj: dict[str, Any], where: str) -> str | None:
    """The speaker: `name` (OpenAI's chat format) or its alias `speaker`."""
    given = [key for key in ("name", "speaker") if obj.get(key) is not None]
    if len(given) == 2 and obj["name"] != obj["speaker"]:
        raise DataError(f"{where}: 'name' and 'speaker' are the same field: give one")
    if not given:
        return None
    name = obj[given[0]]
    if not isinstance(name, str) or not _clean_name(name):
        raise DataError(f"{where}: {given[0]!r} must be a string of 1-{MAX_NAME} characters "
                        "without control characters")
    return name.strip()


def _clean_name(name: str) -> bool:
    """1-128 characters, not all blank, none a control character (nor a lone surrogate)."""
    return (0 < len(name) <= MAX_NAME and bool(name.strip())
            and not any(unicodedata.category(c) in ("Cc", "Cs") for c in name))


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
    nth: int = 1  # the first, second, ... message of its line
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


def _unit(base: str | None, stamp: str | None, items: list[tuple[str, str]],
          first: int = 1) -> list[_Draft]:
    """Drafts for the messages one source entry yields: ids base, base#2, base#3, ...
    (none without a base: the ingest layer derives them from what was said)."""
    drafts = []
    for k, (role, content) in enumerate(items, first):
        mid = None if base is None else base if k == 1 else f"{base}#{k}"
        draft = _Draft(role, mid, stamp)
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
    if transcript.said_in:
        transcript.said_in = {_unicode(k): _unicode(v) for k, v in transcript.said_in.items()}
    return transcript


def _unicode(text: str) -> str:
    return text if _encodable(text) else _SURROGATE.sub("\ufffd", text)


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


TOOL_CALL = "[tool "  # how a tool call reads in a stored message (a summary weighs it)


def _tool_line(name: Any, args: Any) -> str:
    """`[tool NAME] what it was asked`: the command, path or pattern, else its arguments."""
    label = " ".join(name.split()) if isinstance(name, str) and name.strip() else "?"
    detail = _tool_detail(args)
    return f"{TOOL_CALL}{label}] {detail}" if detail else f"{TOOL_CALL}{label}]"


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


def _objects(text: str, ignored: Counter[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """The JSON object lines of an agent's file, with their numbers; the others counted.

    The last line of a file being written may be torn: without its newline yet, it is
    not valid JSON. It is counted apart, so that a reader knows to come back for it.
    """
    last = text.count("\n") + 1  # the number of a last line without a newline
    for number, line in _lines(text):
        obj = _object(line)
        if obj is not None:
            yield number, obj
        elif number == last and _json(line) is None:
            ignored["torn last line"] += 1
        else:
            ignored["not json"] += 1


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
