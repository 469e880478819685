"""Amp (Sourcegraph's agent): each thread one JSON file, ~/.local/share/amp/threads/T-<uuid>.json
($XDG_DATA_HOME/amp/threads), rewritten whole as the thread goes on: `{id: "T-…", title,
created: <ms>, env, messages: [...]}`. A message is `{role: user|assistant|info, messageId:
n, content: [blocks], state: {type: complete|cancelled|…}, meta: {sentAt: <ms>}?, usage}`;
its blocks are text, thinking (and redacted_thinking), tool_use `{id, name, input}` and, in
the user's message that follows, tool_result `{toolUseID, run: {status, result, error}}`.
Amp publishes no schema: this is the layout its open-source readers agree on.

A message's id is its messageId (Amp numbers a thread's messages in order); its time is
its own sentAt, else the last time before it (an answer follows its prompt), else the
thread's start. `info` messages are Amp's own notices, not the conversation.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memvault.errors import DataError
from memvault.text.transcripts.base import (
    TOOL_OUTPUT_CHARS,
    Format,
    Transcript,
    _blocks,
    _document,
    _Draft,
    _dumps,
    _epoch,
    _finish,
    _squash,
    _str,
    _text_of,
    _unit,
    _without_harness,
    data_home,
)

SNIFF_CHARS = 4096
_THREAD_ID = re.compile(r'"id"\s*:\s*"T-[0-9A-Za-z-]{8,}"')
# A tool result's output, under the names Amp's tools give it.
OUTPUT_KEYS = ("output", "content", "text", "stdout", "result", "message")


def sniff_text(text: str) -> bool:
    """A thread file: one JSON object whose id is a thread's (T-…), with its messages."""
    head = text.lstrip()[:SNIFF_CHARS]
    return head.startswith("{") and _THREAD_ID.search(head) is not None \
        and '"messages"' in text


def places(home: Path, env: Mapping[str, str]) -> list[Path]:
    return [data_home(home, env) / "amp" / "threads"]


def parse(text: str) -> Transcript:
    doc = _document(text)
    if not isinstance(doc, dict) or not isinstance(doc.get("messages"), list):
        raise DataError("not an Amp thread: expected one JSON object with its messages")
    ignored: Counter[str] = Counter()
    drafts: list[_Draft] = []
    stamp = _epoch(doc.get("created"))
    for n, message in enumerate(doc["messages"]):
        if not isinstance(message, dict):
            ignored["unknown type"] += 1
            continue
        meta = message.get("meta")
        stamp = (_epoch(meta.get("sentAt")) if isinstance(meta, dict) else None) or stamp
        role = message.get("role")
        if role not in ("user", "assistant"):
            ignored["notice" if role == "info" else "unknown type"] += 1
            continue
        number = message.get("messageId")
        base = str(number) if isinstance(number, int) and not isinstance(number, bool) \
            else f"at-{n}"  # no number: its place in the thread
        units, why = _units(role, message.get("content"))
        if units:
            drafts += _unit(base, stamp, units)
        else:
            ignored[why] += 1
    session = _str(doc.get("id"))
    return Transcript("amp", session, _finish(drafts), [], dict(ignored))


def _units(role: str, content: Any) -> tuple[list[tuple[str, str]], str]:
    """What a message said, as (role, text) units: the user's words and each tool's
    result; the assistant's text and calls in one. And why, if nothing, nothing."""
    said = _blocks(content)
    texts = [t.strip() for t in said.texts if t.strip()]
    if role == "assistant":
        lines = texts + said.calls
        return ([("assistant", "\n".join(lines))] if lines else [],
                "thinking" if said.thinking else "empty")
    words = _without_harness("\n".join(texts))
    results = [r for block in content if isinstance(block, dict)
               and block.get("type") == "tool_result" and (r := _result(block.get("run")))] \
        if isinstance(content, list) else []
    units = ([("user", words)] if words else []) + [("tool", r) for r in results]
    return units, "harness text" if texts else "empty"


def _result(run: Any) -> str:
    """A tool's result as a short line: its output; "[error] …" when it failed, and its
    status ("[cancelled]", "[rejected-by-user]") when it did not run to the end."""
    if not isinstance(run, dict):
        return ""
    status = _str(run.get("status")) or "done"
    body = run.get("error") if status == "error" else run.get("result")
    out = _squash(_output(body), TOOL_OUTPUT_CHARS)
    if status == "done":
        return out
    label = "error" if status == "error" else " ".join(status.split())[:40]
    return f"[{label}] {out}".rstrip()


def _output(body: Any) -> str:
    if isinstance(body, dict):
        for key in OUTPUT_KEYS:
            value = body.get(key)
            if isinstance(value, str | list) and (text := _text_of(value)).strip():
                return text
        return _dumps(body) if body else ""
    return _text_of(body) if isinstance(body, str | list) else ""


FORMAT = Format("amp", "Amp", places, parse=parse, sniff_text=sniff_text)
