"""Cline and Roo Code: a task folder, tasks/<task id>/ in the extension's storage
(VS Code's globalStorage/saoudrizwan.claude-dev or rooveterinaryinc.roo-cline, the
Cline CLI's ~/.cline/data), holding ui_messages.json (what the user saw: `{ts, type:
"say"|"ask", say|ask, text}`) and api_conversation_history.json (what the model was
sent). A task is one session, named by its folder; ui_messages.json is read when it is
there (times, the user's task and feedback, the model's text and questions, its tool
calls, commands and their output), else the API history (the user's text without the
environment details Cline adds, tool results in Cline's "[tool] Result:" lines). Cline's
own notices (API requests, checkpoints, errors, resume prompts) and reasoning are not
the conversation.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memvault.errors import DataError, NotFound
from memvault.text.transcripts.base import (
    TOOL_OUTPUT_CHARS,
    Format,
    Transcript,
    _blocks,
    _Draft,
    _epoch,
    _finish,
    _json,
    _squash,
    _str,
    _tool_line,
    _without_harness,
)

UI = "ui_messages.json"
API = "api_conversation_history.json"
EXTENSIONS = ("saoudrizwan.claude-dev", "rooveterinaryinc.roo-cline")
EDITORS = ("Code", "Code - Insiders", "VSCodium", "Cursor", "Windsurf")
MAX_FILE = 256 << 20
USER_SAYS = ("task", "user_feedback")
MODEL_SAYS = ("text", "completion_result", "followup", "plan_mode_respond")
OUTPUTS = ("command_output", "mcp_server_response", "browser_action_result")
CALLS = ("tool", "command", "use_mcp_server", "browser_action", "browser_action_launch",
         "new_task")
# Cline's wrappers of what the user said in the API history, and of a tool's result.
_WRAPPED = re.compile(r"<(task|feedback|answer|user_message)>(.*?)</\1>", re.S)
_RESULT = re.compile(r"^\[([^\]\n]{1,200})\] Result:\s*", re.S)


def sniff_text(text: str) -> bool:
    """ui_messages.json: a JSON list of Cline's messages (ts and say or ask)."""
    head = text.lstrip()[:2048]
    return head.startswith("[") and '"ts"' in head and ('"say"' in head or '"ask"' in head)


def sniff_path(path: Path) -> bool:
    if path.is_dir():
        return (path / UI).is_file() or (path / API).is_file()
    return path.name in (UI, API) and path.is_file()


def places(home: Path, env: Mapping[str, str]) -> list[Path]:
    roots = [home / ".config", home / "Library" / "Application Support"]
    if env.get("APPDATA"):
        roots.append(Path(env["APPDATA"]))
    found = [root / editor / "User" / "globalStorage" / ext / "tasks"
             for root in roots for editor in EDITORS for ext in EXTENSIONS]
    return [*found, home / ".cline" / "data" / "tasks"]


def read(path: Path) -> Transcript:
    """A task folder (or either of its files): ui_messages.json, else the API history."""
    folder = path if path.is_dir() else path.parent
    ui, api = folder / UI, folder / API
    if ui.is_file():
        transcript = parse(_read(ui))
    elif api.is_file():
        transcript = parse_api(_read(api))
    else:
        raise NotFound(f"no {UI} or {API} in {folder}")
    transcript.session_id = folder.name
    return transcript


