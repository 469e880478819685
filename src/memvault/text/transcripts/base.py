"""What every transcript reader shares: the Transcript, drafts of messages, tool lines,
times, and lenient JSON reading (pure functions)."""

from __future__ import annotations

import json
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memvault.model.records import NewMessage

SNIFF_LINES = 50
TOOL_INPUT_CHARS = 200
TOOL_OUTPUT_CHARS = 500
# The argument that says what a tool call did, under the names the agents' tools use.
TOOL_KEYS = ("command", "cmd", "file_path", "absolute_path", "notebook_path", "pattern",
             "path", "dir_path", "url", "query", "description", "prompt", "input")
SHELLS = frozenset({"bash", "sh", "zsh", "dash", "fish"})

TURN_ROLES = ("user", "assistant")
MAX_NAME = 128
_UTC_SUFFIX = re.compile(r"(?:[Zz]|[+-]00:?00)$")
_WORD = re.compile(r"\S+")
_NONBLANK = re.compile(r"\S")
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class Format:
    """One agent's transcripts, as the registry knows them (its module defines FORMAT).

    `sniff_line` recognises one JSON line of its files (probed in registry order, up to
    SNIFF_LINES lines), `sniff_text` the start of a file that is not JSON lines (and a
    JSON document's shape), `sniff_path` a database or a folder that is the agent's store.
    `parse` reads the text of one file; `read` a path (a database, a folder) that holds
    one or more sessions. `places` are where its sessions live on this machine (the home
    folder and the environment given), scanned by `mem ingest --scan` without a folder.
    """

    name: str
    label: str
    places: Callable[[Path, Mapping[str, str]], list[Path]]
    parse: Callable[[str], Transcript] | None = None
    read: Callable[[Path], Transcript] | None = None
    sniff_line: Callable[[dict[str, Any]], bool] | None = None
    sniff_text: Callable[[str], bool] | None = None
    sniff_path: Callable[[Path], bool] | None = None


def home_place(home: Path, env: Mapping[str, str], variable: str | None,
               *parts: str) -> Path:
    """`$variable` when set (an agent's own setting for its folder), else home/parts[0];
    then the rest of `parts` under it."""
    root = Path(env[variable]) if variable and env.get(variable) else home / parts[0]
    return root.joinpath(*parts[1:])


def data_home(home: Path, env: Mapping[str, str]) -> Path:
    """$XDG_DATA_HOME, else ~/.local/share (where XDG tools keep their data)."""
    value = env.get("XDG_DATA_HOME", "")
    return Path(value) if value.startswith("/") else home / ".local" / "share"


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


def _nothing(fmt: str, transcript: Transcript) -> str:
    """Why a transcript is refused: it has no message (and what its lines were)."""
    why = ", ".join(f"{n} {reason}" for reason, n in
                    sorted(transcript.ignored.items(), key=lambda kv: (-kv[1], kv[0])))
    return (f"no {fmt} messages in the transcript ({transcript.skipped} lines or entries "
            f"skipped{': ' if why else ''}{why})")


def _clean_name(name: str) -> bool:
    """1-128 characters, not all blank, none a control character (nor a lone surrogate)."""
    return (0 < len(name) <= MAX_NAME and bool(name.strip())
            and not any(unicodedata.category(c) in ("Cc", "Cs") for c in name))


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


# A message named by what it says: its id is SAID and where in the conversation it was
# said (cursor.Said: SAID + "<turn>.<how-manyth>"), and the ingest layer makes it a keyed
# digest of the role and the words, with that place (ops.ingest.with_ids). Where two
# sources hold one conversation (Cursor's transcript and its chat store), each names a
# message alike, whichever is read first; a prefix (a subagent's channel) is kept.
SAID = "\0said#"


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


