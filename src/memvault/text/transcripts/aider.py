"""Aider: .aider.chat.history.md in each repository it ran in (Markdown, appended to).
`# aider chat started at YYYY-MM-DD HH:MM:SS` starts a session; `#### ` lines are what the
user typed (a message of several lines is several `#### ` lines); `> ` lines are Aider's
own output (its commands' results, warnings, token counts, the Ctrl-C it caught); every
other line is the model's answer. The model's thinking (`<thinking-content-…>` blocks,
`<think>` blocks, Aider's THINKING/ANSWER headings) is dropped, and so are the answers to
Aider's own questions ("Add file to the chat? (Y)es/(N)o…: all"), which it logs as the
user's lines. One file holds many sessions: each message names its own (`said_in`),
"aider-<start time>", and its id is its place in that session (the file only grows).
The times are the session's start, in the machine's local time as Aider wrote it
(taken as UTC: the file does not say which zone).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

from memvault.text.transcripts.base import Format, Transcript, _Draft, _finish, _time

STARTED = "# aider chat started at "
_STARTED = re.compile(r"^# aider chat started at (\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)\s*$")
_USER = re.compile(r"^#### ?(.*)$")
_TOOL = re.compile(r"^> ?(.*)$")
# Aider's questions, answered: logged on a user's line, but Aider's words and a key press.
_QUESTION = re.compile(r"\(Y\)es/\(N\)o.*\]:")
_THINKING = re.compile(
    r"<(thinking-content-[0-9a-f]+|think|thinking|reasoning)>.*?(?:</\1>|\Z)"
    r"|-{3,}\s*\n► \*\*THINKING\*\*.*?(?:-{3,}\s*\n► \*\*ANSWER\*\*|\Z)", re.S)


def sniff_text(text: str) -> bool:
    head = text.lstrip()[:4096]
    return head.startswith(STARTED) or (head.startswith("#### ") and "\n" in head)


def places(home: Path, env: Mapping[str, str]) -> list[Path]:
    return []  # in each repository: scan the folders that hold them


def parse(text: str) -> Transcript:
    ignored: Counter[str] = Counter()
    drafts: list[_Draft] = []
    said_in: dict[str, str] = {}
    session: str | None = None
    stamp: str | None = None
    count = 0  # the session's messages so far (their ids)
    current: _Draft | None = None

    def close() -> None:
        nonlocal current
        if current is None:
            return
        body = "\n".join(current.parts)
        thought = current.role == "assistant" and _THINKING.search(body) is not None
        body = _THINKING.sub("", body) if thought else body
        current.parts = [body.strip()] if body.strip() else []
        if current.parts:
            drafts.append(current)
            if current.message_id and session:
                said_in[current.message_id] = session
        else:
            ignored["thinking" if thought else "empty"] += 1
        current = None

    def start(role: str) -> _Draft:
        nonlocal count
        close()
        count += 1
        base = session or "aider"
        return _Draft(role, f"{base}:{count}", stamp)

    for raw in text.split("\n"):
        line = raw.rstrip()
        started = _STARTED.match(line)
        if started:
            close()
            stamp = _time(started.group(1).replace(" ", "T"))
            session = "aider-" + started.group(1).replace(" ", "T").replace(":", "")
            count = 0
            continue
        user = _USER.match(line)
        if user:
            words = user.group(1)
            if _QUESTION.search(words):
                close()
                ignored["harness text"] += 1
                continue
            if current is None or current.role != "user":
                current = start("user")
            current.parts.append("" if words.strip() == "<blank>" else words)
            continue
        tool = _TOOL.match(line)
        if tool:
            if current is not None and current.role == "assistant" and not tool.group(1):
                continue
            close()
            ignored["harness text"] += 1  # Aider's own output
            continue
        if current is None or current.role != "assistant":
            if not line.strip():
                continue
            current = start("assistant")
        current.parts.append(line)
    close()
    if session is None and not any(d.role == "user" for d in drafts):
        # Neither a session's start nor a line the user typed: not Aider's history.
        return Transcript("aider", None, [], [], {"not aider": len(drafts)})
    return Transcript("aider", session, _finish(drafts), [], dict(ignored), said_in)


FORMAT = Format("aider", "Aider", places, parse=parse, sniff_text=sniff_text)