def _read(path: Path) -> str:
    try:
        with path.open("rb") as f:
            data = f.read(MAX_FILE + 1)
    except OSError as exc:
        raise NotFound(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_FILE:
        raise DataError(f"{path} is larger than {MAX_FILE >> 20} MiB")
    return data.decode("utf-8", "replace")


def parse(text: str) -> Transcript:
    """ui_messages.json's text."""
    doc = _json(text)
    if not isinstance(doc, list):
        raise DataError("a Cline task's ui_messages.json is a JSON list of messages")
    ignored: Counter[str] = Counter()
    drafts: list[_Draft] = []
    for n, item in enumerate(doc, 1):
        if not isinstance(item, dict) or item.get("type") not in ("say", "ask"):
            ignored["unknown type"] += 1
            continue
        kind = item.get(item["type"])
        ts = item.get("ts")
        mid = str(ts) if isinstance(ts, int) and not isinstance(ts, bool) else f"ui-{n}"
        role, content = _ui(kind, _str(item.get("text")) or "")
        draft = _Draft(role or "", mid, _epoch(ts))
        if role and draft.add("", content):
            drafts.append(draft)
        else:
            ignored[content if not role else "empty"] += 1
    return Transcript("cline", None, _finish(drafts), [], dict(ignored))


def _ui(kind: Any, text: str) -> tuple[str | None, str]:
    """(role, content) of one ui message; (None, why it is ignored) for the others."""
    if kind in USER_SAYS:
        return "user", text
    if kind == "reasoning":
        return None, "thinking"
    if kind in MODEL_SAYS:
        doc = _json(text) if text.lstrip().startswith("{") else None
        if isinstance(doc, dict):  # a question or plan: {"question"|"response", "options"}
            text = _str(doc.get("question")) or _str(doc.get("response")) or text
        return "assistant", text
    if kind in OUTPUTS:
        return "tool", _squash(text, TOOL_OUTPUT_CHARS)
    if kind in CALLS:
        doc = _json(text) if text.lstrip().startswith("{") else None
        if kind == "command":
            return "assistant", _tool_line("execute_command", {"command": text})
        if isinstance(doc, dict):
            name = _str(doc.get("tool")) or _str(doc.get("toolName")) or \
                _str(doc.get("action")) or str(kind)
            return "assistant", _tool_line(name, {k: v for k, v in doc.items()
                                                  if k not in ("tool", "content", "diff")})
        return "assistant", _tool_line(kind, text)
    return None, "notice"  # API requests, checkpoints, errors, resume prompts: Cline's own


def parse_api(text: str) -> Transcript:
    """api_conversation_history.json's text: the messages the model was sent."""
    doc = _json(text)
    if not isinstance(doc, list):
        raise DataError("a Cline task's api_conversation_history.json is a JSON list")
    ignored: Counter[str] = Counter()
    drafts: list[_Draft] = []
    for n, item in enumerate(doc, 1):
        role = item.get("role") if isinstance(item, dict) else None
        if role not in ("user", "assistant") or not isinstance(item, dict):
            ignored["unknown type"] += 1
            continue
        said = _blocks(item.get("content"))
        stamp = _epoch(item.get("ts"))
        units: list[tuple[str, str]] = []
        if role == "user":
            for piece in said.texts:
                result = _RESULT.match(piece.strip())
                if result:
                    out = _squash(_without_harness(piece.strip()[result.end():]),
                                  TOOL_OUTPUT_CHARS)
                    if out:
                        units.append(("tool", out))
                    continue
                wrapped = _WRAPPED.findall(piece)
                words = "\n".join(w for _, w in wrapped) if wrapped else piece
                words = _without_harness(words)
                if words:
                    units.append(("user", words))
            units += [("tool", r) for r in said.results]
        else:
            lines = [t.strip() for t in said.texts if t.strip()] + said.calls
            if lines:
                units.append(("assistant", "\n".join(lines)))
        for nth, (who, content) in enumerate(units, 1):
            draft = _Draft(who, f"api-{n}" if nth == 1 else f"api-{n}#{nth}", stamp)
            if draft.add("", content):
                drafts.append(draft)
        if not units:
            ignored["thinking" if said.thinking else "harness text" if said.texts
                    else "empty"] += 1
    return Transcript("cline", None, _finish(drafts), [], dict(ignored))


FORMAT = Format("cline", "Cline / Roo Code", places, parse=parse, read=read,
                sniff_text=sniff_text, sniff_path=sniff_path)