def _epoch(value: Any) -> str | None:
    """A time given as a number since the epoch (milliseconds, or seconds when it is too
    small to be milliseconds), as ISO-8601 UTC; None when it is no such number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    seconds = value / 1000 if abs(value) >= 1e11 else float(value)
    try:
        dt = datetime.fromtimestamp(seconds, UTC)
    except (OverflowError, OSError, ValueError):
        return None
    return dt.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _when(value: Any) -> str | None:
    """A time as agents write it: ISO-8601, or a number since the epoch."""
    return _time(value) if isinstance(value, str) else _epoch(value)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


# --- what the newer agents share -----------------------------------------------------------

# Blocks the harness puts into a user's message (reminders, the environment, a hook's
# context): not the user's words. Removed with what they hold; the rest of the text stays.
HARNESS_TAGS = ("system-reminder", "system_reminder", "environment_details",
                "environment_context", "hook_context", "user_info", "additional_data",
                "user-prompt-submit-hook")
_HARNESS_TAGGED = re.compile(r"<(" + "|".join(map(re.escape, HARNESS_TAGS))
                             + r")(?:\s[^>]*)?>.*?</\1>", re.S)
# The user's own words, where the harness wraps them among its context (Cursor).
_USER_QUERY = re.compile(r"<user_query>(.*?)</user_query>", re.S)


def _without_harness(text: str) -> str:
    """A user's text without the harness's blocks; only the query where one is marked."""
    queries = _USER_QUERY.findall(text)
    if queries:
        text = "\n".join(queries)
    return _HARNESS_TAGGED.sub("", text).strip()


@dataclass
class Said:
    """What a message's content blocks hold: text, tool calls (as tool lines), tool
    results (shortened, "[error] " for a failure), and whether there was reasoning."""

    texts: list[str] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    results: list[str] = field(default_factory=list)
    thinking: bool = False


TEXT_BLOCKS = ("text", "input_text", "output_text")
CALL_BLOCKS = ("tool_use", "toolCall", "tool-call", "tool_call", "function_call",
               "server_tool_use")
RESULT_BLOCKS = ("tool_result", "toolResult", "tool-result", "function_call_output")
THINKING_BLOCKS = ("thinking", "redacted_thinking", "reasoning")


def _blocks(content: Any) -> Said:
    """The content of a message in the shapes the model APIs give it: a string, or a
    list of blocks (Anthropic's, OpenAI's, and the agents' own names for them)."""
    said = Said()
    if isinstance(content, str):
        said.texts.append(content)
        return said
    for block in content if isinstance(content, list) else []:
        if isinstance(block, str):
            said.texts.append(block)
            continue
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind in TEXT_BLOCKS and isinstance(block.get("text"), str):
            said.texts.append(block["text"])
        elif kind in CALL_BLOCKS:
            args = next((block[k] for k in ("input", "arguments", "args") if k in block), None)
            said.calls.append(_tool_line(block.get("name") or block.get("toolName"), args))
        elif kind in RESULT_BLOCKS:
            body = block.get("content", block.get("output"))
            out = _squash(_text_of(body) if not isinstance(body, dict) else _dumps(body),
                          TOOL_OUTPUT_CHARS)
            failed = block.get("is_error") is True or block.get("isError") is True
            if out:
                said.results.append("[error] " + out if failed else out)
        elif kind in THINKING_BLOCKS:
            said.thinking = True
    return said


def _branch(entries: list[dict[str, Any]], id_key: str, parent_key: str,
            turn: Callable[[dict[str, Any]], bool]) -> set[int] | None:
    """The entries on the path from the last turn back to the root, where entries are
    linked to their parent (a rewind or an edit leaves the abandoned branch in the file);
    None when they are not linked (file order is the order)."""
    where = {e[id_key]: i for i, e in enumerate(entries) if isinstance(e.get(id_key), str)}
    if not any(isinstance(e.get(parent_key), str) for e in entries):
        return None
    leaf = next((i for i in range(len(entries) - 1, -1, -1) if turn(entries[i])), None)
    branch: set[int] = set()
    i = leaf
    while i is not None and i not in branch:
        branch.add(i)
        parent = entries[i].get(parent_key)
        if not isinstance(parent, str):
            break
        # A parent whose line is torn or missing: bridged to the entry before.
        i = where[parent] if parent in where else next(
            (j for j in range(i - 1, -1, -1) if isinstance(entries[j].get(id_key), str)), None)
    return branch
